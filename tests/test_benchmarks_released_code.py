"""benchmarks/released_code.py: its synthetic agreement is computed with the two solvers as the docs say, and its
rows carry every variant measured (skipping sources that could not be re-solved)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import released_code


def test_synthetic_agreement_uses_both_rules_on_column_softmax_matrices():
    from purecover.teacher.solvers import greedy_select, released_code_greedy

    out = released_code.synthetic(n=30, seed=3)
    assert out["matrices"] == 30 and set(out["by_lambda"]) == {"0.1", "0.3", "0.5"}
    rng = np.random.default_rng(3)  # the same draws, by hand, for λ 0.3
    same = 0
    for _ in range(30):
        steps = int(rng.integers(2, 6))
        logits = rng.normal(size=(20, steps)) * rng.uniform(0.5, 4)
        W = np.exp(logits) / np.exp(logits).sum(axis=0, keepdims=True)
        z = rng.normal(size=steps)
        e = np.exp(z) / np.exp(z).sum()
        same += sorted(greedy_select(e, W, 0.3, 5, min_select=1).order()) == sorted(released_code_greedy(W, 0.3, 20).order())
    assert out["by_lambda"]["0.3"]["same_set"] == round(same / 30, 4)


def test_rows_cover_each_measured_variant_and_skip_errors():
    fig = {"f1": 0.9, "precision": 0.95, "mean_size": 2.0, "same_set_as_paper": 1.0}
    result = {"machine": None, "datasets": {"hotpotqa": {
        "oracle_proxy": {"questions": 54, "paper": fig, "objective": fig, "released_code": fig},
        "gemma_attention": {"error": "an earlier bias file"}}},
        "synthetic": {"matrices": 10, "by_lambda": {"0.3": {"same_set": 0.1, "paper_mean_size": 1.0,
                                                             "released_mean_size": 4.0}}}}
    rows = released_code.rows(result)
    assert [r["figure"] for r in rows] == ["released_code.label_f1.oracle_proxy.paper",
                                           "released_code.label_f1.oracle_proxy.objective",
                                           "released_code.label_f1.oracle_proxy.released_code",
                                           "released_code.synthetic_same_set"]


def test_student_rows_give_the_mean_and_worst_seed_of_both_forms():
    def student(f1, shuffled):
        return {"orders": {"retrieval": {"f1": f1, "retrieval_top5_f1": 0.5, "mean_size": 5.0},
                           "shuffled": {"f1": shuffled}}}

    result = {"machine": None, "datasets": {}, "synthetic": {"matrices": 1, "by_lambda": {}},
              "student": {"0": student(0.2, 0.3), "1": student(0.4, 0.1)}}
    rows = {r["figure"]: r for r in released_code.rows(result)}
    released = rows["released_code.student_test_f1.released_code"]
    assert released["value"] == 0.3 and "worst 0.2" in released["note"] and "shuffled order mean 0.2" in released["note"]
    paper = released_code.paper_students()  # the paper-form students real_models.py measured
    assert paper, "benchmarks/results/real_models.json has the oracle-proxy students"
    want = round(float(np.mean([paper[s]["orders"]["retrieval"]["f1"] for s in paper])), 4)
    assert rows["released_code.student_test_f1.paper"]["value"] == want
    assert "released_code.student_test_f1.paper" not in {r["figure"] for r in released_code.rows(
        {**result, "student": {}})}


def test_the_student_command_needs_the_label_part_first(tmp_path, monkeypatch):
    out = tmp_path / "released_code.json"
    monkeypatch.setattr(sys, "argv", ["released_code.py", "--student", "0", "--out", str(out)])
    with pytest.raises(SystemExit, match="run the label part first"):
        released_code.main()
    assert not out.exists()
