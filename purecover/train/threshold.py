"""Calibrate the inference threshold τ3 on held-out questions: best mean subset F1 against the teacher."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..models.selection import select_from_scores
from .trainer import subset_f1

__all__ = ["calibrate_threshold"]


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
