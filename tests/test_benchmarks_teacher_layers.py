"""benchmarks/teacher_layers.py's own logic, without models: per-layer scoring with the label stage's estimation,
the choice of layers on calibration questions, its rows and its plot."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_benchmarks_summary import _load

layers = _load("teacher_layers")


def _question(doc_ids, gold, n_steps=2):
    return {"doc_ids": doc_ids, "gold": set(gold), "steps": [f"step {i}" for i in range(n_steps)]}


def _capture(n_layers, n_docs, n_steps, reads):
    """(L, steps + 1, docs + steps) per-layer captures: layer l puts its step->doc mass on docs reads[l]."""
    m = np.full((n_layers, n_steps + 1, n_docs + n_steps), 0.01)
    for layer, docs in enumerate(reads):
        for i, d in enumerate(docs):
            m[layer, i % n_steps, d] = 1.0
    return m


def _params():
    from purecover.config import TeacherConfig
    from purecover.teacher.defaults import resolve_params

    return resolve_params(TeacherConfig(steps="oracle", estimator="attention"))


def test_a_layer_that_attends_to_the_gold_passages_scores_above_one_that_attends_elsewhere():
    docs = [f"d{k}" for k in range(6)]
    qs = [_question(docs, ["d1", "d4"]), _question(docs, ["d0", "d3"])]
    # layer 0 reads the gold passages, layer 1 the first two slots (a position prior), layer 2 the wrong ones
    mats = [_capture(3, 6, 2, [[1, 4], [0, 1], [2, 5]]), _capture(3, 6, 2, [[0, 3], [0, 1], [2, 5]])]
    biases = np.full((3, 6), 0.05)
    figs = layers.score_layers(mats, biases, qs, {"0": [0], "1": [1], "2": [2], "mix": [0, 2]}, _params())
    assert figs["0"]["auc"] == 1.0 and figs["0"]["f1"] == 1.0
    assert figs["2"]["auc"] == 0.25 and figs["2"]["f1"] == 0.0  # gold tied with the unread passages: half
    assert figs["0"]["f1"] > figs["1"]["f1"] > figs["2"]["f1"]
    assert 0.0 < figs["mix"]["auc"] < 1.0  # averaging a layer set averages the captures (and the biases)


def test_retrieval_top2_is_the_first_two_slots():
    qs = [_question(["a", "b", "c"], ["a"]), _question(["a", "b", "c"], ["c"])]
    assert layers.retrieval_top2(qs) == pytest.approx((2 / 3 + 0.0) / 2, abs=1e-4)


def _result():
    per = {str(k): {"calib": {"auc": 0.5 + 0.1 * k, "f1": 0.4 + 0.1 * k}, "test": {"auc": 0.6, "f1": 0.5}}
           for k in range(3)}
    fig = {"precision": 0.9, "recall": 0.6, "f1": 0.7, "mean_size": 1.4, "auc": 0.8}
    return {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"tiny": {
        "layers": 3, "full_attention_layers": [0, 1, 2], "per_layer": per, "test_questions": 5,
        "chosen": {"name": "top1", "layers": [2]}, "retrieval_top2_f1": {"calib": 0.6, "test": 0.65},
        "test": {"chosen": fig, "full_attention": {**fig, "f1": 0.6}, "all": {**fig, "f1": 0.6}}}}}}


def test_rows_claim_the_chosen_layers_beat_retrieval_top2_on_the_test_split():
    rows = {r["figure"]: r for r in layers.rows(_result())}
    chosen = rows["teacher_layers.label_f1_chosen.tiny"]
    assert chosen["value"] == 0.7 and chosen["target"] == "> 0.65" and chosen["met"] is True
    assert "layers [2]" in chosen["note"]
    assert rows["teacher_layers.label_f1_full_attention.tiny"]["target"] is None
    best = rows["teacher_layers.best_single_layer_calib_auc.tiny"]
    assert best["value"] == 0.7 and "layer 2 of 3" in best["note"]


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    path = layers.plot(_result(), tmp_path / "layers.png")
    assert path is not None and path.stat().st_size > 1000
