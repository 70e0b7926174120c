"""Coverage scoring with the field's tools (`purecover.eval.coverage_scoring`), and the parity of purecover's own
α-nDCG and subtopic recall (`purecover.eval.subtopic_metrics`) with ir_measures/pyndeval (TREC's ndeval)."""

from __future__ import annotations

import math

import ir_measures
import numpy as np
import pytest
from ir_measures import StRecall, alpha_nDCG

from purecover.eval.coverage_collections import CoverageCollection
from purecover.eval.coverage_scoring import cov_at, score_ranked
from purecover.eval.subtopic_metrics import alpha_ndcg, subtopic_recall


def _random_case(rng: np.random.Generator):
    n_docs, n_sub = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    covers = {f"d{i}": {f"s{j}" for j in range(n_sub) if rng.random() < 0.35} for i in range(n_docs)}
    qrels = [ir_measures.Qrel("q", d, int(rng.integers(1, 3)), s) for d, subs in covers.items() for s in sorted(subs)]
    run_docs = [str(d) for d in rng.permutation([*covers, "x1", "x2"])][: int(rng.integers(1, n_docs + 3))]
    scores = [float(s) for s in rng.integers(0, 3, size=len(run_docs))]  # ties on purpose
    return covers, qrels, run_docs, scores, int(rng.integers(1, 21))


def test_our_alpha_ndcg_and_subtopic_recall_equal_pyndeval_on_generated_runs_ties_included(recwarn):
    """ndeval's conventions, which purecover's functions reproduce when given the same inputs: a run is read by
    score, ties by ascending doc id; the ideal ranking's pool is every judged relevant document, and the greedy
    ideal breaks ties towards the largest doc id (so the pool is handed over in descending doc id order)."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        covers, qrels, run_docs, scores, k = _random_case(rng)
        if not qrels:
            continue
        theirs = {str(m.measure): m.value
                  for m in ir_measures.iter_calc([alpha_nDCG @ k, StRecall @ k], qrels,
                                                 [ir_measures.ScoredDoc("q", d, s) for d, s in zip(run_docs, scores)])}
        order = [d for d, _ in sorted(zip(run_docs, scores), key=lambda x: (-x[1], x[0]))]
        ranking = [covers.get(d, set()) for d in order]
        pool = [covers[d] for d in sorted(covers, reverse=True) if covers[d]]
        ours = alpha_ndcg(ranking, pool, k)
        assert math.isclose(0.0 if ours is None else ours, theirs[f"alpha_nDCG@{k}"], abs_tol=1e-9), (covers, order, k)
        assert math.isclose(subtopic_recall(ranking, set().union(*covers.values()), k), theirs[f"StRecall@{k}"],
                            abs_tol=1e-9)
        checked += 1
    assert checked > 300


def _collection(judgments=None):
    qrels = {"t1": {"d1": {"n1": 1}, "d2": {"n2": 1}, "d3": {"n1": 2, "n2": 1}, "d4": {"n3": 1}},
             "t2": {"e1": {"n1": 1}, "e2": {"n2": 1}}, "t3": {}}
    return CoverageCollection({}, qrels, judgments)


def test_a_run_is_scored_with_the_tools_and_by_hand():
    scores = score_ranked({"t1": ["d3", "dx", "d4"], "t2": ["e2"], "t9": ["z"]}, _collection(), depth=5)
    assert scores.topics == ["t1", "t2"] and scores.missing == [] and scores.unjudged == ["t9"]
    assert scores.per_topic["StRecall@5"] == {"t1": 1.0, "t2": 0.5}
    assert scores.per_topic["P@5"] == pytest.approx({"t1": 0.4, "t2": 0.2})
    # nDCG@5 of t1 by hand, trec_eval's linear gain: relevance = highest nugget grade (d3: 2, d4: 1); ideal d3, d1,
    # d2, d4
    dcg = 2 / math.log2(2) + 1 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5)
    assert scores.per_topic["nDCG@5"]["t1"] == pytest.approx(dcg / ideal)
    covers = {"d1": {"n1"}, "d2": {"n2"}, "d3": {"n1", "n2"}, "d4": {"n3"}}
    pool = [covers[d] for d in sorted(covers, reverse=True)]
    assert scores.per_topic["alpha_nDCG@5"]["t1"] == pytest.approx(
        alpha_ndcg([covers["d3"], set(), covers["d4"]], pool, 5))


def test_a_topic_without_a_run_scores_zero_and_the_order_given_is_kept():
    scores = score_ranked({"t1": ["d4", "d1"]}, _collection(), depth=2)
    assert scores.missing == ["t2"] and all(scores.per_topic[m]["t2"] == 0.0 for m in scores.per_topic)
    flipped = score_ranked({"t1": ["d1", "d4"]}, _collection(), depth=2)
    assert scores.per_topic["StRecall@2"]["t1"] == flipped.per_topic["StRecall@2"]["t1"] == pytest.approx(2 / 3)
    assert scores.per_topic["nDCG@2"]["t1"] == pytest.approx(flipped.per_topic["nDCG@2"]["t1"])  # equal grades
    assert scores.mean("StRecall@2") == pytest.approx(1 / 3)


def test_cov_is_cruxs_definition():
    judged = {"a": (4, 0, 1), "b": (3, 3, 0), "c": (0, 2, 0)}
    assert cov_at(["c", "a"], judged, 10) == pytest.approx(1 / 3)  # only sub-question 1 reaches 3
    assert cov_at(["b", "a"], judged, 1) == pytest.approx(2 / 3)
    assert cov_at(["z"], judged, 10) == 0.0  # unjudged documents rate 0
    assert cov_at(["b"], judged, 10, answerable_only=True) == pytest.approx(2 / 2)  # sub-question 3 unanswerable
    assert cov_at(["a"], {}, 10) is None


def test_selections_are_scored_as_the_sets_they_are():
    judgments = {"t1": {"d1": (4, 0), "d3": (3, 3)}, "t2": {"e1": (5,)}}
    scores = score_ranked({"t1": ["d1", "d2"], "t2": []}, _collection(judgments), depth=5, selections=True)
    assert scores.per_topic["StRecall@set"] == {"t1": pytest.approx(2 / 3), "t2": 0.0}
    assert scores.per_topic["Cov@set"] == {"t1": 0.5, "t2": 0.0}
    assert scores.per_topic["Cov@5"]["t1"] == 0.5 and scores.missing == ["t2"]


def test_depth_beyond_ndeval_is_refused():
    with pytest.raises(ValueError, match="depth must be an integer from 1 to 20"):
        score_ranked({"t1": ["d1"]}, _collection(), depth=21)
