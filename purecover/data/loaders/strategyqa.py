"""StrategyQA (official JSON): yes/no questions; ``facts`` become the question's paragraphs.

StrategyQA has no paragraphs. Its annotated ``facts`` are used as the question's own
passages (title empty, all supporting), so a ``shared`` corpus is the union of the facts of
all questions and ``gold_doc_ids`` are the question's own facts. ``decomposition`` is kept as
the oracle steps; ``term``, ``description`` and ``evidence`` go to ``meta``.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from ..example import Example, Paragraph
from ._fields import RecordView

__all__ = ["parse_strategyqa"]


def parse_strategyqa(record: Any, source: str, location: str, require_paragraphs: bool = True) -> Example:
    """One StrategyQA record → Example with answers ``["yes"]`` or ``["no"]``."""
    view = RecordView(record, source, location)
    qid = view.get("qid", str, nonempty=True, numbers_as_text=True)
    question = view.get("question", str, nonempty=True)
    raw_answer = view.get("answer", (bool, str))
    if isinstance(raw_answer, str):
        if raw_answer.strip().lower() not in ("yes", "no", "true", "false"):
            raise view.fail("answer", f"expected true/false or yes/no, got {raw_answer!r}")
        raw_answer = raw_answer.strip().lower() in ("yes", "true")
    facts = view.get("facts", list, optional=True, default=[])
    for i, fact in enumerate(facts):
        view.check(fact, f"facts[{i}]", str)
    facts = [f.strip() for f in facts if f.strip()]
    if require_paragraphs and not facts:
        raise view.fail("facts", "is empty (no passages; use a corpus file for open-domain data)")
    decomposition = view.get("decomposition", list, optional=True, default=[])
    for i, step in enumerate(decomposition):
        view.check(step, f"decomposition[{i}]", str)
    meta: dict[str, JsonValue] = {"facts": facts, "decomposition": list(decomposition)}
    for key in ("term", "description"):
        if isinstance(record.get(key), str):
            meta[key] = record[key]
    if "evidence" in record:
        meta["evidence"] = record["evidence"]
    return Example(
        qid=qid, dataset="strategyqa", question=question.strip(), answers=["yes" if raw_answer else "no"],
        paragraphs=[Paragraph(title="", text=f, is_supporting=True) for f in facts],
        supporting_titles=[], oracle_steps=[s.strip() for s in decomposition if s.strip()], meta=meta,
    )
