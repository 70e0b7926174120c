"""e and W from segment attention and from embeddings (docs/concepts/method.md#step-weights-and-coverage), checked against hand computation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purecover.config import load_recipe
from purecover.records import StoredAttention, StoredSimilarity
from purecover.teacher.defaults import resolve_params
from purecover.teacher.estimation import (
    Estimate,
    SegmentAttention,
    SimilarityScores,
    drop_repeated_steps,
    estimate,
    estimate_from_attention,
    estimate_from_embeddings,
    estimate_from_similarity,
    softmax,
    step_scale,
    within_step_spread,
)

TAU = 4e-5


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def attention(step_doc, answer_step, step_step=None) -> SegmentAttention:
    step_doc = np.asarray(step_doc, dtype=np.float64)
    n = step_doc.shape[0]
    if step_step is None:
        step_step = np.zeros((n, n))
    return SegmentAttention(step_doc=step_doc, step_step=np.asarray(step_step, dtype=np.float64),
                            answer_step=np.asarray(answer_step, dtype=np.float64))


# 3 steps, 4 documents; values of the order of real mean attention (1e-4)
STEP_DOC = np.array([[1.0e-4, 3.0e-4, 0.5e-4, 1.5e-4],
                     [2.0e-4, 0.8e-4, 1.1e-4, 1.0e-4],
                     [0.4e-4, 0.9e-4, 2.6e-4, 0.7e-4]])
ANSWER_STEP = np.array([1.2e-4, 0.5e-4, 2.0e-4])
BIAS = np.array([0.6e-4, 0.3e-4, 0.1e-4, 0.0])


# ---------------------------------------------------------------------------- softmax


def test_softmax_helper():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(softmax(x), np_softmax(x))
    np.testing.assert_allclose(softmax(x, axis=0), np_softmax(x, axis=0))
    big = np.array([1e4, 1e4 + 1.0])  # no overflow
    np.testing.assert_allclose(softmax(big), np_softmax(np.array([0.0, 1.0])))
    with_inf = softmax(np.array([-np.inf, 0.0, 0.0]))
    np.testing.assert_allclose(with_inf, [0.0, 0.5, 0.5])


# ---------------------------------------------------------------------------- attention estimator


def test_matches_hand_computation():
    est = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, tau1=TAU, tau2=2 * TAU)
    assert isinstance(est, Estimate)
    np.testing.assert_allclose(est.e, np_softmax(ANSWER_STEP / TAU), rtol=1e-12)
    expected_W = np.stack([np_softmax((STEP_DOC[i] - BIAS) / (2 * TAU)) for i in range(3)], axis=1)
    assert est.W.shape == (4, 3)  # (K1, N)
    np.testing.assert_allclose(est.W, expected_W, rtol=1e-12)
    np.testing.assert_allclose(est.W.sum(axis=0), 1.0)
    assert est.e.sum() == pytest.approx(1.0)
    assert est.notes == []


def test_temperatures_are_separate():
    a = attention(STEP_DOC, ANSWER_STEP)
    base = estimate_from_attention(a, None, tau1=TAU, tau2=TAU)
    sharp_e = estimate_from_attention(a, None, tau1=TAU / 4, tau2=TAU)
    flat_e = estimate_from_attention(a, None, tau1=TAU * 4, tau2=TAU)
    np.testing.assert_allclose(sharp_e.W, base.W)  # τ1 does not touch W
    np.testing.assert_allclose(flat_e.W, base.W)
    assert sharp_e.e.max() > base.e.max() > flat_e.e.max()
    assert int(np.argmax(sharp_e.e)) == int(np.argmax(ANSWER_STEP)) == 2
    sharp_W = estimate_from_attention(a, None, tau1=TAU, tau2=TAU / 4)
    np.testing.assert_allclose(sharp_W.e, base.e)  # τ2 does not touch e
    assert np.all(sharp_W.W.max(axis=0) > base.W.max(axis=0))


def test_w_is_a_softmax_over_documents_not_steps():
    # one step strongly attends document 2; W's column for that step must peak at row 2
    step_doc = np.array([[1e-4, 1e-4, 5e-4], [3e-4, 1e-4, 1e-4]])
    est = estimate_from_attention(attention(step_doc, [1e-4, 1e-4]), None, TAU, TAU)
    assert est.W.shape == (3, 2)
    assert int(np.argmax(est.W[:, 0])) == 2
    assert int(np.argmax(est.W[:, 1])) == 0
    np.testing.assert_allclose(est.W.sum(axis=0), [1.0, 1.0])
    assert not np.allclose(est.W.sum(axis=1), 1.0)


def test_calibration_subtracts_bias_per_position():
    a = attention(STEP_DOC, ANSWER_STEP)
    with_bias = estimate_from_attention(a, BIAS, TAU, TAU)
    shifted = attention(STEP_DOC - BIAS[None, :], ANSWER_STEP)
    np.testing.assert_allclose(with_bias.W, estimate_from_attention(shifted, None, TAU, TAU).W, rtol=1e-12)
    np.testing.assert_allclose(with_bias.e, estimate_from_attention(a, None, TAU, TAU).e)  # e is not calibrated
    # the bias does change W (it is not a constant shift across documents)
    assert not np.allclose(with_bias.W, estimate_from_attention(a, None, TAU, TAU).W)


def test_constant_bias_does_not_change_w():
    a = attention(STEP_DOC, ANSWER_STEP)
    np.testing.assert_allclose(estimate_from_attention(a, np.full(4, 7e-5), TAU, TAU).W,
                               estimate_from_attention(a, None, TAU, TAU).W, rtol=1e-10)


def test_bias_equal_to_excess_attention_flattens_the_document():
    # the first document only looks covered because of position bias: all steps attend it 3e-4 more
    base = np.array([[1e-4, 2e-4, 1e-4], [1e-4, 1e-4, 2e-4]])
    step_doc = base + np.array([[3e-4, 0.0, 0.0]])
    a = attention(step_doc, [1e-4, 1e-4])
    raw = estimate_from_attention(a, None, TAU, TAU)
    assert np.all(np.argmax(raw.W, axis=0) == 0)  # uncalibrated: doc 0 wins every step
    cal = estimate_from_attention(a, [3e-4, 0.0, 0.0], TAU, TAU)
    np.testing.assert_allclose(cal.W, estimate_from_attention(attention(base, [1e-4, 1e-4]), None, TAU, TAU).W)
    assert cal.W[0, 0] == pytest.approx(cal.W[2, 0])  # doc 0 is now level with doc 2 on step 0
    assert int(np.argmax(cal.W[:, 0])) == 1 and int(np.argmax(cal.W[:, 1])) == 2


def test_bias_none_equals_zero_bias():
    a = attention(STEP_DOC, ANSWER_STEP)
    none = estimate_from_attention(a, None, TAU, TAU)
    zero = estimate_from_attention(a, [0.0] * 4, TAU, TAU)
    np.testing.assert_array_equal(none.W, zero.W)
    np.testing.assert_array_equal(none.e, zero.e)


def test_longer_bias_uses_the_first_k1_positions():
    a = attention(STEP_DOC, ANSWER_STEP)
    long = estimate_from_attention(a, [*BIAS, 9e-4, -9e-4], TAU, TAU)
    np.testing.assert_allclose(long.W, estimate_from_attention(a, BIAS, TAU, TAU).W)


def test_bias_shorter_than_k1_is_an_error():
    with pytest.raises(ValueError, match="3 entries for 4 documents"):
        estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS[:3], TAU, TAU)


def test_no_cot_weighting_sets_every_e_to_one():
    # the paper's ablation: P(e|q) = 1 for every step (not 1/N), so coverage is summed unweighted
    est = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, TAU, TAU, cot_weighting=False)
    np.testing.assert_array_equal(est.e, [1.0, 1.0, 1.0])
    np.testing.assert_allclose(est.W, estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, TAU, TAU).W)
    assert est.notes == []


@pytest.mark.parametrize("answer_step", [[np.nan, np.nan, np.nan], [1e-4, np.nan, 2e-4], [np.inf, 0.0, 0.0]])
def test_non_finite_answer_attention_gives_uniform_e_with_a_note(answer_step):
    est = estimate_from_attention(attention(STEP_DOC, answer_step), None, TAU, TAU)
    np.testing.assert_allclose(est.e, [1 / 3] * 3)
    assert len(est.notes) == 1 and "uniform" in est.notes[0]
    assert np.all(np.isfinite(est.W))


def test_empty_document_gets_zero_coverage():
    step_doc = STEP_DOC.copy()
    step_doc[:, 1] = np.nan  # document 1 has an empty span
    est = estimate_from_attention(attention(step_doc, ANSWER_STEP), BIAS, TAU, TAU)
    np.testing.assert_array_equal(est.W[1], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(est.W.sum(axis=0), 1.0)
    # the other documents share the mass as a softmax over the remaining three
    keep = [0, 2, 3]
    expected = np.stack([np_softmax((STEP_DOC[i, keep] - BIAS[keep]) / TAU) for i in range(3)], axis=1)
    np.testing.assert_allclose(est.W[keep], expected, rtol=1e-12)


def test_single_step_single_document():
    est = estimate_from_attention(attention([[2e-4]], [1e-4]), [1e-4], TAU, TAU)
    np.testing.assert_allclose(est.e, [1.0])
    np.testing.assert_allclose(est.W, [[1.0]])


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 6), k1=st.integers(1, 8), seed=st.integers(0, 2**31 - 1),
       tau1=st.floats(1e-6, 1.0), tau2=st.floats(1e-6, 1.0))
def test_estimate_is_always_a_distribution(n, k1, seed, tau1, tau2):
    rng = np.random.default_rng(seed)
    a = attention(rng.uniform(0, 1e-3, (n, k1)), rng.uniform(0, 1e-3, n))
    est = estimate_from_attention(a, rng.uniform(0, 5e-4, k1), tau1, tau2)
    assert est.e.shape == (n,) and est.W.shape == (k1, n)
    assert np.all(est.e >= 0) and est.e.sum() == pytest.approx(1.0)
    assert np.all(est.W >= 0) and np.allclose(est.W.sum(axis=0), 1.0)


# ---------------------------------------------------------------------------- SegmentAttention


def test_from_matrix_splits_blocks():
    n_docs, n_steps = 4, 3
    m = np.arange((n_steps + 1) * (n_docs + n_steps), dtype=np.float64).reshape(n_steps + 1, n_docs + n_steps)
    a = SegmentAttention.from_matrix(m.tolist(), n_docs=n_docs, n_steps=n_steps)
    np.testing.assert_array_equal(a.step_doc, m[:3, :4])
    np.testing.assert_array_equal(a.step_step, m[:3, 4:])
    np.testing.assert_array_equal(a.answer_step, m[3, 4:])
    assert a.step_doc.shape == (3, 4) and a.step_step.shape == (3, 3) and a.answer_step.shape == (3,)
    assert a.step_doc.dtype == np.float64
    assert a.step_doc[1, 2] == 1 * 7 + 2
    assert a.answer_step[0] == 3 * 7 + 4
    d = a.to_record()
    assert d.step_doc == m[:3, :4].tolist() and d.answer_step == m[3, 4:].tolist()


def test_from_matrix_feeds_the_estimator():
    m = np.zeros((4, 7))
    m[:3, :4] = STEP_DOC
    m[3, 4:] = ANSWER_STEP
    est = estimate_from_attention(SegmentAttention.from_matrix(m, 4, 3), BIAS, TAU, TAU)
    np.testing.assert_allclose(est.W, estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, TAU, TAU).W)
    np.testing.assert_allclose(est.e, np_softmax(ANSWER_STEP / TAU))


@pytest.mark.parametrize("shape", [(3, 7), (4, 6), (5, 7), (4, 8), (7, 4), (28,)])
def test_from_matrix_rejects_wrong_shapes(shape):
    with pytest.raises(ValueError, match=r"expected \(4, 7\)"):
        SegmentAttention.from_matrix(np.zeros(shape), n_docs=4, n_steps=3)


# ---------------------------------------------------------------------------- embedding estimator


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


DOCS = np.stack([unit([1, 0, 0, 0]), unit([0, 1, 0, 0]), unit([0, 0, 1, 0]), unit([1, 1, 1, 1])])


def test_embedding_step_identical_to_a_document_covers_it():
    steps = np.stack([DOCS[2], unit([0.9, 0.1, 0, 0])])
    est = estimate_from_embeddings(steps, DOCS, unit([0, 0, 1, 0]), tau=0.1)
    assert est.W.shape == (4, 2)
    assert int(np.argmax(est.W[:, 0])) == 2
    assert int(np.argmax(est.W[:, 1])) == 0
    # hand computation: W = softmax_k(cos / τ), e = softmax_i(cos(a, c_i) / τ)
    np.testing.assert_allclose(est.W, np_softmax((DOCS @ steps.T) / 0.1, axis=0), rtol=1e-12)
    np.testing.assert_allclose(est.e, np_softmax((steps @ unit([0, 0, 1, 0])) / 0.1), rtol=1e-12)
    assert est.e[0] > est.e[1]  # the answer is the first step's content
    np.testing.assert_allclose(est.W.sum(axis=0), 1.0)


def test_embedding_temperature_sharpens():
    steps = np.stack([DOCS[1]])
    warm = estimate_from_embeddings(steps, DOCS, None, tau=1.0, cot_weighting=False)
    cold = estimate_from_embeddings(steps, DOCS, None, tau=0.01, cot_weighting=False)
    assert cold.W[1, 0] > warm.W[1, 0]
    assert cold.W[1, 0] == pytest.approx(1.0, abs=1e-6)
    assert warm.W[1, 0] < 0.5
    # ranking by similarity is the same at both temperatures
    assert np.argsort(-warm.W[:, 0]).tolist()[0] == np.argsort(-cold.W[:, 0]).tolist()[0] == 1


def test_embedding_without_cot_weighting_sets_every_e_to_one():
    steps = np.stack([DOCS[0], DOCS[1], DOCS[2]])
    est = estimate_from_embeddings(steps, DOCS, unit([1, 0, 0, 0]), tau=0.1, cot_weighting=False)
    np.testing.assert_array_equal(est.e, [1.0, 1.0, 1.0])
    assert est.notes == []


def test_embedding_without_answer_is_uniform_with_a_note():
    steps = np.stack([DOCS[0], DOCS[1]])
    est = estimate_from_embeddings(steps, DOCS, None, tau=0.1)
    np.testing.assert_allclose(est.e, [0.5, 0.5])
    assert len(est.notes) == 1


def test_embedding_has_its_own_e_temperature():
    steps = np.stack([DOCS[2], unit([0.9, 0.1, 0, 0])])
    answer = unit([0, 0, 1, 0])
    one = estimate_from_embeddings(steps, DOCS, answer, tau=0.1)
    split = estimate_from_embeddings(steps, DOCS, answer, tau=0.1, tau_e=2.0)
    np.testing.assert_array_equal(split.W, one.W)  # τ_e does not touch W
    np.testing.assert_allclose(split.e, np_softmax((steps @ answer) / 2.0), rtol=1e-12)
    assert one.e.max() > 0.99 and split.e.max() < 0.65  # the shared τ made e one-hot; its own τ does not


# ---------------------------------------------------------------------------- zscore scale


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_zscore_is_invariant_to_the_attention_magnitude(scale):
    a = attention(STEP_DOC * scale, ANSWER_STEP * scale)
    ref = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, 1.0, 0.5, normalize="zscore")
    est = estimate_from_attention(a, BIAS * scale, 1.0, 0.5, normalize="zscore")
    np.testing.assert_allclose(est.W, ref.W, rtol=1e-9)
    np.testing.assert_allclose(est.e, ref.e, rtol=1e-9)
    # the absolute scale is not: the same temperatures give another W at another magnitude
    if scale != 1.0:
        absolute = estimate_from_attention(a, BIAS * scale, TAU, TAU)
        assert not np.allclose(absolute.W, estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, TAU, TAU).W)


def test_zscore_units_are_the_within_step_spread_and_the_mean_step_score():
    cal = STEP_DOC - BIAS[None, :]
    sigma = np.sqrt(((cal - cal.mean(axis=1, keepdims=True)) ** 2).mean())
    assert within_step_spread(cal) == pytest.approx(sigma)
    assert step_scale(ANSWER_STEP) == pytest.approx(ANSWER_STEP.mean())
    est = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, 0.7, 0.3, normalize="zscore")
    np.testing.assert_allclose(est.W, np_softmax(cal.T / (sigma * 0.3), axis=0), rtol=1e-12)
    np.testing.assert_allclose(est.e, np_softmax(ANSWER_STEP / (ANSWER_STEP.mean() * 0.7)), rtol=1e-12)


def test_within_step_spread_ignores_per_step_shifts():
    # a step whose scores are all shifted changes the plain standard deviation, not the within-step spread
    shifted = STEP_DOC + np.array([[0.0], [5e-3], [-2e-3]])
    assert within_step_spread(shifted) == pytest.approx(within_step_spread(STEP_DOC))
    assert shifted.std() > 10 * within_step_spread(STEP_DOC)
    a = estimate_from_attention(attention(shifted, ANSWER_STEP), None, 1.0, 0.4, normalize="zscore")
    b = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), None, 1.0, 0.4, normalize="zscore")
    np.testing.assert_allclose(a.W, b.W, rtol=1e-9)


def test_zscore_e_keeps_the_ratio_of_two_steps():
    # with two steps a z-score is always ±1; the mean scale keeps how different the two are
    near = estimate_from_attention(attention(STEP_DOC[:2], [1.0e-4, 1.1e-4]), None, 0.4, 0.4, normalize="zscore")
    far = estimate_from_attention(attention(STEP_DOC[:2], [1.0e-4, 4.0e-4]), None, 0.4, 0.4, normalize="zscore")
    assert 0.5 < near.e[1] < 0.6 < 0.9 < far.e[1]


def test_zscore_of_a_flat_block_is_uniform_and_ignores_empty_spans():
    flat = attention(np.full((2, 3), 2e-4), [0.0, 0.0])
    est = estimate_from_attention(flat, None, 1.0, 1.0, normalize="zscore")
    np.testing.assert_allclose(est.W, 1 / 3)
    np.testing.assert_allclose(est.e, [0.5, 0.5])
    step_doc = STEP_DOC.copy()
    step_doc[:, 1] = np.nan
    assert within_step_spread(step_doc) == pytest.approx(within_step_spread(np.delete(STEP_DOC, 1, axis=1)))
    W = estimate_from_attention(attention(step_doc, ANSWER_STEP), None, 1.0, 1.0, normalize="zscore").W
    np.testing.assert_array_equal(W[1], 0.0)


def test_unknown_scale_is_an_error():
    with pytest.raises(ValueError, match="normalize"):
        estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), None, 1.0, 1.0, normalize="minmax")


# ---------------------------------------------------------------------------- estimate(): sources per estimator


SIM = SimilarityScores(step_doc=np.array([[0.9, 0.1, 0.2, 0.3], [0.1, 0.8, 0.2, 0.1], [0.2, 0.2, 0.7, 0.1]]),
                       answer_step=np.array([0.1, 0.2, 0.9]))


def params(*overrides):
    return resolve_params(load_recipe(None, list(overrides)).teacher)


def test_attention_estimator_uses_attention_and_bias():
    p = params("teacher.estimator=attention")
    est = estimate(p, attention(STEP_DOC, ANSWER_STEP), None, BIAS)
    ref = estimate_from_attention(attention(STEP_DOC, ANSWER_STEP), BIAS, p.tau_e, p.tau_w, True, p.normalize)
    np.testing.assert_array_equal(est.W, ref.W)
    no_cal = estimate(params("teacher.estimator=attention", "teacher.calibrate=false"),
                      attention(STEP_DOC, ANSWER_STEP), None, BIAS)
    assert not np.allclose(no_cal.W, est.W)  # "no calibration" sets Bias = 0


def test_no_attention_ablation_replaces_only_w():
    att = attention(STEP_DOC, ANSWER_STEP)
    full = estimate(params("teacher.estimator=attention", "teacher.normalize=absolute"), att, None, BIAS)
    ablation = params("teacher.estimator=no_attention", "teacher.normalize=absolute")
    assert (ablation.e_source, ablation.w_source, ablation.calibrate) == ("attention", "similarity", False)
    est = estimate(ablation, att, SIM, BIAS)
    np.testing.assert_allclose(est.e, full.e)  # e still from attention (same τ1)
    np.testing.assert_allclose(est.W, np_softmax(SIM.step_doc.T / ablation.tau_w, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="needs similarity scores"):
        estimate(ablation, att, None, BIAS)


def test_embedding_estimator_uses_similarity_only():
    p = params("teacher.estimator=embedding")
    est = estimate(p, None, SIM)
    ref = estimate_from_similarity(SIM, p.tau_w, p.tau_e, True, p.normalize)
    np.testing.assert_array_equal(est.W, ref.W)
    np.testing.assert_array_equal(est.e, ref.e)


def test_similarity_scores_round_trip_through_json_lists():
    d = StoredSimilarity(step_doc=[[0.5, None]], answer_step=[None])
    sim = SimilarityScores.from_record(d)
    assert np.isnan(sim.step_doc[0, 1]) and np.isnan(sim.answer_step[0])
    assert sim.to_record() == d and SimilarityScores.from_record(sim.to_record()).step_doc[0, 0] == 0.5
    att = SegmentAttention.from_record(StoredAttention(step_doc=[[1e-4]], step_step=[[None]], answer_step=[2e-4]))
    assert att.answer_step[0] == 2e-4 and np.isnan(att.step_step[0, 0])


# ---------------------------------------------------------------------------- repeated steps (teacher.repeated_steps)


LOOP = ["Rush released Counterparts in 1993.", "The song was produced by Gavin Brown.",
        "the song was  produced by Gavin Brown"]  # a reply that loops: the third repeats the second


def test_repeated_steps_drop_weighs_a_repeat_zero_and_keeps_w():
    att = attention(STEP_DOC, ANSWER_STEP)
    keep = estimate(params("teacher.estimator=attention"), att, None, BIAS, LOOP)
    drop = estimate(params("teacher.estimator=attention", "teacher.repeated_steps=drop"), att, None, BIAS, LOOP)
    np.testing.assert_array_equal(drop.W, keep.W)
    assert drop.e[2] == 0.0 and drop.e.sum() == pytest.approx(1.0)  # CoT weighting: renormalised
    np.testing.assert_allclose(drop.e[:2], keep.e[:2] / keep.e[:2].sum())
    assert drop.notes == [*keep.notes, "1 step repeats an earlier one: weighted 0 (teacher.repeated_steps: drop)"]
    flat = drop_repeated_steps(Estimate(np.ones(3), keep.W, []), LOOP, cot_weighting=False)
    np.testing.assert_array_equal(flat.e, [1.0, 1.0, 0.0])  # without CoT weighting every other step still weighs 1
    distinct = drop_repeated_steps(keep, ["a", "b", "c"], cot_weighting=True)
    assert distinct is keep  # nothing repeats: the estimate as it was


def test_a_step_weighted_zero_selects_as_if_it_were_not_there():
    """The greedy over e with a repeat weighted 0 picks what it picks with the repeat's column removed."""
    from purecover.teacher.selection import solve

    p = params("teacher.estimator=attention", "teacher.repeated_steps=drop", "teacher.lam=0.1")
    rng = np.random.default_rng(0)
    pairs, without = [], []
    for _ in range(20):
        step_doc = rng.uniform(0.5e-4, 3e-4, size=(3, 6))
        step_doc[2] = step_doc[1]  # the loop: the repeat attends as its original does
        est = estimate(p, attention(step_doc, rng.uniform(0.5e-4, 2e-4, 3)), None, None, LOOP)
        pairs.append((est.e, est.W))
        without.append((est.e[:2], est.W[:, :2]))
    a, b = solve(pairs, p), solve(without, p)
    assert [a.order(i) for i in range(20)] == [b.order(i) for i in range(20)]
    np.testing.assert_allclose(a.objective, b.objective)


def test_repeated_steps_drop_needs_the_steps():
    p = params("teacher.estimator=attention", "teacher.repeated_steps=drop")
    with pytest.raises(ValueError, match="needs the question's steps"):
        estimate(p, attention(STEP_DOC, ANSWER_STEP), None, BIAS)
    with pytest.raises(ValueError, match="2 steps for 3 step weights"):
        estimate(p, attention(STEP_DOC, ANSWER_STEP), None, BIAS, LOOP[:2])
    with pytest.raises(ValueError, match="repeated_steps must be 'keep' or 'drop'"):
        resolve_params(load_recipe(None, []).teacher, repeated_steps="merge")
