"""MuSiQue (official JSONL): paragraphs with ``is_supporting``, decomposition, answer aliases."""

from __future__ import annotations

import re
from typing import Any

from pydantic import JsonValue

from ..example import Example, Paragraph
from ._fields import RecordView

__all__ = ["parse_musique"]

_REF = re.compile(r"#(\d+)")


def _oracle_steps(view: RecordView, decomposition: list[Any]) -> list[str]:
    """Sub-questions with ``#k`` replaced by the k-th sub-answer, each followed by its answer."""
    answers: list[str] = []
    steps: list[str] = []
    for i, item in enumerate(decomposition):
        f = f"question_decomposition[{i}]"
        if not isinstance(item, dict):
            raise view.fail(f, "expected an object")
        q = view.check(item.get("question", ""), f"{f}.question", str)
        a = view.check(item.get("answer", ""), f"{f}.answer", str, numbers_as_text=True)

        def resolve(m: re.Match[str]) -> str:
            digits = m.group(1)  # a reference longer than 9 digits cannot point at a sub-answer
            k = int(digits) - 1 if len(digits) <= 9 else -1
            return answers[k] if 0 <= k < len(answers) else m.group(0)

        q = _REF.sub(resolve, q).replace(" >> ", " — ").strip()
        answers.append(a)
        steps.append(f"{q}: {a}" if a else q)
    return steps


def parse_musique(record: Any, source: str, location: str, require_paragraphs: bool = True) -> Example:
    """One MuSiQue record → Example (answers: answer then ``answer_aliases``)."""
    view = RecordView(record, source, location)
    qid = view.get("id", str, nonempty=True, numbers_as_text=True)
    question = view.get("question", str, nonempty=True)
    answer = view.get("answer", str, optional=True, default="", numbers_as_text=True).strip()
    answerable = view.get("answerable", bool, optional=True, default=True)
    if not answer and answerable:
        raise view.fail("answer", "missing or empty for an answerable question")
    aliases = view.get("answer_aliases", list, optional=True, default=[])
    raw_paragraphs = view.get("paragraphs", list, optional=True, default=[])
    if require_paragraphs and not raw_paragraphs:
        raise view.fail("paragraphs", "is empty (no paragraphs; use a corpus file for open-domain data)")
    paragraphs = []
    for i, item in enumerate(raw_paragraphs):
        f = f"paragraphs[{i}]"
        if not isinstance(item, dict):
            raise view.fail(f, "expected an object")
        title = view.check(item.get("title"), f"{f}.title", str)
        text = view.check(item.get("paragraph_text"), f"{f}.paragraph_text", str)
        supporting = item.get("is_supporting", False)
        view.check(supporting, f"{f}.is_supporting", bool)
        paragraphs.append(Paragraph(title=title, text=text.strip(), is_supporting=supporting))
    decomposition = view.get("question_decomposition", list, optional=True, default=[])
    answers = [answer] if answer else []
    for i, alias in enumerate(aliases):
        alias = view.check(alias, f"answer_aliases[{i}]", str, numbers_as_text=True)
        if alias.strip() and alias.strip() not in answers:
            answers.append(alias.strip())
    supporting_titles: list[str] = []
    for p in paragraphs:
        if p.is_supporting and p.title not in supporting_titles:
            supporting_titles.append(p.title)
    hops = qid.split("hop")[0] if "hop" in qid else None
    meta: dict[str, JsonValue] = {"answerable": answerable}
    if hops and hops.isdecimal() and len(hops) <= 9:  # isdigit() admits "²", which int() rejects
        meta["hops"] = int(hops)
    return Example(qid=qid, dataset="musique", question=question.strip(), answers=answers,
                   paragraphs=paragraphs, supporting_titles=supporting_titles,
                   oracle_steps=_oracle_steps(view, decomposition), meta=meta)
