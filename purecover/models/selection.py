"""Turning per-passage scores into a selected set (docs/concepts/method.md#inference), and choosing the threshold
that does it: the student's τ3 and the fine-tuned cross-encoder baseline's threshold use the same rule."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..metrics import subset_f1

__all__ = ["calibrate_threshold", "identifier_log_softmax", "mean_subset_f1", "select_from_scores",
           "softmax_probabilities", "subset_f1"]


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


def mean_subset_f1(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], tau: float, min_select: int = 1,
                   k_max: int | None = None) -> float:
    """Mean subset F1 against `gold` of the selections {k : s_k > tau} (at least `min_select`, at most `k_max`)."""
    return float(np.mean([subset_f1(select_from_scores(s, tau, min_select, k_max), g) for s, g in zip(scores, gold)]))


def calibrate_threshold(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], min_select: int = 1,
                        k_max: int | None = None) -> tuple[float, float]:
    """(τ, mean F1) on calibration questions (`scores`: one row of per-passage scores per question). Candidates:
    midpoints between consecutive distinct scores, plus one below and one above all; ties between thresholds go
    to the larger τ (smaller sets)."""
    if not scores:
        raise ValueError("no questions to calibrate the threshold on")
    values = np.unique(np.concatenate([np.asarray(s, dtype=np.float64) for s in scores]))
    candidates = [values[0] - 1.0, *((values[:-1] + values[1:]) / 2).tolist(), values[-1] + 1.0]
    best_tau, best_f1 = candidates[0], -1.0
    for tau in candidates:
        f1 = mean_subset_f1(scores, gold, tau, min_select, k_max)
        if f1 >= best_f1:
            best_tau, best_f1 = float(tau), f1
    return best_tau, best_f1
