from __future__ import annotations

import math

import pytest

from purecover.models.selection import select_from_scores, softmax_probabilities, subset_f1
from purecover.train.threshold import calibrate_threshold


def test_select_from_scores_rules():
    s = [0.5, 3.0, -1.0, 3.0, 2.0]
    assert select_from_scores(s, tau=1.0) == [1, 3, 4]  # ties: earlier position first
    assert select_from_scores(s, tau=1.0, k_max=2) == [1, 3]
    assert select_from_scores(s, tau=10.0, min_select=1) == [1]
    assert select_from_scores(s, tau=10.0, min_select=0) == []
    assert abs(sum(softmax_probabilities(s)) - 1) < 1e-12


def test_subset_f1():
    assert subset_f1([1, 2], [2, 3]) == pytest.approx(0.5)
    assert subset_f1([], []) == 1.0 and subset_f1([1], []) == 0.0


def test_threshold_separating_scores_gives_perfect_f1():
    scores = [[5.0, 4.0, -1.0, -2.0], [3.0, -3.0, -4.0, 2.5], [-1.0, 6.0, 0.0, -5.0]]
    gold = [[0, 1], [0, 3], [1]]
    tau, f1 = calibrate_threshold(scores, gold)
    assert f1 == 1.0
    assert all(sorted(select_from_scores(s, tau)) == sorted(g) for s, g in zip(scores, gold))
    with pytest.raises(ValueError, match="no questions to calibrate"):
        calibrate_threshold([], [])


def test_logprob_threshold_is_shift_invariant():
    """tau3_logprob: scores shifted by a per-question constant (log-probs of any vLLM mode) select alike."""
    from purecover.models.selection import identifier_log_softmax
    from purecover.train.threshold import calibrate_thresholds

    scores = [[5.0, 4.0, -1.0, -2.0], [3.0, -3.0, -4.0, 2.5], [-1.0, 6.0, 0.0, -5.0]]
    gold = [[0, 1], [0, 3], [1]]
    shifted = [[x - c for x in s] for s, c in zip(scores, (7.0, -2.0, 0.5))]  # log p = s - c
    a, b = calibrate_thresholds(scores, gold), calibrate_thresholds(shifted, gold)
    assert a["tau3_logprob"] == pytest.approx(b["tau3_logprob"]) and a["tau3"] != b["tau3"]
    for s, t in zip(scores, shifted):
        assert identifier_log_softmax(s) == pytest.approx(identifier_log_softmax(t))
        assert select_from_scores(identifier_log_softmax(t), b["tau3_logprob"]) == \
            select_from_scores(identifier_log_softmax(s), a["tau3_logprob"])
    assert sum(math.exp(x) for x in identifier_log_softmax(scores[0])) == pytest.approx(1.0)
    assert identifier_log_softmax([]) == []


def test_test_split_is_scored_at_the_calibrated_thresholds():
    """τ3 is chosen on the calibration questions and scored, unchanged, on the test questions."""
    from purecover.train.threshold import calibrate_thresholds, mean_subset_f1, subset_f1_both_spaces

    calib = [[5.0, 4.0, -1.0, -2.0], [3.0, -3.0, -4.0, 2.5]]
    th = calibrate_thresholds(calib, [[0, 1], [0, 3]])
    assert th["calib_subset_f1"] == 1.0
    test_scores, test_gold = [[2.0, -2.0, 1.8, -1.0], [0.5, 0.4, -3.0, -3.0]], [[0], [0, 1]]
    got = subset_f1_both_spaces(test_scores, test_gold, th)
    assert got["test_subset_f1"] == mean_subset_f1(test_scores, test_gold, th["tau3"])
    assert got["test_subset_f1"] < 1.0  # out of sample: the calibration questions' perfect F1 does not carry over
    assert 0.0 <= got["test_subset_f1_logprob"] <= 1.0
