"""The set-selection metrics (`purecover.metrics`), and that each is defined there only: no second `def` of them
in the package or the benchmarks (issue 56: one idea in one place)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

from purecover import metrics
from purecover.metrics import coverage_at_k, prf, purity_at_k, ranking_auc, ranking_auc_rows, subset_f1

ROOT = Path(__file__).resolve().parents[1]


def test_subset_f1_and_prf_agree_except_on_two_empty_sets() -> None:
    assert subset_f1([0, 1], [1, 2]) == pytest.approx(0.5) == prf([0, 1], [1, 2])[2]
    assert prf(["a", "a", "b"], {"a"}) == (0.5, 1.0, pytest.approx(2 / 3))  # duplicates count once
    assert subset_f1([], []) == 1.0 and prf([], []) == (0.0, 0.0, 0.0)  # nothing to keep, nothing kept
    assert subset_f1([3], [1]) == 0.0 and prf([], {"g"}) == (0.0, 0.0, 0.0) and prf(["x"], set()) == (0.0, 0.0, 0.0)


def test_coverage_and_purity() -> None:
    assert coverage_at_k([0, 2, 5], {2, 3}) == 0.5 and purity_at_k([0, 2, 5], {2, 3}) == pytest.approx(1 / 3)
    assert coverage_at_k([1], set()) is None and purity_at_k([], {1}) is None


def _brute_auc(scores: list[float], gold: list[int]) -> float:
    """The share of (gold, non-gold) pairs ranked gold first, averaged over every way of breaking the ties (each
    permutation of the candidates as the tie-break)."""
    n, g = len(scores), set(gold)
    shares = []
    for tie in itertools.permutations(range(n)):
        rank = {k: r for r, k in enumerate(sorted(range(n), key=lambda k: (-scores[k], tie[k])))}
        pairs = [(p, q) for p in g for q in range(n) if q not in g]
        shares.append(sum(rank[p] < rank[q] for p, q in pairs) / len(pairs))
    return sum(shares) / len(shares)


@pytest.mark.parametrize(("scores", "gold"), [
    ([3.0, 1.0, 2.0, 0.0], [0, 3]),
    ([1.0, 1.0, 1.0, 1.0], [0, 2]),  # all tied: 0.5
    ([0.5, 2.0, 0.5, -1.0, 2.0], [1, 2]),
    ([0.0, 1.0, 2.0, 3.0, 4.0], [0, 1]),  # gold last: 0.0
])
def test_ranking_auc_counts_ties_half_like_every_tie_break_averaged(scores, gold) -> None:
    assert ranking_auc(scores, gold) == pytest.approx(_brute_auc(scores, gold))
    rows = ranking_auc_rows(np.array([scores, [-x for x in scores]]), metrics.gold_mask(gold, len(scores), "t"))
    assert rows is not None and rows[0] == pytest.approx(_brute_auc(scores, gold))
    assert rows[1] == pytest.approx(_brute_auc([-x for x in scores], gold))


def test_ranking_auc_needs_a_gold_and_a_non_gold_candidate_and_real_positions() -> None:
    assert ranking_auc([1.0, 2.0], [0, 1]) is None and ranking_auc([1.0, 2.0], []) is None
    assert ranking_auc([2.0, 1.0], [0]) == 1.0
    for bad in (5, -1, True, 1.0):
        with pytest.raises(ValueError, match="is not a candidate position in 0..1"):
            ranking_auc([1.0, 2.0], [bad])


NAMES = {"subset_f1", "prf", "coverage_at_k", "purity_at_k", "ranking_auc", "ranking_auc_rows", "gold_mask",
         "auc", "_auc_rows", "_gold_mask", "_prf"}


def test_each_metric_is_defined_once() -> None:
    """A function of these names is defined in purecover/metrics.py and nowhere else in the package or the
    benchmarks (imports of them are fine)."""
    home = ROOT / "purecover" / "metrics.py"
    found = []
    for path in sorted([*(ROOT / "purecover").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in NAMES and path != home:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} def {node.name}")
    assert not found, "metrics defined outside purecover/metrics.py: " + "; ".join(found)
    assert set(metrics.__all__) <= NAMES
