"""α-nDCG@K and subtopic recall@K: hand-worked rankings, properties, and a question's gold subtopics."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from purecover.eval.selection_metrics import question_selection, summarize_selection
from purecover.eval.subtopic_metrics import (
    alpha_dcg,
    alpha_ndcg,
    ideal_ranking,
    question_subtopics,
    subtopic_recall,
    subtopic_unit,
)
from purecover.records import CandidateDoc, CandidateRecord

L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)  # the discounts of ranks 1, 2, 3

# ---------------------------------------------------------------- hand-worked rankings

# Subtopics a, b, c; D1 and D2 cover the same subtopic (D2 is redundant after D1), D5 none.
POOL = [{"a"}, {"a"}, {"b"}, {"c"}, set()]
DIVERSE = [POOL[0], POOL[2], POOL[3]]  # D1 D3 D4
REDUNDANT = [POOL[0], POOL[1], POOL[2]]  # D1 D2 D3


def test_a_redundant_passage_lowers_alpha_ndcg():
    ideal = 1 / L2 + 1 / L3 + 1 / L4  # D1, D3, D4: three new subtopics
    assert alpha_dcg(DIVERSE, 3) == pytest.approx(ideal)
    assert alpha_ndcg(DIVERSE, POOL, 3) == pytest.approx(1.0)
    # D2 repeats a: its gain is (1 - 0.5)^1 at rank 2
    assert alpha_dcg(REDUNDANT, 3) == pytest.approx(1 / L2 + 0.5 / L3 + 1 / L4)
    assert alpha_ndcg(REDUNDANT, POOL, 3) == pytest.approx((1 + 0.5 / L3 + 1 / L4) / ideal)
    assert alpha_ndcg(REDUNDANT, POOL, 3) == pytest.approx(0.851959, abs=1e-6)
    assert alpha_ndcg(REDUNDANT, POOL, 3, alpha=1.0) == pytest.approx((1 + 0 + 1 / L4) / ideal)  # no credit at all
    assert alpha_ndcg(REDUNDANT, POOL, 3, alpha=0.0) == pytest.approx(1.0)  # α = 0 does not see redundancy
    assert subtopic_recall(DIVERSE, {"a", "b", "c"}, 3) == 1.0
    assert subtopic_recall(REDUNDANT, {"a", "b", "c"}, 3) == pytest.approx(2 / 3)
    assert subtopic_recall(REDUNDANT, {"a", "b", "c"}, 1) == pytest.approx(1 / 3)


def test_passages_covering_several_subtopics():
    A, B, C, D = {1, 2}, {1}, {3}, {2, 3}
    pool = [A, B, C, D]
    # greedy ideal: A (gain 2, tie with D: the earlier), D (0.5 + 1), then B and C tie at 0.5: B
    assert ideal_ranking(pool, 4) == [0, 3, 1, 2]
    ranking = [A, B, C]
    expected = (2 / L2 + 0.5 / L3 + 1 / L4) / (2 / L2 + 1.5 / L3 + 0.5 / L4)
    assert alpha_ndcg(ranking, pool, 3) == pytest.approx(expected)
    assert alpha_ndcg([D, A], pool, 2) == pytest.approx((2 + 1.5 / L3) / (2 + 1.5 / L3))


def test_cutoff_and_short_rankings():
    # K = 3 but only one passage ranked: the ideal still fills three ranks
    assert alpha_ndcg([POOL[0]], POOL, 3) == pytest.approx(1 / (1 + 1 / L3 + 1 / L4))
    assert alpha_ndcg([], POOL, 3) == 0.0
    assert alpha_ndcg(DIVERSE, POOL, 1) == 1.0  # ranks after K do not count
    assert alpha_ndcg(DIVERSE, [set(), set()], 2) is None  # no passage of the pool covers anything
    assert subtopic_recall(DIVERSE, set(), 3) is None
    assert subtopic_recall([{"a", "z"}], {"a", "b"}, 1) == 0.5  # subtopics outside the set are not counted


@pytest.mark.parametrize(("k", "alpha"), [(0, 0.5), (True, 0.5), (2.0, 0.5), (1, -0.1), (1, 1.5)])
def test_bad_arguments(k, alpha):
    with pytest.raises(ValueError, match="k must be|alpha must"):
        alpha_ndcg(DIVERSE, POOL, k, alpha)


# ---------------------------------------------------------------- properties


def _random_pool(rng: random.Random, n: int, topics: int, per_doc: int) -> list[set[int]]:
    return [set(rng.sample(range(topics), rng.randint(0, per_doc))) for _ in range(n)]


def test_single_subtopic_passages_stay_in_unit_interval_and_the_greedy_ideal_is_exact():
    """One subtopic per passage (the evaluation's case): every ranking scores in [0, 1], the greedy ideal
    scores 1, and no order of the pool beats it (checked over all orderings)."""
    rng = random.Random(0)
    for _ in range(60):
        pool = _random_pool(rng, rng.randint(1, 6), 3, 1)
        k, alpha = rng.randint(1, 4), rng.choice([0.0, 0.3, 0.5, 1.0])
        ideal = [pool[i] for i in ideal_ranking(pool, k, alpha)]
        best = max(alpha_dcg([pool[i] for i in order], k, alpha)
                   for order in itertools.permutations(range(len(pool)), min(k, len(pool))))
        assert alpha_dcg(ideal, k, alpha) == pytest.approx(best)
        for order in itertools.permutations(range(len(pool)), min(k, len(pool))):
            value = alpha_ndcg([pool[i] for i in order], pool, k, alpha)
            assert value is None or 0.0 <= value <= 1.0
        if any(pool):
            assert alpha_ndcg(ideal, pool, k, alpha) == 1.0


def test_alpha_zero_is_ndcg_with_subtopic_counts_as_gains():
    rng = random.Random(1)
    for _ in range(100):
        pool = _random_pool(rng, rng.randint(1, 8), 5, 3)
        k = rng.randint(1, 6)
        ranking = rng.sample(pool, rng.randint(0, len(pool)))
        gains = [len(d) for d in ranking[:k]]
        ideal = sorted((len(d) for d in pool), reverse=True)[:k]
        idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
        expected = sum(g / math.log2(r + 2) for r, g in enumerate(gains)) / idcg if idcg else None
        assert alpha_ndcg(ranking, pool, k, alpha=0.0) == pytest.approx(expected)


def test_the_greedy_ideal_scores_one_with_several_subtopics_per_passage():
    rng = random.Random(2)
    for _ in range(50):
        pool = _random_pool(rng, rng.randint(1, 8), 5, 3)
        k = rng.randint(1, 6)
        if any(pool):
            assert alpha_ndcg([pool[i] for i in ideal_ranking(pool, k)], pool, k) == 1.0


# ---------------------------------------------------------------- a question's gold subtopics


def _record(docs, gold, titles=(), qid="q") -> CandidateRecord:
    return CandidateRecord(qid=qid, question="?", answers=["x"], gold_doc_ids=list(gold), gold_titles=list(titles),
                           docs=[CandidateDoc(doc_id=i, title=t, text=f"text {i}") for i, t in docs])


def test_subtopic_unit_follows_the_corpus():
    assert subtopic_unit("shared") == subtopic_unit("per_question") == "passage"
    assert subtopic_unit("/data/wiki18_100w.jsonl") == "title"


def test_own_paragraphs_every_gold_passage_is_a_subtopic():
    # MuSiQue-like: two supporting paragraphs of one title stay two subtopics; g3 was not retrieved
    rec = _record([("g1", "Paris"), ("x", "Lyon"), ("g2", "Paris")], ["g1", "g2", "g3"], ["Paris", "Rome"])
    topics = question_subtopics(rec, "passage")
    assert topics.subtopics == {("passage", "g1"), ("passage", "g2"), ("passage", "g3")}
    assert topics.covers == ({("passage", "g1")}, frozenset(), {("passage", "g2")})
    assert topics.retrieved == {("passage", "g1"), ("passage", "g2")}


def test_corpus_file_chunks_of_a_supporting_title_are_one_subtopic():
    # 100-word chunks: c1, c2 of "Paris", r1 of "Rome"; an untitled fact f1 found by its text
    rec = _record([("c1", "Paris"), ("c2", " paris "), ("n", "Nice"), ("f1", "")], ["c1", "c2", "c3", "r1", "f1"],
                  ["Paris", '"Rome"'])
    topics = question_subtopics(rec, "title")
    assert topics.subtopics == {("title", "paris"), ("title", "rome"), ("passage", "f1")}
    assert topics.covers[0] == topics.covers[1] == {("title", "paris")}
    assert topics.covers[2] == frozenset() and topics.covers[3] == {("passage", "f1")}
    # StrategyQA-like: no supporting title, every gold id is a subtopic (titled corpus passages too)
    facts = _record([("f1", "Some page"), ("f2", "")], ["f1", "f2", "f3"])
    assert question_subtopics(facts, "title").subtopics == {("passage", f) for f in ("f1", "f2", "f3")}
    assert question_subtopics(facts, "title").covers[0] == {("passage", "f1")}


def test_no_gold_means_no_subtopics():
    rec = _record([("a", "A"), ("b", "B")], [], ["A"])
    for unit in ("passage", "title"):
        topics = question_subtopics(rec, unit)
        assert topics.subtopics == frozenset() and topics.covers == (frozenset(), frozenset())
    with pytest.raises(ValueError, match="unit must be"):
        question_subtopics(rec, "sentence")


def test_question_selection_ranks_the_selection_at_the_budget():
    rec = _record([("x", "X"), ("g1", "G1"), ("y", "Y"), ("g2", "G2")], ["g1", "g2", "g9"])
    ideal3 = 1 + 1 / L3  # g1, g2 then nothing: g9 is not a candidate
    q = question_selection(rec, [0, 1], k=3)  # fewer passages than K: nothing gained after them
    assert q.alpha_ndcg == pytest.approx((1 / L3) / ideal3)
    assert q.subtopic_recall == pytest.approx(1 / 3)
    assert (q.n_subtopics, q.n_subtopics_retrieved, q.alpha, q.subtopic_unit) == (3, 2, 0.5, "passage")
    assert question_selection(rec, [3, 1], k=3).alpha_ndcg == pytest.approx(1.0)  # order among gold is free
    assert question_selection(rec, [1, 3], k=2).subtopic_recall == pytest.approx(2 / 3)
    assert question_selection(rec, [], k=2).alpha_ndcg == 0.0
    assert question_selection(rec, [1]).alpha_ndcg == 1.0  # default cut-off: the selection's length


def test_summary_leaves_out_and_counts_questions_without_gold():
    with_gold = _record([("g1", "A"), ("x", "B")], ["g1", "g2"], qid="q1")
    gold_not_retrieved = _record([("x", "A"), ("y", "B")], ["g1"], qid="q2")
    no_gold = _record([("x", "A")], [], qid="q3")
    rows = [question_selection(with_gold, [0], k=2), question_selection(gold_not_retrieved, [0], k=2),
            question_selection(no_gold, [0], k=2)]
    assert [r.alpha_ndcg for r in rows] == [1.0, None, None]
    assert [r.subtopic_recall for r in rows] == [0.5, 0.0, None]
    sub = summarize_selection(rows).subtopics
    assert (sub.alpha_ndcg, sub.n_alpha_ndcg) == (1.0, 1)
    assert (sub.recall, sub.n_recall) == (pytest.approx(0.25), 2)
    assert (sub.n_no_subtopics, sub.n_none_retrieved, sub.alpha, sub.unit) == (1, 1, 0.5, "passage")
    empty = summarize_selection([]).subtopics
    assert empty.alpha_ndcg is None and empty.n_recall == 0 and empty.n_no_subtopics == 0
    with pytest.raises(ValueError, match="mix subtopic settings"):
        summarize_selection([rows[0], question_selection(with_gold, [0], k=2, alpha=0.3)])


def test_chunks_of_one_article_are_redundant_under_a_corpus_file():
    """A corpus file's two chunks of one supporting article: the second gains (1 − α) as a title subtopic, and
    recall counts the article once; as own paragraphs the same ranking would be perfect."""
    rec = _record([("p1", "Paris"), ("p2", "Paris"), ("r1", "Rome"), ("x", "Nice")], ["p1", "p2", "r1"],
                  ["Paris", "Rome"])
    chunks = question_selection(rec, [0, 1, 2], k=3, unit="title")
    assert chunks.alpha_ndcg == pytest.approx((1 + 0.5 / L3 + 1 / L4) / (1 + 1 / L3 + 0.5 / L4))
    assert question_selection(rec, [0, 2, 1], k=3, unit="title").alpha_ndcg == pytest.approx(1.0)
    assert question_selection(rec, [0, 1], k=2, unit="title").subtopic_recall == 0.5  # Rome still missing
    assert question_selection(rec, [0, 1, 2], k=3, unit="passage").alpha_ndcg == pytest.approx(1.0)


def test_prediction_records_without_the_new_fields_still_read():
    from purecover.records import PredictionRecord

    row = {"qid": "q", "prediction": "x", "method": "retrieval", "k": 1, "selected": [0], "doc_ids": ["a"],
           "prompt_key": "k", "prompt_tokens": 3, "completion_tokens": 1, "em": 0.0, "f1": 0.0, "acc": 0.0,
           "answer_coverage": None, "answer_purity": 0.0, "support_coverage": None, "support_purity": 0.0,
           "crux_coverage": None}
    old = PredictionRecord.model_validate(row)
    assert old.alpha_ndcg is None and old.to_json_dict() == row  # an earlier file is written back unchanged
    new = PredictionRecord(**row, alpha_ndcg=None, subtopic_recall=0.5).to_json_dict()
    assert list(new)[-2:] == ["alpha_ndcg", "subtopic_recall"] and new["alpha_ndcg"] is None
