"""benchmarks/student_sweep.py's own logic, without models: the calibration figures it chooses settings by, and
its rows."""

from __future__ import annotations

import pytest

from tests.test_benchmarks_summary import _load

sweep = _load("student_sweep")


def test_auc_and_top2_read_the_scores_not_the_positions() -> None:
    ids = [["a", "b", "c", "d"], ["e", "f", "g", "h"]]
    gold = [{"c", "d"}, {"e"}]
    perfect = sweep.calibration_figures([[0.0, 1.0, 3.0, 2.0], [5.0, 1.0, 1.0, 0.0]], ids, gold)
    assert perfect["calib_auc"] == 1.0 and perfect["calib_top2_f1"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)
    # retrieval top-2 takes the first two shown: q1 none of its gold, q2 one of one
    assert perfect["retrieval_top2_f1"] == pytest.approx((0.0 + 2 / 3) / 2, abs=1e-4)
    flat = sweep.calibration_figures([[1.0] * 4, [1.0] * 4], ids, gold)
    assert flat["calib_auc"] == 0.5  # ties count half: a student that reads nothing
    inverted = sweep.calibration_figures([[3.0, 2.0, 0.0, 1.0], [0.0, 1.0, 2.0, 3.0]], ids, gold)
    assert inverted["calib_auc"] == 0.0 and inverted["calib_top2_f1"] == 0.0


def test_rows_report_the_last_evaluation_of_each_run() -> None:
    curve = [{"step": 0, "calib_auc": 0.76, "calib_top2_f1": 0.48, "retrieval_top2_f1": 0.61},
             {"step": 100, "calib_auc": 0.71, "calib_top2_f1": 0.44, "retrieval_top2_f1": 0.61,
              "seconds_per_step": 4.9}]
    result = {"machine": {"cpus": 2}, "dataset": "hotpotqa", "runs": {"full-seed0": {
        "name": "full_lr5e-5_lm0.1", "seed": 0, "steps": 100, "batch": 2, "curve": curve}}}
    (row,) = sweep.rows(result)
    assert row["figure"] == "student_sweep.calib_auc.full_lr5e-5_lm0.1" and row["value"] == 0.71
    assert row["target"] is None and row["seed"] == 0 and "start AUC 0.76" in row["note"]


def test_every_config_names_its_settings() -> None:
    for name, cfg in sweep.CONFIGS.items():
        assert set(cfg) == {"full", "lr", "lm_weight", "r"}
        assert cfg["full"] == name.startswith("full")
