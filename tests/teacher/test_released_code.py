"""`teacher.objective: released_code`: the greedy of the authors' released code, checked against hand-worked
examples and against a plain per-question reading of its rule (written here from the stated formula, one
document at a time), its three stopping rules, and the inputs the original crashes on."""

from __future__ import annotations

import numpy as np
import pytest

from purecover.teacher.solvers import released_code_greedy, released_code_noise


def reference(W: np.ndarray, lam: float, budget: int, tau_stop: float = 0.0) -> tuple[list[int], list[float]]:
    """The stated rule, literally: covered_i starts at 0; each round, for every remaining document d in index
    order, Δg = Σ_i [(1 − (1 − covered_i)(1 − W[d, i])) − covered_i], noise = 1 − max W[d] / max_d' W[d', i*],
    i* = argmax W[d]; gain = (1 − λ)Δg − λ noise; the strictly best gain wins. Stop when the best is ≤ τ, when
    2 × steps documents are chosen, or after `budget` rounds."""
    n_docs, n_steps = W.shape
    covered = np.zeros(n_steps)
    chosen: list[int] = []
    gains: list[float] = []
    for _ in range(budget):
        best, best_d = -np.inf, None
        for d in range(n_docs):
            if d in chosen:
                continue
            new = 1 - (1 - covered) * (1 - W[d])
            delta = float(np.sum(new - covered))
            if n_steps:
                column = int(np.argmax(W[d]))
                top = float(np.max(W[:, column]))
                noise = 1 - float(np.max(W[d])) / top if top > 0 else 1.0
            else:
                noise = 1.0
            gain = (1 - lam) * delta - lam * noise
            if gain > best:
                best, best_d = gain, d
        if best_d is None or best <= tau_stop or len(chosen) >= 2 * n_steps:
            break
        chosen.append(best_d)
        gains.append(best)
        covered = 1 - (1 - covered) * (1 - W[best_d])
    return chosen, gains


def test_a_hand_worked_example():
    # 3 documents x 2 steps. Noise: doc 0's strongest step is 0, best there is doc 0 itself -> 0; doc 1: its
    # strongest step 1 (0.6), best there 0.6 -> 0; doc 2: strongest step 0 (0.2), best there 0.8 -> 1 - 0.25.
    W = np.array([[0.8, 0.1], [0.1, 0.6], [0.2, 0.1]])
    assert released_code_noise(W).tolist() == pytest.approx([0.0, 0.0, 0.75])
    # λ = 0.5, round 1: gains 0.5*0.9 = 0.45, 0.5*0.7 = 0.35, 0.5*0.3 - 0.5*0.75 = -0.225 -> doc 0.
    # round 2 (uncovered 0.2, 0.9): doc 1 0.5*(0.02 + 0.54) = 0.28; doc 2 0.5*(0.04 + 0.09) - 0.375 < 0 -> doc 1.
    # round 3 (uncovered 0.18, 0.36): doc 2 0.5*(0.036 + 0.036) - 0.375 < 0 -> stop at gain <= 0.
    result = released_code_greedy(W, lam=0.5, budget=20)
    assert result.order() == [0, 1] and result.pick_gains() == pytest.approx([0.45, 0.28])
    assert not result.fallback
    # objective: (1 - λ) g(S) - λ Σ noise = 0.5 * ((1 - 0.2*0.9... per step) ...)
    g = (1 - 0.2 * 0.9) + (1 - 0.9 * 0.4)
    assert float(result.objective) == pytest.approx(0.5 * g - 0.5 * 0.0)
    assert reference(W, 0.5, 20) == ([0, 1], pytest.approx([0.45, 0.28]))


def test_step_weights_play_no_part_and_two_picks_per_step_at_most():
    W = np.full((6, 1), 0.3)  # one step, six equal documents: gains stay positive at λ = 0
    result = released_code_greedy(W, lam=0.0, budget=20)
    assert result.order() == [0, 1]  # capped at 2 x 1 step, ties to the smallest index
    assert released_code_greedy(W, lam=0.0, budget=1).order() == [0]  # the budget caps first


@pytest.mark.parametrize("seed", range(6))
def test_it_equals_the_plain_reading_of_the_rule_on_random_batches(seed):
    rng = np.random.default_rng(seed)
    matrices = []
    for _ in range(40):
        k1, n = int(rng.integers(1, 21)), int(rng.integers(1, 6))
        logits = rng.normal(size=(k1, n)) * rng.uniform(0.5, 4)
        W = np.exp(logits) / np.exp(logits).sum(axis=0, keepdims=True)  # column softmax, as the code's calibration
        matrices.append(W)
    lam, budget = float(rng.choice([0.1, 0.3, 0.5, 0.9])), int(rng.choice([3, 5, 20]))
    k_max, n_max = max(W.shape[0] for W in matrices), max(W.shape[1] for W in matrices)
    batch = np.zeros((len(matrices), k_max, n_max))
    doc_mask = np.zeros((len(matrices), k_max), dtype=bool)
    step_mask = np.zeros((len(matrices), n_max), dtype=bool)
    for b, W in enumerate(matrices):
        batch[b, : W.shape[0], : W.shape[1]] = W
        doc_mask[b, : W.shape[0]] = True
        step_mask[b, : W.shape[1]] = True
    result = released_code_greedy(batch, lam, budget, doc_mask=doc_mask, step_mask=step_mask)
    for b, W in enumerate(matrices):
        order, gains = reference(W, lam, budget)
        assert result.order(b) == order, (b, lam, budget)
        assert result.pick_gains(b) == pytest.approx(gains)
        assert released_code_greedy(W, lam, budget).order() == order  # unbatched, unpadded: the same


def test_what_the_original_crashes_on():
    # no steps: the original's argmax of an empty row raises; here nothing is picked (2 x 0 steps)
    none = released_code_greedy(np.zeros((4, 0)), lam=0.3, budget=5)
    assert none.order() == [] and not none.fallback
    # a step no document supports (a 0/0 noise in the original): those documents count as pure noise
    W = np.array([[0.0, 0.0], [0.0, 0.5]])
    assert released_code_noise(W).tolist() == [1.0, 0.0]
    assert released_code_greedy(W, lam=0.3, budget=5).order() == [1]
    # min_select (not in the code) forces a pick past a low gain, flagged, within the caps
    forced = released_code_greedy(np.array([[0.01], [0.02]]), lam=1.0, budget=5, min_select=1)  # best gain 0
    assert forced.order() == [1] and bool(forced.fallback)
    with pytest.raises(ValueError, match="lam must be finite"):
        released_code_greedy(W, lam=float("nan"), budget=5)


def test_the_recipe_key_reaches_the_labels_solver_and_their_record():
    """teacher.objective picks the solver the label stage and `purecover tune` share (`selection.solve`), and the
    resolved settings record it (absent for the paper's form, as earlier versions wrote them)."""
    from purecover.config import load_recipe
    from purecover.teacher.defaults import resolve_params
    from purecover.teacher.selection import solve, stop_reason
    from purecover.teacher.solvers import greedy_select

    rng = np.random.default_rng(7)
    pairs = []
    for _ in range(5):
        W = rng.dirichlet(np.ones(8), size=3).T  # 8 documents x 3 steps, columns sum to 1
        pairs.append((rng.dirichlet(np.ones(3)), W))
    released = resolve_params(load_recipe(None, ["teacher.objective=released_code", "teacher.budget=20",
                                                 "teacher.min_select=0", "teacher.lam=0.3"]).teacher)
    paper = resolve_params(load_recipe(None, ["teacher.lam=0.3"]).teacher)
    got = solve(pairs, released)
    for b, (e, W) in enumerate(pairs):
        want = released_code_greedy(W, 0.3, 20)
        assert got.order(b) == want.order() and len(want.order()) <= 6  # at most 2 x 3 steps
        reason = stop_reason(want.pick_gains(), 8, released, n_steps=3)
        assert reason == ("budget" if len(want.order()) == 6 else "threshold")
        assert solve([(e, W)], paper).order(0) == greedy_select(e, W, 0.3, paper.budget).order()
    assert released.to_record().objective == "released_code" and paper.to_record().objective is None
    assert "objective" not in paper.to_record().to_json_dict()


@pytest.mark.parametrize(("reply", "steps", "status"), [
    ("[Answer]: Paris", 1, "fallback"),                       # answer only: the original has no step column
    ("Step 1: Doc A names the city.\nStep 2: It is in France.\nAnswer: Paris", 2, "ok"),  # unbracketed markers
    ("The city is Paris. It lies in France.", 2, "fallback"),  # no markers at all
    ("", 1, "fallback"),                                      # empty reply
])
def test_replies_the_original_cannot_split_still_get_a_label(reply, steps, status):
    """The code splits replies on "[Step N]:" alone, so an answer-only or unbracketed reply leaves it a coverage
    matrix with no step column, and its greedy fails on it. Here the reply parser's fallbacks give at least one step
    and the released-code greedy a label of at most 2 x steps picks, from a real estimate."""
    from purecover.teacher.estimation import estimate_from_embeddings
    from purecover.teacher.parsing import parse_reply

    parsed = parse_reply(reply, "Which city is the capital of France?", max_steps=5)
    assert len(parsed.steps) == steps and parsed.status == status
    rng = np.random.default_rng(len(reply))
    est = estimate_from_embeddings(rng.normal(size=(steps, 16)), rng.normal(size=(6, 16)), rng.normal(size=16),
                                   tau=0.1)
    assert est.W.shape == (6, steps)
    picks = released_code_greedy(est.W, lam=0.3, budget=20).order()
    assert 1 <= len(picks) <= 2 * steps and len(set(picks)) == len(picks)
