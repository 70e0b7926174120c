"""FlashRAG's unified JSONL: ``{id, question, golden_answers, metadata}``.

``golden_answers`` become the answers (first = main answer). When ``metadata`` carries the
source dataset's own structure (HotpotQA/2Wiki ``context`` + ``supporting_facts``, MuSiQue
``paragraphs``, StrategyQA ``facts``), the question's paragraphs and gold titles are taken
from it, with the same rules as the official loaders; otherwise the question has no
paragraphs and needs a corpus file.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from ..errors import DataFormatError
from ..example import Example
from ._fields import RecordView
from .hotpotqa import _parse_multihop
from .musique import parse_musique
from .strategyqa import parse_strategyqa

__all__ = ["parse_flashrag"]


def _from_metadata(view: RecordView, qid: str, question: str, answer: str, meta: dict[str, JsonValue],
                   dataset: str) -> Example | None:
    if "context" in meta:
        pseudo = {"_id": qid, "question": question, "answer": answer, "context": meta["context"],
                  "supporting_facts": meta.get("supporting_facts") or []}
        example, _ = _parse_multihop(pseudo, view.source, view.location, dataset, require_paragraphs=False)
        return example
    if "paragraphs" in meta:
        pseudo = {"id": qid, "question": question, "answer": answer, "paragraphs": meta["paragraphs"],
                  "question_decomposition": meta.get("question_decomposition") or [],
                  "answerable": meta.get("answerable", True)}
        example = parse_musique(pseudo, view.source, view.location, require_paragraphs=False)
        example.dataset = dataset
        return example
    if "facts" in meta:
        pseudo = {"qid": qid, "question": question, "answer": answer.lower() in ("yes", "true"),
                  "facts": meta["facts"], "decomposition": meta.get("decomposition") or []}
        example = parse_strategyqa(pseudo, view.source, view.location, require_paragraphs=False)
        example.dataset = dataset
        return example
    return None


def parse_flashrag(record: Any, source: str, location: str, dataset: str = "flashrag",
                   require_paragraphs: bool = False) -> Example:
    """One FlashRAG record → Example labelled with `dataset` (its scoring rules apply downstream)."""
    view = RecordView(record, source, location)
    qid = view.first(("id", "_id", "qid"), str, nonempty=True, numbers_as_text=True)
    question = view.get("question", str, nonempty=True).strip()
    golden = view.get("golden_answers", list, nonempty=True)
    answers: list[str] = []
    for i, a in enumerate(golden):
        a = view.check(a, f"golden_answers[{i}]", str, numbers_as_text=True).strip()
        if a and a not in answers:
            answers.append(a)
    if not answers:
        raise view.fail("golden_answers", "has no non-empty answer")
    meta = view.get("metadata", dict, optional=True, default={})
    try:
        example = _from_metadata(view, qid, question, answers[0], meta, dataset)
    except DataFormatError as exc:
        raise DataFormatError(source, location, f"metadata.{exc.field}" if exc.field else "metadata",
                              exc.problem) from None
    if example is None:
        example = Example(qid=qid, dataset=dataset, question=question, answers=answers)
    else:
        example.answers = answers
    if require_paragraphs and not example.paragraphs:
        raise view.fail("metadata", "has no paragraphs (context/paragraphs/facts); use a corpus file")
    for key in ("type", "level"):
        if isinstance(meta.get(key), str):
            example.meta[key] = meta[key]
    return example
