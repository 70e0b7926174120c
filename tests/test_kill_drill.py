"""The kill drill: `purecover pipeline` SIGKILLed at a point inside every stage, rerun each time, ends
with the outputs of an uninterrupted run, for the embedding and the attention estimators.

One run directory is killed again and again: with the embedding estimator during retrieval, during
labelling, between checkpoints of training, between train and export, during selection and during
generation; with the attention estimator (no student, to keep the drill short) during calibration,
labelling and generation; then it is run to completion. Each rerun resumes from what the kill left (the
manifests say ``running``; the run-directory lock of the killed process is released by the kernel).
The candidates, labels, selections and metrics must then equal those of an uninterrupted run, byte
for byte where the stage promises it (docs/operations/reliability.md#atomic-resumable-writes: a killed job loses at most the record in flight).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process_helpers import purecover_holding_the_lock, run_and_kill_when

DEMO = Path(__file__).resolve().parents[1] / "configs" / "recipes" / "demo_cpu.yaml"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> Path:
    from purecover.demo.assets import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("assets"))


def _command(run_dir: Path, model: Path, estimator: str) -> list[str]:
    methods = "[retrieval,student]" if estimator == "embedding" else "[retrieval,teacher]"
    sets = [f"run_dir={run_dir}", f"teacher.model={model}", f"student.model={model}", f"eval.generator={model}",
            "data.limit=12", f"teacher.estimator={estimator}", "teacher.batch_size=2",
            "student.training.max_steps=4", "student.training.save_steps=2", "student.eval_fraction=0.4",
            "eval.budgets=[1,3]", "eval.max_new_tokens=3", "eval.batch_size=2", f"eval.methods={methods}"]
    return [sys.executable, "-m", "purecover", "pipeline", str(DEMO), "-q", "--log-level", "WARNING",
            *[a for s in sets for a in ("--set", s)]]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _kill_points(run: Path, estimator: str) -> list[tuple[str, object]]:
    label = ("label", lambda: _lines(run / "label_shards" / "labels.0-of-1.jsonl") >= 2)
    evaluate = ("evaluate", lambda: _lines(run / "eval" / "generations.jsonl") >= 2)
    if estimator == "attention":
        return [("calibrate", lambda: (run / "candidates.jsonl").is_file() and (run / "data.run.json").is_file()
                 and json.loads((run / "data.run.json").read_text())["summary"]["status"] == "complete"),
                label, evaluate]
    return [
        ("data", lambda: _lines(run / "candidates.jsonl") >= 3),
        label,
        ("train", lambda: any((run / "checkpoints").glob("checkpoint-2"))),
        ("between train and export", lambda: (run / "checkpoints" / "final" / "purecover_student.json").is_file()),
        ("select", lambda: _lines(run / "selections.jsonl") >= 1 or (run / "select.run.json").is_file()),
        evaluate,
    ]


def _outputs(run: Path, estimator: str) -> dict[str, object]:
    stages = ("data", "label", "train", "export", "select", "evaluate") if estimator == "embedding" else (
        "data", "calibrate", "label", "evaluate")
    out = {
        "candidates": (run / "candidates.jsonl").read_bytes(),
        "labels": (run / "labels.jsonl").read_bytes(),
        # every figure but the selection times (select_ms: wall time, which a kill and a resume change)
        "results": {m: {k: {f: v for f, v in r.items() if f != "select_ms"} for k, r in per_k.items()}
                    for m, per_k in json.loads((run / "eval" / "metrics.json").read_text())["results"].items()},
        "statuses": {s: json.loads((run / f"{s}.run.json").read_text())["summary"]["status"] for s in stages},
    }
    if estimator == "embedding":
        out["selections"] = (run / "selections.jsonl").read_bytes()
        out["tau3"] = json.loads((run / "train.run.json").read_text())["summary"]["tau3"]
    else:
        out["bias"] = json.loads((run / "bias.json").read_text())["bias"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["embedding", "attention"])
def test_pipeline_killed_in_every_stage_ends_like_an_uninterrupted_run(estimator, demo_model, tmp_path):
    reference = tmp_path / "reference"
    done = subprocess.run(_command(reference, demo_model, estimator), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    run = tmp_path / "killed"
    for name, ready in _kill_points(run, estimator):
        run_and_kill_when(_command(run, demo_model, estimator), ready, what=f"the pipeline (kill in {name})",
                          timeout=300)
    last = subprocess.run(_command(run, demo_model, estimator), capture_output=True, text=True, timeout=600)
    assert last.returncode == 0, last.stderr[-4000:]
    expected, got = _outputs(reference, estimator), _outputs(run, estimator)
    assert got["statuses"] == dict.fromkeys(got["statuses"], "complete")
    for key in expected:
        assert got[key] == expected[key], f"{key} differs after the kills"
    again = subprocess.run(_command(run, demo_model, estimator), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "| data | skip |" in again.stdout and "| label | skip |" in again.stdout


@pytest.mark.slow
def test_two_pipelines_on_one_run_dir(demo_model, tmp_path):
    """The second `purecover pipeline` on a busy run_dir is refused at once, naming the holder; the first
    ends with every question once (before the lock, both wrote and left a doubled candidates.jsonl
    marked complete). The first holds the lock until the second has been refused, so the order is sure."""
    run, release = tmp_path / "run", tmp_path / "release"
    cmd = [*_command(run, demo_model, "embedding")[:-2], "--set", "eval.methods=[retrieval]"]
    first = subprocess.Popen(purecover_holding_the_lock(cmd[3:], release), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        lock = run / ".purecover.lock"
        deadline = time.monotonic() + 120
        while not (lock.is_file() and f'"pid": {first.pid}' in lock.read_text()):
            assert time.monotonic() < deadline and first.poll() is None, "the first never locked"
            time.sleep(0.05)
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        release.touch()
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-4000:]
    assert second.returncode == 1, second.stderr[-4000:]
    assert f"is in use by `purecover pipeline` (pid {first.pid}" in second.stderr
    qids = [json.loads(line)["qid"] for line in (run / "candidates.jsonl").read_text().splitlines()]
    assert len(qids) == len(set(qids)) == 12
