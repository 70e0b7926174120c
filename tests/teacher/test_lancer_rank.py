"""LANCER aggregations as rerankers and the fusion of the LANCER signal (docs/concepts/method.md#lancer-signal, with LANCER's worked example)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from purecover.teacher.lancer_rank import (
    LANCER_METHODS,
    fuse_requirements,
    lancer_rank,
    rank_greedy_alpha,
    rank_greedy_cov,
    rank_greedy_sum,
    rank_rrf,
    rank_sum,
)
from purecover.teacher.solvers import greedy_select, objective

# LANCER's worked example (docs/concepts/method.md#lancer-signal): rows d1..d5 (indices 0..4), columns q1..q3
R_EX = np.array([[3, 3, 0], [1, 1, 0], [5, 2, 0], [2, 2, 1], [0, 0, 3]])
D1, D2, D3, D4, D5 = range(5)


def test_sum_worked_example():
    res = rank_sum(R_EX)
    assert res.order == [D3, D1, D4, D5, D2]
    assert res.scores.tolist() == [6, 2, 7, 5, 3]


def test_sum_tau_thresholds_ratings():
    res = lancer_rank(R_EX, "sum-tau")  # τ = 3: d1 6, d2 0, d3 5, d4 0, d5 3
    assert res.scores.tolist() == [6, 0, 5, 0, 3]
    assert res.order == [D1, D3, D5, D2, D4]  # d2, d4 tie at 0: earlier first
    assert lancer_rank(R_EX, "sum-tau", tau=5).order == [D3, D1, D2, D4, D5]


def test_rrf_worked_example():
    res = rank_rrf(R_EX, kappa=60)
    assert res.order == [D1, D3, D4, D5, D2]
    assert res.scores[D1] == pytest.approx(1 / 62 + 1 / 61 + 1 / 63)
    # q2 ties d3 and d4 at rating 2: d3 (earlier) gets rank 2, d4 rank 3
    assert res.scores[D3] == pytest.approx(1 / 61 + 1 / 62 + 1 / 65)
    assert res.scores[D4] == pytest.approx(1 / 63 + 1 / 63 + 1 / 62)


def test_greedy_sum_worked_example():
    res = rank_greedy_sum(R_EX)
    assert res.order == [D3, D5, D1, D4, D2]
    assert res.gains.tolist() == [7, 3, 1, 0, 0]


def test_greedy_cov_worked_example():
    res = rank_greedy_cov(R_EX, tau=3)
    assert res.order[:3] == [D1, D5, D3]
    assert sorted(res.order) == list(range(5))
    assert res.gains.tolist()[:2] == [2, 1]


def test_greedy_alpha_worked_example():
    res = rank_greedy_alpha(R_EX, tau=3, alpha=0.5)
    assert res.order[:3] == [D1, D5, D3]
    assert res.gains.tolist()[:3] == pytest.approx([2, 1, 0.5])
    assert res.order[3:] == [D2, D4]  # both gain 0: earlier first


def test_greedy_tie_rule_earlier_candidate_wins():
    R = np.array([[0, 0], [4, 4], [1, 0], [4, 4]])
    for method in ("greedy-sum", "greedy-cov", "greedy-alpha", "sum", "rrf"):
        res = lancer_rank(R, method)
        assert res.order.index(1) < res.order.index(3), method
    assert rank_greedy_sum(R).order == [1, 3, 2, 0]  # 3 has gain 0 after 1: put aside, then by row sum


def test_dispatcher_and_errors():
    assert set(LANCER_METHODS) == {"sum", "sum-tau", "rrf", "greedy-sum", "greedy-cov", "greedy-alpha"}
    assert lancer_rank(R_EX, "rrf", kappa=60).order == rank_rrf(R_EX).order
    assert lancer_rank(R_EX, "greedy-alpha", tau=3, alpha=0.5).order == rank_greedy_alpha(R_EX).order
    with pytest.raises(ValueError, match="unknown LANCER method 'bogus'"):
        lancer_rank(R_EX, "bogus")
    with pytest.raises(ValueError, match="bad parameters"):
        lancer_rank(R_EX, "rrf", tau=3)
    with pytest.raises(ValueError, match="0..5"):
        rank_sum(np.array([[1, 6]]))
    with pytest.raises(ValueError, match=r"\(K1, n\)"):
        rank_sum(np.array([1, 2]))


def test_scores_consistent_with_order():
    for method in LANCER_METHODS:
        res = lancer_rank(R_EX, method)
        resorted = np.argsort(-res.scores, kind="stable").tolist()
        assert resorted == res.order, method


@settings(max_examples=60, deadline=None)
@given(R=arrays(np.int64, st.tuples(st.integers(1, 8), st.integers(0, 4)), elements=st.integers(0, 5)),
       method=st.sampled_from(sorted(LANCER_METHODS)))
def test_every_method_returns_a_permutation(R, method):
    res = lancer_rank(R, method)
    assert sorted(res.order) == list(range(R.shape[0]))
    assert res.scores.shape == (R.shape[0],)
    if res.gains is not None:
        assert res.gains.shape == (R.shape[0],)
        if method != "greedy-alpha":
            assert np.all(np.diff(res.gains) <= 1e-12)  # greedy gains never increase


# ---------------------------------------------------------------------------- fusion


def test_fuse_shapes_and_values():
    e = np.array([0.5, 0.3, 0.2])
    W = np.arange(12, dtype=float).reshape(4, 3) / 20
    R = np.array([[5, 0], [3, 1], [0, 0], [2, 4]])
    e2, W2 = fuse_requirements(e, W, R, beta=0.4)
    assert e2.shape == (5,) and W2.shape == (4, 5)
    np.testing.assert_allclose(e2, [0.3, 0.18, 0.12, 0.2, 0.2])
    assert e2.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(W2[:, :3], W)
    np.testing.assert_allclose(W2[:, 3:], R / 5)


def test_fuse_beta_zero_and_one():
    rng = np.random.default_rng(0)
    e = rng.dirichlet(np.ones(4))
    W = rng.dirichlet(np.ones(6), size=4).T  # (6, 4)
    R = rng.integers(0, 6, size=(6, 2))
    e0, W0 = fuse_requirements(e, W, R, beta=0.0)
    e1, W1 = fuse_requirements(e, W, R, beta=1.0)
    assert np.all(e0[4:] == 0) and np.all(e1[:4] == 0)
    for S in ([0], [1, 3], [0, 2, 5], []):
        # β = 0: the signal is off -> same objective; β = 1: LANCER requirements alone
        assert objective(e0, W0, S, 0.3) == pytest.approx(objective(e, W, S, 0.3))
        assert objective(e1, W1, S, 0.3) == pytest.approx(objective(np.full(2, 0.5), R / 5, S, 0.3))
    assert greedy_select(e0, W0, 0.3, 3).order() == greedy_select(e, W, 0.3, 3).order()
    with pytest.raises(ValueError, match="beta"):
        fuse_requirements(e, W, R, beta=1.5)
    with pytest.raises(ValueError, match="no sub-questions"):
        fuse_requirements(e, W, np.zeros((6, 0)), beta=0.5)
    with pytest.raises(ValueError, match="documents"):
        fuse_requirements(e, W, R[:5], beta=0.5)
