"""Turning first-token identifier logits into a selected set (DESIGN §3.7, inference)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["select_from_scores", "softmax_probabilities"]


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
