"""From raw scores to step weights e and coverage W (docs/concepts/method.md#step-weights-and-coverage), for every estimator.

Two signals give raw scores for one question: segment attention (`SegmentAttention`: Attn(a, c_i)
for e, Attn(c_i, d_k) − Bias(k) for W) and cosine similarity of sentence embeddings
(`SimilarityScores`: cos(a, c_i) for e, cos(c_i, d_k) for W). `teacher.estimator` picks the source of
each: attention (both from attention), embedding (both from similarity, the CPU proxy) or
no_attention (the paper's "w/o attention" ablation: W from similarity, e still from attention).

    e_i     = softmax_i( s^e_i / (m τ_e) )        (e_i = 1 for every step when CoT weighting is off)
    W_{k,i} = softmax_k( s^W_{i,k} / (σ τ_W) )    (a document with an empty span gets W = 0)

In the ``absolute`` scale (the paper) σ = m = 1. In the ``zscore`` scale σ is the within-step
spread of the question's step × document block (the root mean square of each score minus its
step's mean over documents: the spread a softmax over documents sees, free of the per-step shifts
it ignores), and m is the mean |s^e| over the question's steps, so e depends on the ratios of
the step scores. Both make the temperatures independent of the signal's magnitude (see `defaults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..records import StoredAttention, StoredSimilarity
from .label_record import stored_nested

if TYPE_CHECKING:
    from .defaults import EstimationParams

__all__ = [
    "Estimate",
    "SegmentAttention",
    "SimilarityScores",
    "coverage_matrix",
    "drop_repeated_steps",
    "estimate",
    "estimate_from_attention",
    "estimate_from_embeddings",
    "estimate_from_similarity",
    "softmax",
    "step_key",
    "step_scale",
    "step_weights",
    "within_step_spread",
]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax; -inf entries get probability 0, an all -inf slice is all 0."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = np.exp(x - m)
    total = np.sum(z, axis=axis, keepdims=True)
    return z / np.where(total > 0, total, 1.0)


@dataclass
class SegmentAttention:
    """The three attention blocks of one question (mean attention probabilities).

    step_doc (N, K1) = Attn(c_i, d_k); step_step (N, N) = Attn(c_i, c_j); answer_step (N,) = Attn(a, c_i).
    """

    step_doc: np.ndarray
    step_step: np.ndarray
    answer_step: np.ndarray

    @classmethod
    def from_matrix(cls, matrix: Any, n_docs: int, n_steps: int) -> SegmentAttention:
        """Split a capture matrix with rows (steps..., answer) and columns (docs..., steps...)."""
        m = np.asarray(matrix, dtype=np.float64)
        if m.shape != (n_steps + 1, n_docs + n_steps):
            raise ValueError(f"segment matrix has shape {m.shape}, expected {(n_steps + 1, n_docs + n_steps)}")
        return cls(step_doc=m[:n_steps, :n_docs], step_step=m[:n_steps, n_docs:], answer_step=m[n_steps, n_docs:])

    @classmethod
    def from_record(cls, record: StoredAttention) -> SegmentAttention:
        """From a labels.jsonl `attention` block (null = non-finite)."""
        return cls(step_doc=_array(record.step_doc), step_step=_array(record.step_step),
                   answer_step=_array(record.answer_step))

    def to_record(self) -> StoredAttention:
        """The labels.jsonl `attention` block: every value at stored precision (null for non-finite)."""
        return StoredAttention(step_doc=stored_nested(self.step_doc.tolist()),
                               step_step=stored_nested(self.step_step.tolist()),
                               answer_step=stored_nested(self.answer_step.tolist()))


@dataclass
class SimilarityScores:
    """Cosine similarities of one question: step_doc (N, K1) = cos(c_i, d_k); answer_step (N,) = cos(a, c_i)
    (NaN when there is no answer text)."""

    step_doc: np.ndarray
    answer_step: np.ndarray

    @classmethod
    def from_embeddings(cls, step_emb: np.ndarray, doc_emb: np.ndarray, answer_emb: np.ndarray | None
                        ) -> SimilarityScores:
        """From L2-normalised embeddings: steps (N, d), documents (K1, d), answer (d,) or None."""
        step_doc = step_emb @ doc_emb.T
        answer = np.full(step_emb.shape[0], np.nan) if answer_emb is None else step_emb @ answer_emb
        return cls(step_doc=np.asarray(step_doc, dtype=np.float64), answer_step=np.asarray(answer, dtype=np.float64))

    @classmethod
    def from_record(cls, record: StoredSimilarity) -> SimilarityScores:
        """From a labels.jsonl `similarity` block (null = non-finite)."""
        return cls(step_doc=_array(record.step_doc), answer_step=_array(record.answer_step))

    def to_record(self) -> StoredSimilarity:
        """The labels.jsonl `similarity` block: every value at stored precision (null for non-finite)."""
        return StoredSimilarity(step_doc=stored_nested(self.step_doc.tolist()),
                                answer_step=stored_nested(self.answer_step.tolist()))


def _array(values: Any) -> np.ndarray:
    """JSON lists (null = non-finite) as a float64 array with NaN."""
    return np.array(values, dtype=np.float64)  # None -> nan


@dataclass
class Estimate:
    """e (N,) step weights (summing to 1, or all ones without CoT weighting); W (K1, N) coverage, each
    column summing to 1 over documents."""

    e: np.ndarray
    W: np.ndarray
    notes: list[str]


def within_step_spread(step_doc: np.ndarray) -> float:
    """Root mean square of each finite score minus its step's mean over documents, for an (N, K1) block
    (0 when no step has two finite scores). A softmax over documents ignores per-step shifts; so does this."""
    x = np.asarray(step_doc, dtype=np.float64)
    finite = np.isfinite(x)
    counts = finite.sum(axis=1, keepdims=True)
    means = np.where(finite, x, 0.0).sum(axis=1, keepdims=True) / np.maximum(counts, 1)
    dev = np.where(finite & (counts > 1), x - means, 0.0)
    n = int(np.where(counts > 1, counts, 0).sum())
    return float(np.sqrt((dev**2).sum() / n)) if n else 0.0


def step_scale(scores: np.ndarray) -> float:
    """Mean |score| over steps (the zscore unit of e; 0 when not finite or all zero)."""
    x = np.abs(np.asarray(scores, dtype=np.float64))
    return float(x.mean()) if x.size and np.all(np.isfinite(x)) else 0.0


def _scaled(scores: np.ndarray, unit: float | None) -> np.ndarray:
    """Scores divided by `unit` (None: unchanged); a zero unit makes every finite score 0 (uniform weights)."""
    if unit is None:
        return scores
    if not unit > 0:
        return np.where(np.isfinite(scores), 0.0, scores)
    return scores / unit


def step_weights(scores: np.ndarray, tau: float, cot_weighting: bool = True, unit: float | None = None,
                 notes: list[str] | None = None) -> np.ndarray:
    """e (N,) = softmax(scores / (unit τ)); all ones without CoT weighting (P(e|q) = 1, as the paper);
    uniform, with a note, when a score is not finite (empty answer span, no answer text)."""
    n = scores.shape[0]
    if not cot_weighting:
        return np.ones(n)
    if not np.all(np.isfinite(scores)):
        if notes is not None:
            notes.append("answer span empty: uniform step weights")
        return np.full(n, 1.0 / n)
    return softmax(_scaled(scores, unit) / tau)


def coverage_matrix(step_doc: np.ndarray, tau: float, unit: float | None = None) -> np.ndarray:
    """W (K1, N) = softmax over documents of step_doc (N, K1) / (unit τ); non-finite entries get W = 0."""
    x = np.where(np.isfinite(step_doc), step_doc, -np.inf)
    return softmax(_scaled(x, unit).T / tau, axis=0)


def _calibrated(attn: SegmentAttention, bias: Sequence[float] | None) -> np.ndarray:
    n_docs = attn.step_doc.shape[1]
    if bias is None:
        return attn.step_doc
    b = np.asarray(bias, dtype=np.float64)
    if b.shape[0] < n_docs:
        raise ValueError(f"position bias has {b.shape[0]} entries for {n_docs} documents")
    return attn.step_doc - b[None, :n_docs]


def _units(step_doc: np.ndarray, e_scores: np.ndarray, normalize: str) -> tuple[float | None, float | None]:
    """(unit of the e scores, unit of the W scores): None (absolute) or the zscore units."""
    if normalize not in ("absolute", "zscore"):
        raise ValueError(f"normalize must be 'absolute' or 'zscore', got {normalize!r}")
    if normalize == "absolute":
        return None, None
    return step_scale(e_scores), within_step_spread(step_doc)


def estimate_from_attention(attn: SegmentAttention, bias: Sequence[float] | None, tau1: float, tau2: float,
                            cot_weighting: bool = True, normalize: str = "absolute") -> Estimate:
    """e and W from captured attention; `bias` (≥ K1 values, by position) or None for no calibration."""
    notes: list[str] = []
    cal = _calibrated(attn, bias)
    e_unit, w_unit = _units(cal, attn.answer_step, normalize)
    e = step_weights(attn.answer_step, tau1, cot_weighting, e_unit, notes)
    return Estimate(e=e, W=coverage_matrix(cal, tau2, w_unit), notes=notes)


def estimate_from_similarity(sim: SimilarityScores, tau_w: float, tau_e: float, cot_weighting: bool = True,
                             normalize: str = "absolute") -> Estimate:
    """e and W from cosine similarities (the embedding estimator)."""
    notes: list[str] = []
    e_unit, w_unit = _units(sim.step_doc, sim.answer_step, normalize)
    e = step_weights(sim.answer_step, tau_e, cot_weighting, e_unit, notes)
    if notes:
        notes[-1] = "no answer text: uniform step weights"
    return Estimate(e=e, W=coverage_matrix(sim.step_doc, tau_w, w_unit), notes=notes)


def estimate_from_embeddings(step_emb: np.ndarray, doc_emb: np.ndarray, answer_emb: np.ndarray | None,
                             tau: float, cot_weighting: bool = True, tau_e: float | None = None,
                             normalize: str = "absolute") -> Estimate:
    """`estimate_from_similarity` on L2-normalised embeddings; `tau_e` defaults to `tau`."""
    sim = SimilarityScores.from_embeddings(step_emb, doc_emb, answer_emb)
    return estimate_from_similarity(sim, tau, tau if tau_e is None else tau_e, cot_weighting, normalize)


def estimate(params: EstimationParams, attention: SegmentAttention | None = None,
             similarity: SimilarityScores | None = None, bias: Sequence[float] | None = None,
             steps: Sequence[str] | None = None) -> Estimate:
    """e and W of one question from whichever signals `params` names (`e_source`, `w_source`).

    `bias` is used only when W comes from attention and `params.calibrate` is true. `steps`: the question's
    reasoning steps (N texts), needed when ``params.repeated_steps`` is drop (`drop_repeated_steps`).
    """
    def need(signal: str) -> SegmentAttention | SimilarityScores:
        value = attention if signal == "attention" else similarity
        if value is None:
            raise ValueError(f"this estimator needs {signal} scores, which are missing")
        return value

    if params.e_source == params.w_source == "attention":
        est = estimate_from_attention(need("attention"), bias if params.calibrate else None, params.tau_e,
                                      params.tau_w, params.cot_weighting, params.normalize)
    elif params.e_source == params.w_source == "similarity":
        est = estimate_from_similarity(need("similarity"), params.tau_w, params.tau_e, params.cot_weighting,
                                       params.normalize)
    else:  # no_attention: e from attention (never calibrated: the bias is a property of documents), W from cosines
        att, sim = need("attention"), need("similarity")
        e_part = estimate_from_attention(att, None, params.tau_e, params.tau_e, params.cot_weighting,
                                         params.normalize)
        w_part = estimate_from_similarity(sim, params.tau_w, params.tau_w, False, params.normalize)
        est = Estimate(e=e_part.e, W=w_part.W, notes=e_part.notes)
    if params.repeated_steps == "drop":
        if steps is None:
            raise ValueError("teacher.repeated_steps: drop needs the question's steps")
        est = drop_repeated_steps(est, steps, params.cot_weighting)
    return est


def step_key(step: str) -> str:
    """What two steps must share to be one repeated step: the text, lower-cased, spaces collapsed, without
    the final punctuation."""
    return " ".join(step.lower().split()).rstrip(" .!?;:,")


def drop_repeated_steps(est: Estimate, steps: Sequence[str], cot_weighting: bool) -> Estimate:
    """`est` with e_i = 0 for every step i that repeats an earlier one (`step_key`; a reply that loops on one
    sentence would otherwise count it once per copy), e renormalised to sum 1 under CoT weighting, and a note.
    W is unchanged: a step weighted 0 adds nothing to the objective, as if its column were gone. `steps`:
    the N step texts, in the order of e."""
    if len(steps) != est.e.shape[0]:
        raise ValueError(f"{len(steps)} steps for {est.e.shape[0]} step weights")
    seen: set[str] = set()
    repeat = []
    for step in steps:
        key = step_key(step)
        repeat.append(key in seen)
        seen.add(key)
    if not any(repeat):
        return est
    e = np.where(repeat, 0.0, est.e)
    if cot_weighting and e.sum() > 0:
        e = e / e.sum()
    n = sum(repeat)
    note = f"{n} step{'s' if n > 1 else ''} repeat{'' if n > 1 else 's'} an earlier one: weighted 0 " \
           "(teacher.repeated_steps: drop)"
    return Estimate(e=e, W=est.W, notes=[*est.notes, note])
