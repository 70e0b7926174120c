"""Selections of any external reranker, for the ``selections:PATH=name`` evaluation method.

Two formats, resolved against the evaluation candidates into `ExternalSelection`s (qid, selected positions)
that the ``student`` baseline (`purecover.eval.baselines.StudentSelections`) cuts to each budget K:

* JSONL (``purecover select`` output, or your own): ``{qid, selected?: [k], selected_doc_ids?: [id]}``
  per line, best first. ``selected_doc_ids`` wins when both are present (ids survive a reordering of
  the candidates; positions do not); ``selected`` are 0-based positions in the evaluation candidates.
* a TREC run (``qid Q0 doc_id rank score run_name``; a ``.trec``/``.run`` file, or any file whose
  first line has six columns): each question's docs in rank order, so K keeps the top K by rank.

Questions of the file that are not evaluated are ignored; a doc id that is not among its question's
candidates, a position out of range, a repeated doc or qid, is an error naming the file and line.
Doc ids compare as strings; a candidate without ``doc_id`` is named by its 1-based position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ..data.doc_ids import candidate_doc_id
from ..data.errors import DataFormatError
from ..records import CandidateRecord
from ..utils.io import read_jsonl
from ..utils.trec import looks_like_trec, read_trec_run

__all__ = ["ExternalSelection", "read_external_selections"]


@dataclasses.dataclass(frozen=True)
class ExternalSelection:
    """One question's selection from an external file: candidate positions, best first."""

    qid: str
    selected: list[int]


def _doc_positions(question: CandidateRecord) -> dict[str, int]:
    positions: dict[str, int] = {}
    for i, doc in enumerate(question.docs):
        # a repeated id: its first candidate
        positions.setdefault(candidate_doc_id(doc, i), i)
    return positions


def read_external_selections(path: str | Path, questions: Sequence[CandidateRecord], name: str
                             ) -> dict[str, ExternalSelection]:
    """qid -> its `ExternalSelection` for the `questions` (their candidates) that `path` covers; `name` is
    the method's name for messages. Module docstring for the formats."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"method {name}: {path} does not exist")
    by_qid = {q.qid: q for q in questions}
    if looks_like_trec(path):
        return _from_trec(path, by_qid)
    return _from_jsonl(path, by_qid)


def _from_trec(path: Path, by_qid: dict[str, CandidateRecord]) -> dict[str, ExternalSelection]:
    out: dict[str, ExternalSelection] = {}
    for qid, ranked in read_trec_run(path).items():
        question = by_qid.get(qid)
        if question is None:
            continue
        positions = _doc_positions(question)
        selected = []
        for doc_id, lineno in ranked:
            if doc_id not in positions:
                raise DataFormatError(str(path), str(lineno), "doc_id",
                                      f"{doc_id!r} is not among the {len(positions)} candidates of question {qid!r}")
            selected.append(positions[doc_id])
        out[qid] = ExternalSelection(qid, selected)
    return out


def _from_jsonl(path: Path, by_qid: dict[str, CandidateRecord]) -> dict[str, ExternalSelection]:
    out: dict[str, ExternalSelection] = {}
    seen: dict[str, int] = {}
    for lineno, rec in read_jsonl(path):
        def bad(field: str, problem: str, lineno: int = lineno) -> DataFormatError:
            return DataFormatError(str(path), str(lineno), field, problem)

        qid = rec.get("qid")
        if isinstance(qid, bool) or not isinstance(qid, (str, int)):
            raise bad("qid", "missing or not a string or integer")
        qid = str(qid)
        if qid in seen:
            raise bad("qid", f"duplicate {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        question = by_qid.get(qid)
        if question is None:
            continue
        if rec.get("selected_doc_ids") is not None:
            field, values = "selected_doc_ids", rec["selected_doc_ids"]
        elif rec.get("selected") is not None:
            field, values = "selected", rec["selected"]
        else:
            raise bad("selected", "neither 'selected' (positions) nor 'selected_doc_ids' is given")
        if not isinstance(values, list):
            raise bad(field, f"not a list (got {type(values).__name__})")
        n = len(question.docs)
        positions = _doc_positions(question) if field == "selected_doc_ids" else {}
        selected: list[int] = []
        for i, value in enumerate(values):
            if field == "selected":
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
                    raise bad(f"selected[{i}]", f"{value!r} is not a position 0..{n - 1} of question {qid!r}'s "
                                                f"{n} candidates")
                k = value
            else:
                if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) not in positions:
                    raise bad(f"selected_doc_ids[{i}]", f"{value!r} is not among the {n} candidates of question "
                                                        f"{qid!r}")
                k = positions[str(value)]
            if k in selected:
                raise bad(f"{field}[{i}]", f"{value!r} is selected twice")
            selected.append(k)
        out[qid] = ExternalSelection(qid, selected)
    return out
