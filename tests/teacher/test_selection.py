"""Batched solving of (e, W) pairs and the stop reason of each selection."""

from __future__ import annotations

import numpy as np

from purecover.config import load_recipe
from purecover.teacher.defaults import resolve_params
from purecover.teacher.selection import fuse, solve, stop_reason
from purecover.teacher.solvers import greedy_select


def params(*overrides, **changes):
    return resolve_params(load_recipe(None, list(overrides)).teacher, **changes)


def test_solve_pads_questions_of_different_sizes_and_matches_one_by_one():
    rng = np.random.default_rng(0)
    pairs = []
    for k1, n in ((5, 2), (3, 4), (7, 1)):
        W = rng.dirichlet(np.ones(k1), size=n).T
        pairs.append((rng.dirichlet(np.ones(n)), W))
    p = params(lam=0.05)
    batch = solve(pairs, p)
    for i, (e, W) in enumerate(pairs):
        single = greedy_select(e, W, p.lam, p.budget, tau_stop=p.tau_stop, min_select=p.min_select)
        assert batch.order(i) == single.order()
        assert all(k < W.shape[0] for k in batch.order(i))


def test_solve_runs_the_ranking_ablation():
    e, W = np.array([0.5, 0.5]), np.array([[0.6, 0.1], [0.3, 0.1], [0.1, 0.8]])
    result = solve([(e, W)], params("teacher.selection=avg", "teacher.budget=2"))
    assert result.order(0) == [2, 0]  # avg scores: d0 0.35, d1 0.2, d2 0.45
    assert stop_reason([0.45, 0.35], 3, params("teacher.selection=avg")) == "ranking"


def test_stop_reasons():
    p = params("teacher.budget=3", lam=0.1, tau_stop=0.0)
    assert stop_reason([0.4, 0.2, 0.1], 10, p) == "budget"
    assert stop_reason([0.4], 10, p) == "threshold"
    assert stop_reason([-0.1], 10, p) == "first_step"  # the pick was forced by min_select
    assert stop_reason([], 10, p) == "first_step"  # min_select 0: nothing at all
    assert stop_reason([0.4, 0.3], 2, p) == "candidates"
    assert stop_reason([0.4, -0.2], 10, p) == "threshold"  # second pick forced by min_select=2


def test_fuse_applies_only_with_ratings_and_beta():
    e, W = np.array([1.0]), np.array([[0.7], [0.3]])
    ratings = [[5, 0], [0, 5]]
    off = params()
    assert fuse(e, W, ratings, off)[1] is W
    on = params("teacher.lancer.enabled=true", "teacher.lancer.beta=0.5")
    fe, fW = fuse(e, W, ratings, on)
    np.testing.assert_allclose(fe, [0.5, 0.25, 0.25])
    np.testing.assert_allclose(fW, [[0.7, 1.0, 0.0], [0.3, 0.0, 1.0]])
    assert fuse(e, W, None, on)[1] is W
