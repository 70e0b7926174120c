"""Baseline selectors compared with the student on the same candidates, through one interface.

Every selector answers ``select(candidate_record, label_record, selection_record, k)`` with
candidate *positions* (indices into ``candidate_record.docs``), best first, at most ``k``, no
duplicates. Records are those of docs/concepts/file-formats.md: a `purecover.records.CandidateRecord` (``candidates.jsonl``),
a `purecover.records.LabelRecord` (``labels.jsonl``) and a `StoredSelection` (a
`purecover.records.SelectionRecord` of ``selections.jsonl``, or an external reranker's selection); a
selector that does not need the label or selection record ignores it.

Selectors (registry names of :func:`make_baseline` in brackets):

* :class:`RetrievalTopK` [retrieval]: the first ``k`` candidates (retrieval order).
* :class:`CrossEncoderRerank` [cross_encoder]: candidates by a sentence-transformers
  ``CrossEncoder`` score of (question, passage), e.g. ``BAAI/bge-reranker-large``.
* :class:`FineTunedCrossEncoderSelect` [cross_encoder_ft]: a cross-encoder fine-tuned on the run's labels, every
  candidate over its calibrated threshold (`purecover.eval.cross_encoder_ft`).
* :class:`ICRRerank` [icr]: in-context reranking (Chen et al., ICLR 2025): candidates by the calibrated
  attention a causal LM's question tokens pay them (`purecover.eval.icr`).
* :class:`ICRFusedRerank` [icr_fused]: ICR fused with the retrieval rank, z(icr) + w·z(−rank).
* :class:`MMR` [mmr]: maximal marginal relevance, λ·cos(q, d) − (1 − λ)·max_{d'∈S} cos(d, d').
* :class:`XQuAD` [xquad]: (1 − λ)·P(d|q) + λ·Σ_s P(s|q)·P(d|s)·Π_{d'∈S}(1 − P(d'|s)).
* :class:`IASelect` [ia_select]: Σ_s P(s|q)·V(d|q,s)·Π_{d'∈S}(1 − V(d'|q,s)).
* :class:`LancerAggregation` [lancer_sum, lancer_rrf, lancer_greedy_sum, lancer_greedy_cov,
  lancer_greedy_alpha]: LANCER's aggregations over the label record's ``ratings``.
* :class:`GoldSupporting` [gold_support]: the candidates that are gold supporting paragraphs
  (``gold_doc_ids``), in retrieval order: an upper-bound reference, not a method.
* :class:`TeacherLabels` [teacher]: the teacher's ``selected``, truncated to ``k``.
* :class:`StudentSelections` [student]: the student's ``selected``, truncated to ``k``.

Embedding similarity (MMR, xQuAD, IA-Select): texts are encoded with an *embedder*, any object
with the sentence-transformers ``encode(texts, batch_size=..., normalize_embeddings=True,
convert_to_numpy=True, show_progress_bar=False)`` API, through
`purecover.data.retrieval.dense.encode_texts` (the teacher's embedding estimator uses the same);
similarities are cosines of the normalised embeddings. A passage is encoded as
`purecover.data.passage.passage_text` renders it (``title\\ntext``, ``text`` alone when untitled).
Each question's texts are encoded in encoder calls of their own (the question with its passages;
the subtopics), so a question's selection never depends on which other questions were evaluated
with it; a selector instance caches each such call's result by its list of texts.

xQuAD / IA-Select probabilities: P(s|q) is uniform over the subtopics; P(d|s) (= V(d|q,s) for
IA-Select) and, for xQuAD, P(d|q) are the softmax over the candidates of cos/``temperature``
(default 0.1: cosines live in [−1, 1], so a softmax at temperature 1 would be almost uniform).
Subtopics are the label record's ``steps`` (teacher reasoning steps, ``subtopics="steps"``) or
its ``subquestions`` (LANCER sub-questions, ``subtopics="subquestions"``); when the label record
is absent or has none, the question itself is the only subtopic (xQuAD then reduces to a
relevance ranking and IA-Select to a relevance ranking with diminishing returns), and the
selector counts such questions in ``fallback_count``.

Tie rule (everywhere): among equal scores or gains, the earlier candidate (smaller position) wins.

The interface and shared helpers are in `purecover.eval.baseline_common`, the model rerankers in
`purecover.eval.baseline_rerankers`, the embedding selectors in `purecover.eval.baseline_diversity`; the
others and the registry are here, and every name is importable from this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from purecover.records import CandidateRecord, LabelRecord
from purecover.teacher.lancer_rank import LANCER_METHODS, lancer_rank

from .baseline_common import (
    BaselineSelector,
    StoredSelection,
    _check_k,
    _check_same_qid,
    _positions,
    doc_text,
)
from .baseline_diversity import MMR, IASelect, XQuAD
from .baseline_rerankers import CrossEncoderRerank, ICRFusedRerank, ICRRerank
from .cross_encoder_ft import FineTunedCrossEncoderSelect

__all__ = [
    "BASELINE_NAMES",
    "MMR",
    "BaselineSelector",
    "CrossEncoderRerank",
    "GoldSupporting",
    "IASelect",
    "ICRFusedRerank",
    "ICRRerank",
    "LancerAggregation",
    "RetrievalTopK",
    "StoredSelection",
    "StudentSelections",
    "TeacherLabels",
    "XQuAD",
    "doc_text",
    "make_baseline",
]


# ----------------------------------------------------------------------------- selectors

class RetrievalTopK:
    """The first k candidates, in retrieval order."""

    name = "retrieval"

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        return list(range(min(k, len(candidate_record.docs))))


class LancerAggregation:
    """LANCER aggregation `method` (see `purecover.teacher.lancer_rank`) over the label's ``ratings``."""

    def __init__(self, method: str, **params: Any) -> None:
        if method not in LANCER_METHODS:
            raise ValueError(f"unknown LANCER method {method!r}; expected one of {sorted(LANCER_METHODS)}")
        self.method = method
        self.params = params
        self.name = "lancer_" + method.replace("-", "_")

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        qid = candidate_record.qid
        n = len(candidate_record.docs)
        if label_record is None or label_record.ratings is None:
            raise ValueError(f"question {qid}: {self.name} needs LANCER 'ratings' in the label record, "
                             f"but {'there is no label record' if label_record is None else 'it has none'}")
        _check_same_qid(candidate_record, label_record, "label")
        R = np.asarray(label_record.ratings, dtype=np.float64)
        if R.ndim != 2 or R.shape[0] != n:
            raise ValueError(f"question {qid}: ratings have shape {R.shape}, expected ({n}, n_subquestions)")
        try:
            return lancer_rank(R, self.method, **self.params).order[:k]
        except ValueError as exc:
            raise ValueError(f"question {qid}: {exc}") from None


class GoldSupporting:
    """The gold supporting paragraphs among the candidates (``gold_doc_ids``), in retrieval order, first k."""

    name = "gold_support"

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        gold = set(candidate_record.gold_doc_ids)
        return [i for i, d in enumerate(candidate_record.docs) if d.doc_id in gold][:k]


class _StoredSelection:
    """A subset stored in a record (teacher label or student selection), truncated to k."""

    name = ""
    source = ""  # "label" or "selection"

    def _record(self, label_record: LabelRecord | None,
                selection_record: StoredSelection | None) -> StoredSelection | None:
        return label_record if self.source == "label" else selection_record

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        qid = candidate_record.qid
        record = self._record(label_record, selection_record)
        what = "label record" if self.source == "label" else "selections record"
        if record is None:
            raise ValueError(f"question {qid}: the {self.name} baseline needs a {what}")
        _check_same_qid(candidate_record, record, self.source)
        return _positions(record.selected, len(candidate_record.docs), qid, f"{self.source} 'selected'")[:k]


class TeacherLabels(_StoredSelection):
    """The teacher's ``selected`` positions (label record), truncated to k."""

    name = "teacher"
    source = "label"


class StudentSelections(_StoredSelection):
    """The student's ``selected`` positions (selections record, thresholded by the student), truncated to k."""

    name = "student"
    source = "selection"


# ----------------------------------------------------------------------------- registry

def _lancer(method: str) -> Callable[..., LancerAggregation]:
    def make(**params: Any) -> LancerAggregation:
        return LancerAggregation(method, **params)

    return make


_REGISTRY: dict[str, Callable[..., BaselineSelector]] = {
    "retrieval": RetrievalTopK,
    "cross_encoder": CrossEncoderRerank,
    "cross_encoder_ft": FineTunedCrossEncoderSelect,
    "icr": ICRRerank,
    "icr_fused": ICRFusedRerank,
    "mmr": MMR,
    "xquad": XQuAD,
    "ia_select": IASelect,
    "lancer_sum": _lancer("sum"),
    "lancer_rrf": _lancer("rrf"),
    "lancer_greedy_sum": _lancer("greedy-sum"),
    "lancer_greedy_cov": _lancer("greedy-cov"),
    "lancer_greedy_alpha": _lancer("greedy-alpha"),
    "gold_support": GoldSupporting,
    "teacher": TeacherLabels,
    "student": StudentSelections,
}

BASELINE_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def make_baseline(name: str, **kwargs: Any) -> BaselineSelector:
    """Build the baseline `name` (one of `BASELINE_NAMES`) with constructor `kwargs`.

    mmr/xquad/ia_select need ``embedder=``; cross_encoder takes ``model_name=``, ``batch_size=``; icr and
    icr_fused take ``model_name=``, ``layers=``, ``max_passage_tokens=`` (icr_fused also ``fusion_weight=``);
    the lancer_* names take the method's parameters (``tau``, ``kappa``, ``alpha``).
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown baseline {name!r}; expected one of {list(BASELINE_NAMES)}") from None
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments {sorted(kwargs)} for baseline {name!r}: {exc}") from None
