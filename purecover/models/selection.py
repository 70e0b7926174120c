"""Turning first-token identifier logits into a selected set (docs/concepts/method.md#inference)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["identifier_log_softmax", "select_from_scores", "softmax_probabilities"]


def select_from_scores(scores: Sequence[float], tau: float, min_select: int = 1, k_max: int | None = None) -> list[int]:
    """Positions with score > tau, best first (ties: earlier position), at most k_max, at least min_select."""
    s = np.asarray(scores, dtype=np.float64)
    order = sorted(range(len(s)), key=lambda k: (-s[k], k))
    chosen = [k for k in order if s[k] > tau]
    if k_max is not None:
        chosen = chosen[:k_max]
    if len(chosen) < min_select:
        chosen = order[: min(min_select, len(order))]
    return chosen


def softmax_probabilities(scores: Sequence[float]) -> list[float]:
    """Softmax over the candidates' identifier logits (the probabilities reported next to the logits)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return []
    z = np.exp(s - s.max())
    return (z / z.sum()).tolist()


def identifier_log_softmax(scores: Sequence[float]) -> list[float]:
    """log-softmax over the present identifiers: s_k - logsumexp_j s_j, shape (n,).

    Invariant to a per-prompt constant, so logits and any log-probabilities of the same prompt
    (log p_k = s_k - c) map to the same values: the log of `softmax_probabilities`. This is the
    space of ``tau3_logprob``.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return []
    m = s.max()
    return (s - (m + np.log(np.exp(s - m).sum()))).tolist()
