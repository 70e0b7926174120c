"""Coverage objective, batched greedy and exact solver (docs/concepts/method.md#the-objective)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purecover.teacher.solvers import exact_select, greedy_select, objective, score_select


def random_instance(rng: np.random.Generator, K1: int, N: int, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    e = rng.dirichlet(np.ones(N))
    logits = scale * rng.standard_normal((K1, N))
    W = np.exp(logits - logits.max(axis=0))
    return e, W / W.sum(axis=0)


def brute_force(e: np.ndarray, W: np.ndarray, lam: float, budget: int) -> float:
    K1 = W.shape[0]
    return max(objective(e, W, S, lam) for s in range(budget + 1) for S in itertools.combinations(range(K1), s))


# ---------------------------------------------------------------------------- objective


def test_objective_by_hand():
    e = np.array([0.5, 0.3, 0.2])
    W = np.array([[0.8, 0.1, 0.0], [0.2, 0.5, 0.5]])
    lam = 0.3
    assert objective(e, W, [], lam) == 0.0
    f0 = 0.5 * 0.8 + 0.3 * 0.1 - lam * (1 - 0.4)
    assert objective(e, W, [0], lam) == pytest.approx(f0)
    cover = 0.5 * (1 - 0.2 * 0.8) + 0.3 * (1 - 0.9 * 0.5) + 0.2 * 0.5
    f01 = cover - lam * (1 - 0.4) - lam * (1 - 0.15)
    assert objective(e, W, [1, 0], lam) == pytest.approx(f01)
    assert objective(e, W, [0, 1, 1], lam) == pytest.approx(f01)  # a set: duplicates count once
    with pytest.raises(ValueError, match="out of range"):
        objective(e, W, [2], lam)
    with pytest.raises(ValueError, match="step columns"):
        objective(e[:2], W, [0], lam)


# ---------------------------------------------------------------------------- greedy basics


def test_greedy_gains_telescope_to_objective():
    rng = np.random.default_rng(1)
    for _ in range(30):
        e, W = random_instance(rng, 12, 4)
        for lam in (0.0, 0.3):
            res = greedy_select(e, W, lam, budget=5, min_select=2)
            order = res.order()
            assert len(order) == len(set(order)) == int(res.n_selected) >= 2
            direct = objective(e, W, order, lam)
            assert float(res.objective) == pytest.approx(direct, abs=1e-12)
            assert sum(res.pick_gains()) == pytest.approx(direct, abs=1e-12)
            # each gain is the marginal gain of the objective at that point
            for t in range(len(order)):
                marginal = objective(e, W, order[: t + 1], lam) - objective(e, W, order[:t], lam)
                assert res.pick_gains()[t] == pytest.approx(marginal, abs=1e-12)


def test_greedy_equals_exact_on_forced_optimum():
    # Steps 0..5, e uniform; docs 1, 3 and 4 cover disjoint blocks fully; the others are weak copies.
    N = 6
    e = np.full(N, 1 / N)
    W = np.zeros((6, N))
    W[1, 0:3] = 1.0
    W[3, 3:5] = 1.0
    W[4, 5] = 1.0
    W[0, 0:3] = 0.3
    W[2, 3:5] = 0.2
    W[5, :] = 0.05
    lam = 0.1
    res = greedy_select(e, W, lam, budget=3)
    ex = exact_select(e, W, lam, budget=3)
    assert res.order() == [1, 3, 4]
    assert ex.selected == (1, 3, 4)
    assert float(res.objective) == pytest.approx(ex.objective)
    assert ex.objective == pytest.approx(1.0 - 3 * lam * (1 - 1 / 6))  # max_i W_ki e_i = 1/6 for each
    assert res.pick_gains() == pytest.approx([0.5 - lam * 5 / 6, 1 / 3 - lam * 5 / 6, 1 / 6 - lam * 5 / 6])
    # with budget 2 the two largest blocks are forced
    assert greedy_select(e, W, lam, budget=2).order() == [1, 3]
    assert exact_select(e, W, lam, budget=2).selected == (1, 3)


def test_greedy_close_to_exact_on_random_instances():
    rng = np.random.default_rng(7)
    ratios = []
    for _ in range(40):
        e, W = random_instance(rng, 10, 4)
        g = float(greedy_select(e, W, 0.3, 4, min_select=0).objective)
        x = exact_select(e, W, 0.3, 4).objective
        assert g <= x + 1e-12
        if x > 0:
            ratios.append(g / x)
    assert len(ratios) >= 10
    assert np.mean(ratios) >= 0.95
    assert min(ratios) >= 0.5


def test_identical_documents_tie_to_smaller_index():
    e = np.array([0.6, 0.4])
    row = np.array([0.7, 0.2])
    W = np.stack([np.array([0.1, 0.1]), row, np.array([0.0, 0.05]), row, row])
    res = greedy_select(e, W, 0.0, budget=2)
    assert res.order()[0] == 1
    assert res.order() == [1, 3]
    assert exact_select(e, W, 0.0, budget=1).selected == (1,)
    # exact: equal objectives -> lexicographically smallest set
    assert exact_select(e, W, 0.0, budget=2).selected == (1, 3)


def test_exact_prefers_smaller_set_on_equal_objective():
    e = np.array([1.0, 0.0])
    W = np.array([[0.0, 1.0], [1.0, 0.0]])  # doc 0 adds nothing (it covers a zero-weight step)
    ex = exact_select(e, W, 0.0, budget=2)
    assert ex.selected == (1,)
    assert ex.objective == pytest.approx(1.0)
    assert ex.n_subsets == 1 + 2 + 1


def test_budget_respected_and_padding_layout():
    rng = np.random.default_rng(3)
    e, W = random_instance(rng, 8, 3, scale=6.0)
    res = greedy_select(e, W, 0.0, budget=3)  # λ = 0: gains stay positive -> fills the budget
    assert res.selected.shape == (3,) and res.gains.shape == (3,)
    assert int(res.n_selected) == 3
    res = greedy_select(e, W, 0.0, budget=20)  # budget > K1
    assert res.selected.shape == (20,)
    assert int(res.n_selected) == 8
    assert sorted(res.order()) == list(range(8))
    assert np.all(res.selected[8:] == -1) and np.all(np.isnan(res.gains[8:]))
    res0 = greedy_select(e, W, 0.3, budget=0)
    assert int(res0.n_selected) == 0 and float(res0.objective) == 0.0 and not bool(res0.fallback)


def test_tau_stop_stops_early():
    e = np.full(4, 0.25)
    W = np.eye(4)[[0, 1, 2, 3]] * np.array([[1.0], [0.8], [0.6], [0.4]])  # gains 0.25, 0.2, 0.15, 0.1
    full = greedy_select(e, W, 0.0, budget=4)
    assert full.order() == [0, 1, 2, 3]
    assert full.pick_gains() == pytest.approx([0.25, 0.2, 0.15, 0.1])
    stopped = greedy_select(e, W, 0.0, budget=4, tau_stop=0.15)  # stops when best gain <= τ_stop
    assert stopped.order() == [0, 1]
    assert not bool(stopped.fallback)
    assert float(stopped.objective) == pytest.approx(0.45)


def test_min_select_fallback():
    e = np.array([0.5, 0.5])
    W = np.array([[0.05, 0.0], [0.0, 0.1], [0.02, 0.02]])  # every gain is negative at λ = 0.3
    res = greedy_select(e, W, 0.3, budget=3)
    assert res.order() == [1]  # argmax of the first-step gains
    assert bool(res.fallback)
    assert res.pick_gains()[0] < 0
    assert float(res.objective) == pytest.approx(objective(e, W, [1], 0.3))
    none = greedy_select(e, W, 0.3, budget=3, min_select=0)
    assert none.order() == [] and not bool(none.fallback) and float(none.objective) == 0.0
    two = greedy_select(e, W, 0.3, budget=3, min_select=2)
    assert two.order() == [1, 0] and bool(two.fallback)
    # a question whose first gain is positive is not flagged even with min_select = 1
    ok = greedy_select(e, np.array([[0.9, 0.9]]), 0.3, budget=3)
    assert ok.order() == [0] and not bool(ok.fallback)


def test_exact_raises_when_too_large():
    e = np.full(3, 1 / 3)
    W = np.full((40, 3), 1 / 40)
    with pytest.raises(ValueError, match=r"C\(40, ≤10\) = .* subsets exceeds max_subsets"):
        exact_select(e, W, 0.3, budget=10)
    with pytest.raises(ValueError, match=r"C\(20, ≤5\) = 21,700 subsets"):
        exact_select(e, np.full((20, 3), 0.05), 0.3, budget=5, max_subsets=1000)


def test_exact_matches_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(10):
        e, W = random_instance(rng, 7, 3)
        for lam in (0.0, 0.2):
            ex = exact_select(e, W, lam, 3)
            assert ex.objective == pytest.approx(brute_force(e, W, lam, 3), abs=1e-12)
            assert ex.objective == pytest.approx(objective(e, W, ex.selected, lam), abs=1e-12)
            assert list(ex.selected) == sorted(ex.selected)


# ---------------------------------------------------------------------------- batching and masks


def test_batched_equals_loop_over_questions():
    rng = np.random.default_rng(5)
    B, K1, N = 25, 9, 4
    e = rng.dirichlet(np.ones(N), size=B)
    W = np.exp(3 * rng.standard_normal((B, K1, N)))
    W /= W.sum(axis=1, keepdims=True)
    for lam, tau, ms in ((0.3, 0.0, 1), (0.0, 0.01, 0), (0.1, 0.0, 3)):
        res = greedy_select(e, W, lam, 4, tau_stop=tau, min_select=ms)
        assert res.batched and res.selected.shape == (B, 4) and res.objective.shape == (B,)
        for b in range(B):
            one = greedy_select(e[b], W[b], lam, 4, tau_stop=tau, min_select=ms)
            assert not one.batched
            assert res.order(b) == one.order()
            np.testing.assert_allclose(res.pick_gains(b), one.pick_gains(), atol=1e-12)
            assert bool(res.fallback[b]) == bool(one.fallback)
            assert float(res.objective[b]) == pytest.approx(float(one.objective), abs=1e-12)
        assert res.orders() == [res.order(b) for b in range(B)]


def test_padding_docs_never_selected_and_padding_steps_ignored():
    rng = np.random.default_rng(9)
    sizes = [(5, 3), (8, 2), (3, 4), (8, 4), (1, 1)]  # (K1_b, N_b)
    B, K1, N = len(sizes), 8, 4
    e = np.full((B, N), 0.7)  # padding steps get large weights: they must not matter
    W = np.full((B, K1, N), 0.9)  # padding docs look attractive: they must never be picked
    doc_mask = np.zeros((B, K1), dtype=bool)
    step_mask = np.zeros((B, N), dtype=bool)
    singles = []
    for b, (k1, n) in enumerate(sizes):
        eb, Wb = random_instance(rng, k1, n)
        e[b, :n], W[b, :k1, :n] = eb, Wb
        W[b, 0, n:] = np.nan  # garbage in padding is ignored too
        doc_mask[b, :k1], step_mask[b, :n] = True, True
        singles.append((eb, Wb))
    for lam, ms in ((0.3, 1), (0.0, 0), (0.05, 6)):
        res = greedy_select(e, W, lam, 6, min_select=ms, doc_mask=doc_mask, step_mask=step_mask)
        for b, (eb, Wb) in enumerate(singles):
            order = res.order(b)
            assert all(doc_mask[b, k] for k in order)
            one = greedy_select(eb, Wb, lam, 6, min_select=ms)
            assert order == one.order()
            assert float(res.objective[b]) == pytest.approx(objective(eb, Wb, order, lam), abs=1e-12)
            assert bool(res.fallback[b]) == bool(one.fallback)
        assert res.n_selected[4] == 1  # a single real document: min_select cannot exceed it


def test_float32_inputs_stay_float32():
    rng = np.random.default_rng(2)
    e, W = random_instance(rng, 10, 4)
    res32 = greedy_select(e.astype(np.float32), W.astype(np.float32), 0.3, 4)
    res64 = greedy_select(e, W, 0.3, 4)
    assert res32.gains.dtype == np.float32
    assert res32.order() == res64.order()
    assert float(res32.objective) == pytest.approx(float(res64.objective), abs=1e-5)


def test_bad_inputs_raise():
    e = np.full(3, 1 / 3)
    W = np.full((4, 3), 0.25)
    with pytest.raises(ValueError, match="step columns"):
        greedy_select(e[:2], W, 0.3, 2)
    with pytest.raises(ValueError, match="doc_mask must have shape"):
        greedy_select(e[None], W[None], 0.3, 2, doc_mask=np.ones((1, 5), dtype=bool))
    W_bad = W.copy()
    W_bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        greedy_select(e, W_bad, 0.3, 2)
    with pytest.raises(ValueError, match="question index"):
        greedy_select(e[None], W[None], 0.3, 2).order()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    B=st.integers(1, 6),
    K1=st.integers(1, 7),
    N=st.integers(1, 4),
    budget=st.integers(0, 4),
    lam=st.sampled_from([0.0, 0.1, 0.3]),
    min_select=st.integers(0, 2),
)
def test_property_batched_padded_matches_singles(seed, B, K1, N, budget, lam, min_select):
    rng = np.random.default_rng(seed)
    k1s = rng.integers(1, K1 + 1, size=B)
    ns = rng.integers(1, N + 1, size=B)
    e = rng.random((B, N))
    W = rng.random((B, K1, N))
    doc_mask = np.arange(K1)[None, :] < k1s[:, None]
    step_mask = np.arange(N)[None, :] < ns[:, None]
    res = greedy_select(e, W, lam, budget, min_select=min_select, doc_mask=doc_mask, step_mask=step_mask)
    for b in range(B):
        eb, Wb = e[b, : ns[b]], W[b, : k1s[b], : ns[b]]
        one = greedy_select(eb, Wb, lam, budget, min_select=min_select)
        assert res.order(b) == one.order()
        assert len(res.order(b)) <= budget
        assert len(res.order(b)) >= min(min_select, budget, k1s[b])
        direct = objective(eb, Wb, res.order(b), lam)
        assert float(res.objective[b]) == pytest.approx(direct, abs=1e-9)
        assert sum(res.pick_gains(b)) == pytest.approx(direct, abs=1e-9)
        if budget and k1s[b] <= 5:
            assert direct <= exact_select(eb, Wb, lam, budget).objective + 1e-9


# ---------------------------------------------------------------------------- "w/o optimisation" (avg / max)

# e = [0.5, 0.3, 0.2]; rows are documents. Scores by hand:
#   avg s_k = Σ_i e_i W_ki:  d0 .05+.03+.16 = .24, d1 .15+.09+.02 = .26, d2 .25+.03+0 = .28, d3 .05+.15+.02 = .22
#   max s_k = max_i e_i W_ki: d0 .16, d1 .15, d2 .25, d3 .15 (d1 and d3 tie: d1 first)
SCORE_E = np.array([0.5, 0.3, 0.2])
SCORE_W = np.array([[0.1, 0.1, 0.8],
                    [0.3, 0.3, 0.1],
                    [0.5, 0.1, 0.0],
                    [0.1, 0.5, 0.1]])


def test_score_select_avg_by_hand():
    res = score_select(SCORE_E, SCORE_W, 0.3, budget=3, mode="avg")
    assert not res.batched and res.order() == [2, 1, 0]
    assert res.pick_gains() == pytest.approx([0.28, 0.26, 0.24])
    assert int(res.n_selected) == 3 and not bool(res.fallback)
    assert float(res.objective) == pytest.approx(objective(SCORE_E, SCORE_W, [2, 1, 0], 0.3), abs=1e-12)
    # f({2, 1}) by hand: coverage .5(1 − .5·.7) + .3(1 − .9·.7) + .2(1 − 1·.9) = .325 + .111 + .02 = .456,
    # noise .3(1 − .25) + .3(1 − .15) = .48.
    two = score_select(SCORE_E, SCORE_W, 0.3, budget=2, mode="avg")
    assert two.order() == [2, 1] and float(two.objective) == pytest.approx(0.456 - 0.48)


def test_score_select_max_by_hand_with_tie():
    res = score_select(SCORE_E, SCORE_W, 0.3, budget=4, mode="max")
    assert res.order() == [2, 0, 1, 3]  # d1 and d3 both score .15: the smaller index first
    assert res.pick_gains() == pytest.approx([0.25, 0.16, 0.15, 0.15])
    assert float(res.objective) == pytest.approx(objective(SCORE_E, SCORE_W, [2, 0, 1, 3], 0.3), abs=1e-12)


def test_score_select_ties_keep_retrieval_order():
    e = np.array([0.5, 0.5])
    W = np.array([[0.2, 0.2], [0.4, 0.0], [0.0, 0.4], [0.4, 0.4]])
    # avg: .2, .2, .2, .4 -> d3 then d0, d1 (three-way tie); max: .1, .2, .2, .2 -> d1, d2, d3.
    assert score_select(e, W, 0.3, budget=3, mode="avg").order() == [3, 0, 1]
    assert score_select(e, W, 0.3, budget=3, mode="max").order() == [1, 2, 3]


def test_score_select_always_fills_the_budget():
    """No stopping rule: negative objectives (λ = 1) and budget > K1 still give min(budget, K1) documents."""
    greedy = greedy_select(SCORE_E, SCORE_W, 1.0, budget=3)
    assert len(greedy.order()) == 1 and bool(greedy.fallback)
    for mode in ("avg", "max"):
        res = score_select(SCORE_E, SCORE_W, 1.0, budget=3, mode=mode)
        assert len(res.order()) == 3 and not bool(res.fallback) and float(res.objective) < 0
        big = score_select(SCORE_E, SCORE_W, 0.3, budget=6, mode=mode)
        assert int(big.n_selected) == 4 and list(big.selected[4:]) == [-1, -1]
        assert np.isnan(big.gains[4:]).all()


def test_score_select_padding_batched():
    """Question 1 has 2 real documents and 2 real steps; its padding holds large values that must be ignored."""
    e1 = np.array([0.6, 0.4])
    W1 = np.array([[0.3, 0.9], [0.7, 0.1]])  # avg .18+.36 = .54, .42+.04 = .46; max .36, .42
    E = np.zeros((2, 3))
    WW = np.full((2, 4, 3), 0.99)
    E[0], WW[0] = SCORE_E, SCORE_W
    E[1, :2], E[1, 2] = e1, 5.0
    WW[1, :2, :2] = W1
    doc_mask = np.array([[True] * 4, [True, True, False, False]])
    step_mask = np.array([[True] * 3, [True, True, False]])
    for mode, q1_order, q1_scores in (("avg", [0, 1], [0.54, 0.46]), ("max", [1, 0], [0.42, 0.36])):
        res = score_select(E, WW, 0.3, budget=3, mode=mode, doc_mask=doc_mask, step_mask=step_mask)
        single = score_select(SCORE_E, SCORE_W, 0.3, budget=3, mode=mode)
        assert res.batched and res.orders() == [single.order(), q1_order]
        assert list(res.n_selected) == [3, 2] and not res.fallback.any()
        assert list(res.selected[1]) == [*q1_order, -1] and np.isnan(res.gains[1, 2])
        assert res.pick_gains(1) == pytest.approx(q1_scores)
        assert res.objective[0] == pytest.approx(float(single.objective), abs=1e-12)
        assert res.objective[1] == pytest.approx(objective(e1, W1, q1_order, 0.3), abs=1e-12)


def test_score_select_float32_and_bad_inputs():
    res = score_select(SCORE_E.astype(np.float32), SCORE_W.astype(np.float32), 0.3, budget=2, mode="max")
    assert res.gains.dtype == np.float32 and res.order() == [2, 0]
    with pytest.raises(ValueError, match="mode"):
        score_select(SCORE_E, SCORE_W, 0.3, budget=2, mode="mean")
    with pytest.raises(ValueError, match="budget"):
        score_select(SCORE_E, SCORE_W, 0.3, budget=-1)
    with pytest.raises(ValueError, match="step columns"):
        score_select(SCORE_E[:2], SCORE_W, 0.3, budget=2)
