"""HotpotQA and 2WikiMultiHopQA: the official JSON (also the Hub's dict-of-columns layout).

Record: ``_id`` (or ``id``), ``question``, ``answer``, ``context`` as ``[[title, [sentences]]]``
(or ``{"title": [...], "sentences": [[...]]}``), ``supporting_facts`` as ``[[title, sent_id]]``
(or ``{"title": [...], "sent_id": [...]}``). A supporting fact must name a context title;
a sentence index outside the paragraph is kept out of the oracle steps and counted in
``meta["bad_sentence_ids"]`` (the official files have a handful).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import JsonValue

from ..example import Example, Paragraph
from ..readers import iter_jsonl
from ._fields import RecordView, join_sentences

__all__ = ["load_2wiki_aliases", "parse_2wiki", "parse_hotpotqa"]


def _rows(view: RecordView, value: Any, field: str, second: str) -> list[Any]:
    """Pairs as rows: the official ``[[title, x], ...]`` or the Hub's ``{"title": [...], second: [...]}``."""
    if isinstance(value, dict):
        titles = view.check(value.get("title"), f"{field}.title", list)
        others = view.check(value.get(second), f"{field}.{second}", list)
        if len(titles) != len(others):
            raise view.fail(field, f"{len(titles)} titles but {len(others)} {second} entries")
        return [[t, o] for t, o in zip(titles, others)]
    return view.check(value, field, list)


def _context_pairs(view: RecordView, value: Any, field: str) -> list[tuple[str, list[str]]]:
    value = _rows(view, value, field, "sentences")
    pairs = []
    for i, item in enumerate(value):
        f = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 2:
            raise view.fail(f, "expected [title, [sentences]]")
        title = view.check(item[0], f"{f}[0]", str)
        sentences = view.check(item[1], f"{f}[1]", list)
        for j, s in enumerate(sentences):
            view.check(s, f"{f}[1][{j}]", str)
        pairs.append((title, sentences))
    return pairs


def _supporting_pairs(view: RecordView, value: Any, field: str) -> list[tuple[str, int]]:
    value = _rows(view, value, field, "sent_id")
    pairs = []
    for i, item in enumerate(value):
        f = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 2:
            raise view.fail(f, "expected [title, sentence_index]")
        pairs.append((view.check(item[0], f"{f}[0]", str), view.check(item[1], f"{f}[1]", int)))
    return pairs


def _parse_multihop(record: Any, source: str, location: str, dataset: str,
                    require_paragraphs: bool) -> tuple[Example, RecordView]:
    view = RecordView(record, source, location)
    qid = view.first(("_id", "id"), str, nonempty=True, numbers_as_text=True)
    question = view.get("question", str, nonempty=True)
    answer = view.get("answer", str, nonempty=True, numbers_as_text=True).strip()
    context = _context_pairs(view, view.get("context", (list, dict), optional=True, default=[]), "context")
    if require_paragraphs and not context:
        raise view.fail("context", "is empty (no paragraphs; use a corpus file for open-domain data)")
    facts = _supporting_pairs(view, view.get("supporting_facts", (list, dict), optional=True, default=[]),
                              "supporting_facts")
    by_title: dict[str, list[int]] = {}
    for i, (title, _) in enumerate(context):
        by_title.setdefault(title, []).append(i)
    supporting: list[str] = []
    steps: list[str] = []
    bad_ids = 0
    for i, (title, sent_id) in enumerate(facts):
        if context and title not in by_title:
            raise view.fail(f"supporting_facts[{i}][0]", f"title {title!r} is not in the context")
        if title not in supporting:
            supporting.append(title)
        if context:
            sentences = context[by_title[title][0]][1]
            if 0 <= sent_id < len(sentences):
                sentence = sentences[sent_id].strip()
                if sentence and sentence not in steps:
                    steps.append(sentence)
            else:
                bad_ids += 1
    paragraphs = [
        Paragraph(title=t, text=join_sentences(s), is_supporting=t in supporting, sentences=list(s))
        for t, s in context
    ]
    meta: dict[str, JsonValue] = {k: record[k] for k in ("type", "level") if isinstance(record.get(k), str)}
    if bad_ids:
        meta["bad_sentence_ids"] = bad_ids
    example = Example(qid=qid, dataset=dataset, question=question.strip(), answers=[answer],
                      paragraphs=paragraphs, supporting_titles=supporting, oracle_steps=steps, meta=meta)
    return example, view


def parse_hotpotqa(record: Any, source: str, location: str, require_paragraphs: bool = True) -> Example:
    """One HotpotQA record → Example (answers: the single gold answer)."""
    example, _ = _parse_multihop(record, source, location, "hotpotqa", require_paragraphs)
    return example


def parse_2wiki(record: Any, source: str, location: str, require_paragraphs: bool = True,
                aliases: dict[str, list[str]] | None = None) -> Example:
    """One 2WikiMultiHopQA record → Example; answer aliases from `aliases` by ``answer_id``."""
    example, view = _parse_multihop(record, source, location, "2wiki", require_paragraphs)
    answer_id = view.get("answer_id", str, optional=True)
    if answer_id:
        example.meta["answer_id"] = answer_id
        for alias in (aliases or {}).get(answer_id, []):
            if alias not in example.answers:
                example.answers.append(alias)
    evidences = record.get("evidences")
    if isinstance(evidences, list):
        example.meta["evidences"] = evidences
    return example


def load_2wiki_aliases(path: str | Path) -> dict[str, list[str]]:
    """Read 2Wiki's ``id_aliases.json`` (JSON lines ``{Q_id, aliases, demonyms}``) into Q_id → names."""
    table: dict[str, list[str]] = {}
    for location, obj in iter_jsonl(path):
        view = RecordView(obj, str(path), location)
        qid = view.get("Q_id", str, nonempty=True)
        names = list(view.get("aliases", list, optional=True, default=[]))
        names += list(view.get("demonyms", list, optional=True, default=[]))
        table[qid] = [n for n in names if isinstance(n, str) and n.strip()]
    return table
