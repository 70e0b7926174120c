"""What the baseline selectors (`purecover.eval.baselines`) share: their interface (`BaselineSelector`,
`StoredSelection`), the checks of their arguments, the text a passage is embedded or scored as, the tie rule
(the earlier candidate wins) and the per-question embedding cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from purecover.data.passage import passage_text
from purecover.data.retrieval.dense import encode_texts
from purecover.records import CandidateDoc, CandidateRecord, LabelRecord


class StoredSelection(Protocol):
    """A subset stored for one question (a student's `purecover.records.SelectionRecord`, an external
    reranker's selection, or a teacher's `purecover.records.LabelRecord`): candidate positions, best first."""

    @property
    def qid(self) -> str: ...

    @property
    def selected(self) -> list[int]: ...


@runtime_checkable
class BaselineSelector(Protocol):
    """A selector: candidate positions, best first, at most k, no duplicates."""

    name: str

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None,
               selection_record: StoredSelection | None, k: int) -> list[int]: ...


# ----------------------------------------------------------------------------- helpers

def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer ≥ 1, got {k!r}")
    return int(k)


def _check_same_qid(candidate_record: CandidateRecord, other: StoredSelection, kind: str) -> None:
    if other.qid != candidate_record.qid:
        raise ValueError(f"{kind} record qid {other.qid!r} does not match candidate record qid "
                         f"{candidate_record.qid!r}")


def doc_text(doc: CandidateDoc) -> str:
    """The text a passage is embedded or scored as: `purecover.data.passage.passage_text`
    (``title\\ntext`` with both stripped, ``text`` when untitled)."""
    return passage_text(doc.title, doc.text)


def _descending(scores: np.ndarray) -> list[int]:
    """Positions by descending score, ties by smaller position."""
    return [int(i) for i in np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")]


def _first_argmax(values: np.ndarray, available: np.ndarray) -> int:
    masked = np.where(available, values, -np.inf)
    return int(np.argmax(masked))  # np.argmax returns the first maximum


def _softmax(x: np.ndarray, temperature: float, axis: int = -1) -> np.ndarray:
    z = x / temperature
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _positions(values: Any, n_docs: int, qid: str, field: str) -> list[int]:
    if not isinstance(values, list):
        raise ValueError(f"question {qid}: {field} must be a list of candidate positions, got {values!r}")
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < n_docs:
            raise ValueError(f"question {qid}: {field} holds {v!r}, not a candidate position in 0..{n_docs - 1}")
        if int(v) in out:
            raise ValueError(f"question {qid}: {field} repeats position {int(v)}")
        out.append(int(v))
    return out


class _EmbeddingCache:
    """`encode_texts(embedder, texts)`, one encoder call per distinct list of texts, cached by the whole list.

    The cached value of a list is a function of that list alone (the encoder sees exactly it), so
    reusing it is safe: unlike a cache by single text, it never mixes vectors from differently
    composed encoder batches.
    """

    def __init__(self, embedder: Any) -> None:
        if not callable(getattr(embedder, "encode", None)):
            raise TypeError(f"embedder must have a sentence-transformers style encode(); got {type(embedder).__name__}")
        self.embedder = embedder
        self.cache: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self.cache:
            self.cache[key] = encode_texts(self.embedder, key)
        return self.cache[key]
