"""Label quality on real data: the normalised scale keeps a tiny random teacher's labels from collapsing,
and the label stage always reports the diagnostics (|S| histogram, fallback rate, first-step stops)."""

from __future__ import annotations

import json
import logging

import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from purecover.records import LabelSummary
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.label_stage import run_label_stage
from tests.run_dirs import new_run_dir


@pytest.fixture(scope="module")
def hotpot_candidates(tmp_path_factory, sample_file):
    run = tmp_path_factory.mktemp("quality")
    recipe = load_recipe(None, [f"run_dir={run}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}",
                                "data.limit=24", "data.k1=20"])
    run_data_stage(recipe, show_progress=False)
    return run


def label_run(tmp_path, candidates_dir, teacher_dir, *extra):
    run = tmp_path / "run"
    new_run_dir(run)
    (run / "candidates.jsonl").write_bytes((candidates_dir / "candidates.jsonl").read_bytes())
    recipe = load_recipe(None, [f"run_dir={run}", "data.dataset=hotpotqa", "data.k1=20", f"teacher.model={teacher_dir}",
                                "teacher.steps=oracle", "teacher.estimator=attention", "teacher.batch_size=4",
                                "teacher.dtype=float32", "teacher.device=cpu", *extra])
    run_calibrate_stage(recipe, show_progress=False)
    return run_label_stage(recipe, show_progress=False)


def test_tiny_random_teacher_zscore_keeps_fallback_within_10pct(tmp_path, hotpot_candidates, tiny_teacher_dir,
                                                               caplog):
    # the shipped default for the attention estimator: zscore scale, τ1 = τ2 = 0.4, λ = 0.1, matched calibration
    summary = label_run(tmp_path, hotpot_candidates, tiny_teacher_dir)
    assert isinstance(summary, LabelSummary) and summary.estimation is not None
    assert summary.estimation.normalize == "zscore"
    assert summary.questions == 24 and summary.error == 0
    assert summary.fallback_rate is not None and summary.fallback_rate <= 0.10, summary
    assert summary.first_step_stop_rate is not None and summary.first_step_stop_rate <= 0.10
    assert summary.mean_size is not None and summary.mean_size >= 1.0
    assert summary.size_histogram is not None and sum(summary.size_histogram.values()) == 24
    assert summary.warning is None


def test_absolute_scale_with_the_papers_temperatures_collapses_and_warns(tmp_path, hotpot_candidates,
                                                                        tiny_teacher_dir, caplog):
    # the paper's absolute τ = 4e-5 assumes a 32B model's attention scale; a tiny model's differs, every
    # selection collapses, and the stage says so in one line naming the knobs
    with caplog.at_level(logging.WARNING, logger="purecover.teacher.label_stage"):
        summary = label_run(tmp_path, hotpot_candidates, tiny_teacher_dir, "teacher.normalize=absolute")
    assert isinstance(summary, LabelSummary) and summary.fallback_reasons is not None
    assert summary.fallback_rate is not None and summary.fallback_rate > 0.10
    assert summary.fallback_reasons.get("min_select", 0) >= 1
    warning = summary.warning
    assert warning and "teacher.lam" in warning and "purecover tune" in warning
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [warning]
    manifest = json.loads((tmp_path / "run" / "label.run.json").read_text())["summary"]
    assert manifest["warning"] == warning and manifest["size_histogram"] == summary.size_histogram
