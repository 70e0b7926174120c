"""FlashRAG's unified JSONL: ``{id, question, golden_answers, metadata}``.

``golden_answers`` become the answers (first = main answer). When ``metadata`` carries the
source dataset's own structure (HotpotQA/2Wiki ``context`` + ``supporting_facts``, MuSiQue
``paragraphs``, StrategyQA ``facts``), the question's paragraphs and gold titles are taken
from it, with the same rules as the official loaders; otherwise the question has no
paragraphs and needs a corpus file.

Gold without paragraphs (the usual shape of one's own data next to a separate corpus):
``metadata.supporting_facts`` alone, as ``[[title, sent_id], ...]``, ``{"title": [...],
"sent_id": [...]}`` or a list of titles, gives the gold titles; the data stage maps them to the
corpus passages of those titles. The oracle steps then come from what the record has besides
the paragraphs' sentences: 2Wiki ``evidences`` triples (``[subject, relation, object]`` → one
step "subject relation object"), else a ``decomposition`` / ``question_decomposition`` list.
A record with neither has no oracle steps (``teacher.steps: model`` labels it).
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


def _title_facts(value: JsonValue) -> JsonValue:
    """Titles without sentence ids (a list of titles, or ``{"title": [...]}``) as ``[[title, -1], ...]``;
    the other shapes pass through unchanged."""
    if isinstance(value, dict) and "sent_id" not in value and isinstance(value.get("title"), list):
        value = value["title"]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [[v, -1] for v in value]
    return value


def _steps_without_context(view: RecordView, meta: dict[str, JsonValue]) -> list[str]:
    """Oracle steps from 2Wiki ``evidences`` triples or a decomposition list (see the module docstring)."""
    evidences = meta.get("evidences")
    if isinstance(evidences, list) and evidences:
        steps = []
        for i, triple in enumerate(evidences):
            if not isinstance(triple, list) or len(triple) != 3 or not all(isinstance(x, str) for x in triple):
                raise view.fail(f"evidences[{i}]", "expected [subject, relation, object] strings")
            step = " ".join(x.strip() for x in triple if x.strip())
            if step and step not in steps:
                steps.append(step)
        return steps
    for key in ("decomposition", "question_decomposition"):
        items = meta.get(key)
        if isinstance(items, list) and items:
            steps = []
            for i, item in enumerate(items):
                text = item.get("question") if isinstance(item, dict) else item
                if not isinstance(text, str):
                    raise view.fail(f"{key}[{i}]", "expected a string or an object with 'question'")
                if text.strip() and text.strip() not in steps:
                    steps.append(text.strip())
            return steps
    return []


def _from_metadata(view: RecordView, qid: str, question: str, answer: str, meta: dict[str, JsonValue],
                   dataset: str) -> Example | None:
    if "context" in meta or "supporting_facts" in meta:
        pseudo = {"_id": qid, "question": question, "answer": answer, "context": meta.get("context") or [],
                  "supporting_facts": _title_facts(meta.get("supporting_facts") or [])}
        example, _ = _parse_multihop(pseudo, view.source, view.location, dataset, require_paragraphs=False)
        if not example.paragraphs:
            example.oracle_steps = _steps_without_context(view, meta)
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
