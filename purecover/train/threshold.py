"""Calibrate the inference threshold τ3 on held-out questions: best mean subset F1 against the teacher.

Twice: on the first-token logits (``tau3``) and on their log-softmax over the present identifiers
(``tau3_logprob``, the space every vLLM log-prob mode maps to, see `purecover.models.selector`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..models.selection import identifier_log_softmax, select_from_scores
from .trainer import subset_f1

__all__ = ["calibrate_threshold", "calibrate_thresholds"]


def calibrate_threshold(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], min_select: int = 1,
                        k_max: int | None = None) -> tuple[float, float]:
    """(τ3, mean F1). Candidates: midpoints between consecutive distinct scores, plus one below and one
    above all; ties between thresholds go to the larger τ3 (smaller sets)."""
    if not scores:
        raise ValueError("no held-out questions to calibrate the threshold on")
    values = np.unique(np.concatenate([np.asarray(s, dtype=np.float64) for s in scores]))
    candidates = [values[0] - 1.0, *((values[:-1] + values[1:]) / 2).tolist(), values[-1] + 1.0]
    best_tau, best_f1 = candidates[0], -1.0
    for tau in candidates:
        f1 = float(np.mean([subset_f1(select_from_scores(s, tau, min_select, k_max), g) for s, g in zip(scores, gold)]))
        if f1 >= best_f1:
            best_tau, best_f1 = float(tau), f1
    return best_tau, best_f1


def calibrate_thresholds(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], min_select: int = 1,
                         k_max: int | None = None) -> dict[str, float]:
    """τ3 in both score spaces from the same held-out logits (one row per question, shape (n_docs,)).

    Keys: ``tau3`` / ``heldout_subset_f1`` (logits), ``tau3_logprob`` / ``heldout_subset_f1_logprob``
    (log-softmax over the present identifiers).
    """
    tau3, f1 = calibrate_threshold(scores, gold, min_select, k_max)
    tau_lp, f1_lp = calibrate_threshold([identifier_log_softmax(s) for s in scores], gold, min_select, k_max)
    return {"tau3": tau3, "heldout_subset_f1": f1, "tau3_logprob": tau_lp, "heldout_subset_f1_logprob": f1_lp}
