"""Selection metrics (Coverage@K, Purity@K and their means over questions), CRUX Cov, and α-nDCG@K / subtopic
recall@K on real HotpotQA questions (tests/eval/test_subtopic_metrics.py has the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from purecover.data import load_examples
from purecover.data.corpus import question_docs
from purecover.data.data_stage import build_record, gold_doc_ids
from purecover.data.samples import SAMPLE_FILES, sample_data_dir
from purecover.eval.selection_metrics import (
    answer_containing,
    coverage_at_k,
    crux_coverage,
    purity_at_k,
    question_selection,
    summarize_selection,
)
from purecover.records import CandidateDoc, CandidateRecord

# ---------------------------------------------------------------- CRUX Cov


def test_crux_coverage_by_hand():
    # LANCER's worked-example ratings matrix, ranked d2, d4, d3, d5, d1
    ratings = [[1, 1, 0], [2, 2, 1], [5, 2, 0], [0, 0, 3], [3, 3, 0]]
    expected = [0.0, 0.0, 1 / 3, 2 / 3, 1.0]
    for k, e in enumerate(expected, start=1):
        assert crux_coverage(ratings, k, eta=3) == pytest.approx(e)
        assert crux_coverage(np.array(ratings), k, eta=3) == pytest.approx(e)
    # a lower threshold: rating 2 now answers q1 and q2 from d4 at rank 2
    assert crux_coverage(ratings, 2, eta=2) == pytest.approx(2 / 3)


def test_crux_coverage_edge_cases():
    assert crux_coverage([], 3) is None
    assert crux_coverage([[], []], 3) is None
    with pytest.raises(ValueError, match="lengths"):
        crux_coverage([[1, 2], [3]], 2)


# ---------------------------------------------------------------- answer-containing / coverage / purity


def test_answer_containing_whole_token_spans():
    docs = [
        CandidateDoc(doc_id="a", title="New York City", text="The largest city in the US."),
        CandidateDoc(doc_id="b", title="Yorkshire", text="A county of England, known as God's own county."),
        CandidateDoc(doc_id="c", title="Trivia", text="He moved to New-York in 1990."),  # "newyork" after SQuAD rules
        CandidateDoc(doc_id="d", title="York", text="A city in North Yorkshire."),
    ]
    assert answer_containing(docs, ["new york"]) == {0}
    assert answer_containing(docs, ["York"]) == {0, 3}  # not "Yorkshire"
    assert answer_containing(docs, ["The City"]) == {0, 3}  # article dropped, case ignored
    assert answer_containing(docs, ["England!"]) == {1}  # punctuation dropped
    assert answer_containing(docs, ["nowhere", "1990"]) == {2}  # any alias counts
    assert answer_containing(docs, []) == set()


def test_answer_containing_yes_no_is_empty():
    docs = [CandidateDoc(doc_id="a", title="Q", text="Yes, no, maybe.")]
    assert answer_containing(docs, ["yes"]) == set()
    assert answer_containing(docs, ["No."]) == set()
    assert answer_containing(docs, ["the"]) == set()  # normalises to nothing


def test_coverage_and_purity_by_hand():
    assert coverage_at_k({0, 1, 2}, {1, 5}) == 0.5
    assert purity_at_k({0, 1, 2}, {1, 5}) == pytest.approx(1 / 3)
    assert coverage_at_k({0}, set()) is None
    assert purity_at_k(set(), {1}) is None
    assert purity_at_k({4}, set()) == 0.0


def _record(qid, docs, answers, gold) -> CandidateRecord:
    return CandidateRecord(qid=qid, question="?", answers=answers, gold_doc_ids=gold,
                           docs=[CandidateDoc(doc_id=i, title=t, text=x, score=0.0) for i, t, x in docs])


def _report(pairs):
    """The evaluate stage's path: one `question_selection` row per question, then their means."""
    return summarize_selection([question_selection(rec, sel) for rec, sel in pairs])


def test_selection_means_by_hand():
    r1 = _record("q1", [("d0", "Paris", "Capital of France."), ("d1", "Lyon", "A city."),
                        ("d2", "France", "Its capital is Paris."), ("d3", "Nice", "On the coast.")],
                 ["Paris"], ["d0", "d1", "missing"])
    r2 = _record("q2", [("e0", "Alps", "Mountains."), ("e1", "Rhine", "A river.")], ["yes"], [])
    r3 = _record("q3", [("f0", "Moon", "Apollo 11 landed in 1969."), ("f1", "Mars", "Red.")], ["1969"], ["f0"])
    q1 = question_selection(r1, [0, 1, 3])
    assert q1.answer_coverage == 0.5 and q1.answer_purity == pytest.approx(1 / 3)
    assert q1.support_coverage == 1.0 and q1.support_purity == pytest.approx(2 / 3)
    assert q1.gold_not_retrieved == 1
    report = _report([(r1, [0, 1, 3]), (r2, [1]), (r3, [])])
    assert report.n_questions == 3
    assert report.mean_k == pytest.approx(4 / 3)
    ans = report.answer
    # coverage: q1 0.5, q2 undefined (yes/no), q3 0.0; purity: q1 1/3, q2 0, q3 undefined (empty selection)
    assert ans.coverage == pytest.approx(0.25) and ans.n_coverage == 2 and ans.n_undefined_coverage == 1
    assert ans.purity == pytest.approx(1 / 6) and ans.n_purity == 2 and ans.n_undefined_purity == 1
    sup = report.supporting
    # coverage: q1 1.0, q2 undefined (no gold), q3 0.0; purity: q1 2/3, q2 0.0, q3 undefined
    assert sup.coverage == pytest.approx(0.5) and sup.n_coverage == 2
    assert sup.purity == pytest.approx(1 / 3) and sup.n_purity == 2
    assert sup.gold_not_retrieved == 1


def test_selection_means_empty_and_bad_positions():
    report = summarize_selection([])
    assert report.n_questions == 0 and report.answer.coverage is None
    r = _record("q9", [("a", "A", "x")], ["x"], [])
    with pytest.raises(ValueError, match="q9.*outside"):
        question_selection(r, [1])
    with pytest.raises(ValueError, match="not an integer"):
        question_selection(r, ["0"])


# ---------------------------------------------------------------- real HotpotQA questions


@pytest.fixture(scope="module")
def hotpot_records():
    folder = sample_data_dir()
    if folder is None or not (folder / SAMPLE_FILES["hotpotqa"]).is_file():
        pytest.skip("HotpotQA sample not found (set PURECOVER_SAMPLE_DATA or put ../shared/data beside the repo)")
    examples = load_examples("hotpotqa", folder / SAMPLE_FILES["hotpotqa"], limit=3)
    assert len(examples) == 3
    return [build_record(ex, [(d, 0.0) for d in question_docs(ex)], gold_doc_ids(ex, None)) for ex in examples]


def test_hotpotqa_gold_paragraph_selection(hotpot_records):
    gold_sel, non_gold_sel = [], []
    for rec in hotpot_records:
        gold = set(rec.gold_doc_ids)
        assert len(gold) == 2
        positions = [i for i, d in enumerate(rec.docs) if d.doc_id in gold]
        others = [i for i, d in enumerate(rec.docs) if d.doc_id not in gold][:2]
        assert len(positions) == 2
        gold_sel.append((rec, positions))
        non_gold_sel.append((rec, others))
        q = question_selection(rec, positions)
        assert q.support_coverage == 1.0 and q.support_purity == 1.0
        assert q.alpha_ndcg == 1.0 and q.subtopic_recall == 1.0  # each gold paragraph one subtopic
        bad_q = question_selection(rec, others, k=2)
        assert bad_q.alpha_ndcg == 0.0 and bad_q.subtopic_recall == 0.0
        late = question_selection(rec, [others[0], positions[0]], k=2)  # one gold, ranked second
        assert late.alpha_ndcg == pytest.approx((1 / np.log2(3)) / (1 + 1 / np.log2(3)))
        assert late.subtopic_recall == 0.5
    good = _report(gold_sel).supporting
    assert good.coverage == 1.0 and good.purity == 1.0 and good.n_coverage == 3
    subtopics = _report(gold_sel).subtopics
    assert (subtopics.alpha_ndcg, subtopics.recall, subtopics.n_alpha_ndcg, subtopics.n_no_subtopics) == (1.0, 1.0, 3, 0)
    bad = _report(non_gold_sel).supporting
    assert bad.coverage == 0.0 and bad.purity == 0.0 and bad.n_purity == 3


def test_crux_coverage_of_a_selection_reaches_the_report_rows():
    """With the teacher's ratings, each question row carries CRUX Cov of the *selected* candidates."""
    from purecover.eval.selection_metrics import question_selection, summarize_selection

    record = CandidateRecord(qid="q", question="?", answers=["x"],
                             docs=[CandidateDoc(doc_id=str(i), title="", text="t") for i in range(4)])
    ratings = [[0, 4, 0], [3, 0, 0], [0, 0, 1], [5, 5, 0]]  # sub-question 3 is answered by no candidate
    assert question_selection(record, [1], ratings).crux_coverage == pytest.approx(1 / 3)
    assert question_selection(record, [0, 1], ratings).crux_coverage == pytest.approx(2 / 3)
    assert question_selection(record, [2], ratings).crux_coverage == 0.0
    assert question_selection(record, [], ratings).crux_coverage == 0.0
    assert question_selection(record, [1], None).crux_coverage is None
    assert question_selection(record, [1], [[], [], [], []]).crux_coverage is None  # no sub-questions
    with pytest.raises(ValueError, match="question 'q': ratings have 2 rows, candidate 3 selected"):
        question_selection(record, [3], ratings[:2])
    rows = [question_selection(record, [0, 1], ratings), question_selection(record, [2], ratings),
            question_selection(record, [1], None)]
    assert summarize_selection(rows).crux.coverage == pytest.approx(1 / 3) and summarize_selection(rows).crux.n == 2
