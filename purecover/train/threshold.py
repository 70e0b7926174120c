"""Calibrate the inference threshold τ3 on the calibration split: best mean subset F1 against the teacher
(`mean_subset_f1` then scores it on the test split, questions used for neither training nor τ3).

Twice: on the readout's logits (``tau3``: the identifiers' first-token logits, or the passages' marker
scores) and on their log-softmax over the present identifiers
(``tau3_logprob``, the space every vLLM log-prob mode maps to, see `purecover.models.selector`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models.selection import calibrate_threshold, identifier_log_softmax, mean_subset_f1

__all__ = ["calibrate_threshold", "calibrate_thresholds", "mean_subset_f1", "subset_f1_both_spaces"]


def calibrate_thresholds(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], min_select: int = 1,
                         k_max: int | None = None) -> dict[str, float]:
    """τ3 in both score spaces from the same calibration logits (one row per question, shape (n_docs,)).

    Keys: ``tau3`` / ``calib_subset_f1`` (logits), ``tau3_logprob`` / ``calib_subset_f1_logprob``
    (log-softmax over the present identifiers); the F1s are in-sample (on the questions τ3 was chosen on).
    """
    tau3, f1 = calibrate_threshold(scores, gold, min_select, k_max)
    tau_lp, f1_lp = calibrate_threshold([identifier_log_softmax(s) for s in scores], gold, min_select, k_max)
    return {"tau3": tau3, "calib_subset_f1": f1, "tau3_logprob": tau_lp, "calib_subset_f1_logprob": f1_lp}


def subset_f1_both_spaces(scores: Sequence[Sequence[float]], gold: Sequence[Sequence[int]], thresholds: dict[str, float],
                          min_select: int = 1, k_max: int | None = None) -> dict[str, float]:
    """``{test_subset_f1, test_subset_f1_logprob}``: `mean_subset_f1` of the logits at ``tau3`` and of their
    identifier log-softmax at ``tau3_logprob`` (`thresholds`, from `calibrate_thresholds`)."""
    return {"test_subset_f1": mean_subset_f1(scores, gold, thresholds["tau3"], min_select, k_max),
            "test_subset_f1_logprob": mean_subset_f1([identifier_log_softmax(s) for s in scores], gold,
                                                     thresholds["tau3_logprob"], min_select, k_max)}
