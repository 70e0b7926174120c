"""Bootstrap intervals and the paired sign-flip test of `purecover.eval.stats`, on cases with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from purecover.eval.stats import PERMUTATIONS, annotate_results, bootstrap_ci, paired_test
from purecover.records import BudgetResult, CoveragePurity, SupportingCoveragePurity


def _normal_two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


def test_ci_of_a_constant_is_a_point():
    ci = bootstrap_ci([0.4] * 50, seed=3)
    assert ci.mean == ci.low == ci.high == pytest.approx(0.4)
    assert ci.low == ci.high


def test_ci_is_deterministic_for_a_seed_and_changes_with_it():
    values = np.random.default_rng(0).integers(0, 2, size=200).astype(float)
    assert bootstrap_ci(values, seed=7) == bootstrap_ci(values, seed=7)
    assert bootstrap_ci(values, seed=7) != bootstrap_ci(values, seed=8)


def test_ci_matches_the_normal_approximation_for_a_large_sample():
    values = (np.random.default_rng(1).random(2000) < 0.4).astype(float)  # Bernoulli(0.4) EM scores
    ci = bootstrap_ci(values, resamples=4000, seed=0)
    half = 1.959964 * values.std(ddof=0) / math.sqrt(len(values))
    assert ci.low < ci.mean < ci.high
    assert ci.low == pytest.approx(values.mean() - half, abs=0.004)
    assert ci.high == pytest.approx(values.mean() + half, abs=0.004)


def test_identical_methods_differ_by_zero_with_p_one():
    a = np.random.default_rng(2).random(40)
    t = paired_test(a, a.copy(), seed=0)
    assert t.diff == t.low == t.high == 0.0
    assert t.p == 1.0 and t.n == 40


def test_better_on_every_question_gives_p_at_the_resolution_floor():
    b = np.zeros(60)
    a = b + np.linspace(0.1, 1.0, 60)
    t = paired_test(a, b, permutations=999, seed=0)
    assert t.p_method == "monte_carlo"
    assert t.p == pytest.approx(1 / 1000)
    assert 0 < t.low <= t.diff <= t.high
    assert paired_test(b, a, permutations=999, seed=0).p == pytest.approx(1 / 1000)  # two-sided


def test_few_questions_use_the_exact_test():
    # 5 questions all improved: only the all-plus and all-minus sign vectors are as extreme: p = 2 / 32.
    t = paired_test([1.0] * 5, [0.0] * 5, seed=0)
    assert t.p_method == "exact" and t.p == pytest.approx(2 / 32)
    # one question better, one worse by the same amount: mean 0, every sign vector as extreme.
    assert paired_test([1.0, 0.0], [0.0, 1.0]).p == 1.0


def test_sign_flip_p_agrees_with_its_normal_approximation():
    rng = np.random.default_rng(4)
    n = 400
    b = (rng.random(n) < 0.40).astype(float)
    a = np.where(rng.random(n) < 0.12, 1.0 - b, b)  # EM flips on 12% of the questions, slightly more often up
    a[:8] = 1.0
    d = a - b
    z = d.sum() / math.sqrt((d ** 2).sum())  # sign-flip null: Var(sum s_i d_i) = sum d_i^2
    expected = _normal_two_sided_p(z)
    assert 0.01 < expected < 0.5  # a case where the p-value is neither trivial nor at the floor
    t = paired_test(a, b, seed=0)
    assert t.p_method == "monte_carlo"
    assert t.p == pytest.approx(expected, abs=0.03)
    assert paired_test(a, b, seed=0) == t


def test_paired_test_agrees_with_scipy_permutation_test():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    a, b = rng.random(80), rng.random(80) * 0.9
    ours = paired_test(a, b, seed=0).p
    theirs = stats.permutation_test((a, b), lambda x, y: np.mean(x - y), permutation_type="samples",
                                    n_resamples=PERMUTATIONS, alternative="two-sided", random_state=0).pvalue
    assert ours == pytest.approx(theirs, abs=0.02)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="same questions"):
        paired_test([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="no questions"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.5, float("nan")])


def _result(em: float) -> BudgetResult:
    return BudgetResult(n=30, em=em, f1=0.2, acc=em, mean_k=1.0,
                        answer=CoveragePurity(coverage=None, purity=None, n_coverage=0, n_purity=0),
                        supporting=SupportingCoveragePurity(coverage=None, purity=None, n_coverage=0, n_purity=0),
                        prompt_tokens=10.0, completion_tokens=2.0)


def test_annotate_results_adds_intervals_and_tests_against_retrieval():
    n = 30
    scores = {("retrieval", "5"): {"em": [0.0] * n, "f1": [0.2] * n, "acc": [0.0] * n},
              ("student", "5"): {"em": [1.0] * n, "f1": [0.2] * n, "acc": [1.0] * 10 + [0.0] * 20}}
    plain = {"retrieval": {"5": _result(0.0)}, "student": {"5": _result(1.0)}}
    results, meta = annotate_results(plain, scores, seed=0)
    assert meta.baseline == "retrieval" and meta.permutations == PERMUTATIONS
    assert plain["student"]["5"].ci is None  # the input is left as it was
    assert results["retrieval"]["5"].ci["f1"] == [0.2, 0.2]
    assert results["retrieval"]["5"].vs_retrieval is None
    assert "vs_retrieval" not in results["retrieval"]["5"].to_json_dict()
    tests = results["student"]["5"].vs_retrieval
    assert tests["em"].diff == 1.0 and tests["em"].p == pytest.approx(1 / (1 + PERMUTATIONS), abs=1e-6)
    assert tests["f1"].diff == 0.0 and tests["f1"].p == 1.0
    assert list(results["student"]["5"].to_json_dict()["vs_retrieval"]["em"]) == [
        "diff", "low", "high", "p", "n", "p_method"]
    lo, hi = results["student"]["5"].ci["acc"]
    assert lo < 1 / 3 < hi
    without, meta = annotate_results({"student": {"5": _result(1.0)}}, {("student", "5"): scores[("student", "5")]})
    assert meta.baseline is None
    assert without["student"]["5"].vs_retrieval is None and without["student"]["5"].ci is not None


def test_every_result_is_also_tested_against_retrieval_at_the_main_budget():
    """The student's set at any K and retrieval at other budgets are each paired with retrieval@5 (the reference)."""
    n = 30
    em = {"retrieval@2": [0.0] * n, "retrieval@5": [1.0] * 15 + [0.0] * 15, "student@2": [1.0] * n,
          "student@5": [1.0] * n}
    scores = {tuple(key.split("@")): {"em": v, "f1": v, "acc": v} for key, v in em.items()}
    plain = {"retrieval": {"2": _result(0.0), "5": _result(0.5)}, "student": {"2": _result(1.0), "5": _result(1.0)}}
    results, meta = annotate_results(plain, scores, seed=0, reference_k="5")
    assert meta.reference == "retrieval@5"
    assert results["retrieval"]["5"].vs_reference is None  # the reference itself
    assert results["retrieval"]["2"].vs_reference["em"].diff == -0.5
    assert results["student"]["2"].vs_reference["em"].diff == 0.5  # against retrieval@5, not retrieval@2
    assert results["student"]["2"].vs_retrieval["em"].diff == 1.0  # against retrieval@2
    assert results["student"]["5"].vs_reference == results["student"]["5"].vs_retrieval
    _, meta = annotate_results(plain, scores, seed=0, reference_k="10")  # not evaluated: no reference
    assert meta.reference is None and "reference" not in meta.to_json_dict()
