"""From segment attention to step weights e and coverage W (DESIGN §3.3), plus the embedding estimator.

    e_i     = softmax_i( Attn(a, c_i) / τ1 )                 (uniform when cot_weighting is off)
    W_{k,i} = softmax_k( (Attn(c_i, d_k) − Bias(k)) / τ2 )   (Bias = 0 when calibration is off)

The ``embedding`` estimator ("no attention" ablation) replaces attention by cosine similarity of
sentence-transformers embeddings: W_{k,i} = softmax_k(cos(c_i, d_k) / τ_emb) and, with CoT
weighting, e_i = softmax_i(cos(a, c_i) / τ_emb).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Estimate", "SegmentAttention", "estimate_from_attention", "estimate_from_embeddings", "softmax"]


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

    def to_dict(self) -> dict[str, Any]:
        return {"step_doc": self.step_doc.tolist(), "step_step": self.step_step.tolist(),
                "answer_step": self.answer_step.tolist()}


@dataclass
class Estimate:
    """e (N,) step weights summing to 1; W (K1, N) coverage, each column summing to 1 over documents."""

    e: np.ndarray
    W: np.ndarray
    notes: list[str]


def _step_weights(scores: np.ndarray, tau: float, enabled: bool, notes: list[str]) -> np.ndarray:
    n = scores.shape[0]
    if not enabled:
        return np.full(n, 1.0 / n)
    if not np.all(np.isfinite(scores)):
        notes.append("answer span empty: uniform step weights")
        return np.full(n, 1.0 / n)
    return softmax(scores / tau)


def estimate_from_attention(attn: SegmentAttention, bias: Sequence[float] | None, tau1: float, tau2: float,
                            cot_weighting: bool = True) -> Estimate:
    """e and W from captured attention; `bias` (≥ K1 values, by position) or None for no calibration."""
    notes: list[str] = []
    n_docs = attn.step_doc.shape[1]
    e = _step_weights(attn.answer_step, tau1, cot_weighting, notes)
    cal = attn.step_doc.copy()
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64)
        if b.shape[0] < n_docs:
            raise ValueError(f"position bias has {b.shape[0]} entries for {n_docs} documents")
        cal = cal - b[None, :n_docs]
    cal = np.where(np.isfinite(cal), cal, -np.inf)  # documents with an empty span cover nothing
    W = softmax(cal.T / tau2, axis=0)  # (K1, N), softmax over documents
    return Estimate(e=e, W=W, notes=notes)


def estimate_from_embeddings(step_emb: np.ndarray, doc_emb: np.ndarray, answer_emb: np.ndarray | None,
                             tau: float, cot_weighting: bool = True) -> Estimate:
    """e and W from L2-normalised embeddings: steps (N, d), documents (K1, d), answer (d,) or None."""
    notes: list[str] = []
    sims = doc_emb @ step_emb.T  # (K1, N)
    W = softmax(sims / tau, axis=0)
    if answer_emb is None:
        scores = np.full(step_emb.shape[0], np.nan)
    else:
        scores = step_emb @ answer_emb
    e = _step_weights(scores, tau, cot_weighting, notes)
    return Estimate(e=e, W=W, notes=notes)
