"""`purecover pipeline`: plan, skip, resume, --from, --dry-run, config guards, the demo recipe.

Runs the real stages on the bundled demo set with the demo's offline-built tiny model (no sample
data needed): 8 questions, 3 training steps.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import load_recipe
from purecover.pipeline import STAGES, plan_pipeline, run_pipeline, summary_table
from purecover.stages import config_hash as stage_hash

DEMO = Path(__file__).resolve().parents[1] / "configs" / "recipes" / "demo_cpu.yaml"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> Path:
    from purecover.demo.assets import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("assets"))


def _recipe(run_dir: Path, model: Path, *extra: str):
    return load_recipe(DEMO, [
        f"run_dir={run_dir}", f"teacher.model={model}", f"student.model={model}", f"eval.generator={model}",
        "data.limit=8", "student.training.max_steps=3", "student.training.save_steps=2", "eval.budgets=[1,3]",
        "eval.max_new_tokens=2", "student.eval_fraction=0.4", *extra])


@pytest.fixture(scope="module")
def finished(tmp_path_factory, demo_model):
    recipe = _recipe(tmp_path_factory.mktemp("pipe") / "run", demo_model)
    rows = run_pipeline(recipe, show_progress=False, echo=lambda _: None)
    return recipe, rows


def _plan(recipe, start=None) -> dict[str, str]:
    return {p.stage: p.action for p in plan_pipeline(recipe, start)}


def test_fresh_plan(tmp_path, demo_model):
    recipe = _recipe(tmp_path / "run", demo_model)
    assert _plan(recipe) == {"data": "run", "calibrate": "not needed", "label": "run", "train": "run",
                             "export": "run", "select": "run", "evaluate": "run"}
    attention = _recipe(tmp_path / "run", demo_model, "teacher.estimator=attention")
    assert _plan(attention)["calibrate"] == "run"
    no_student = _recipe(tmp_path / "run", demo_model, "eval.methods=[retrieval,teacher]")
    assert _plan(no_student)["train"] == _plan(no_student)["export"] == _plan(no_student)["select"] == "not needed"


def test_full_run_writes_every_stage_with_the_planned_hashes(finished):
    recipe, rows = finished
    assert [(r.stage, r.action) for r in rows] == [
        ("data", "ran"), ("calibrate", "not needed"), ("label", "ran"), ("train", "ran"), ("export", "ran"),
        ("select", "ran"), ("evaluate", "ran")]
    for stage in ("data", "label", "train", "export", "select", "evaluate"):
        manifest = json.loads((recipe.run_path / f"{stage}.run.json").read_text())
        assert manifest["config_hash"] == stage_hash(recipe, stage)
        assert manifest["summary"]["status"] == "complete"
    assert (recipe.run_path / "eval" / "report.md").is_file()
    table = summary_table(rows)
    assert "| evaluate | ran |" in table and "em@3" in table


def test_second_run_skips_everything(finished):
    recipe, _ = finished
    assert set(_plan(recipe).values()) == {"skip", "not needed"}
    rows = run_pipeline(recipe, show_progress=False, echo=lambda _: None)
    assert {r.action for r in rows} == {"skip", "not needed"}
    assert all(r.seconds is None for r in rows)
    assert "questions 8" in summary_table(rows)  # figures come from the manifests


def test_the_command_builds_training_arguments_only_when_train_has_work(finished, demo_model, tmp_path, capsys):
    """`purecover pipeline` on a complete run neither imports the trainer nor builds TrainingArguments (a rerun
    takes a second or two); when train has work, TrainingArguments' own cross-field checks still refuse the recipe
    before the data stage runs."""
    import subprocess
    import sys

    recipe, _ = finished
    sets = [f"{k}={v}" for k, v in (("run_dir", recipe.run_path), ("teacher.model", demo_model),
                                    ("student.model", demo_model), ("eval.generator", demo_model),
                                    ("data.limit", 8), ("student.training.max_steps", 3),
                                    ("student.training.save_steps", 2), ("eval.budgets", "[1,3]"),
                                    ("eval.max_new_tokens", 2), ("student.eval_fraction", 0.4))]
    argv = ["pipeline", str(DEMO), *[a for kv in sets for a in ("--set", kv)]]
    code = ("import sys; from purecover.cli import main; rc = main(sys.argv[1:]); "
            "print('TRAINER_IMPORTED' if 'purecover.train.train_stage' in sys.modules else 'NO_TRAINER'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("NO_TRAINER") and "| train | skip |" in done.stdout
    fresh = ["pipeline", str(DEMO), "--set", f"run_dir={tmp_path / 'fresh'}", "--set", f"teacher.model={demo_model}",
             "--set", "student.training.fp16=true", "--set", "student.training.bf16=true"]
    assert main(fresh) == 2
    assert "fp16 and bf16" in capsys.readouterr().err and not (tmp_path / "fresh" / "candidates.jsonl").exists()


def test_changed_eval_section_reruns_only_evaluate_from_the_cache(finished):
    recipe, _ = finished
    changed = dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, table_budget=1))
    plan = _plan(changed)
    assert plan["evaluate"] == "run" and plan["train"] == "skip"
    rows = run_pipeline(changed, show_progress=False, echo=lambda _: None)
    evaluate = rows[-1]
    assert evaluate.action == "ran" and evaluate.summary.generated == 0
    assert "## QA at K = 1" in (recipe.run_path / "eval" / "report.md").read_text()


def test_every_headline_key_is_in_its_stage_summary(finished):
    """The final table's figures come from the registry's headline keys: each must match a summary key."""
    from purecover.stages import get_stage

    _, rows = finished
    for row in rows:
        if row.action == "not needed":
            continue
        for prefix in get_stage(row.stage).headline:
            keys = [k for k in row.summary.figures() if k == prefix or (prefix.endswith("@") and k.startswith(prefix))]
            optional = {"warning", "error"}  # present, but None / 0 when all is well
            assert keys or prefix in optional, f"{row.stage}: headline key {prefix!r} matches no summary key"


def test_a_complete_stage_whose_output_changed_is_redone_not_skipped(finished):
    """A candidates.jsonl with more lines than its manifest recorded is set aside and rebuilt, not skipped."""
    recipe, _ = finished
    path = recipe.run_path / "candidates.jsonl"
    saved = path.read_bytes()
    try:
        path.write_bytes(saved + saved.splitlines(keepends=True)[0])  # a duplicated record, as two writers left
        plan = {p.stage: p for p in plan_pipeline(recipe)}
        assert plan["data"].action == "redo"
        assert "candidates.jsonl holds 9 lines, its manifest recorded 8" in plan["data"].reason
        rows = {r.stage: r for r in run_pipeline(recipe, show_progress=False, echo=lambda _: None)}
        assert rows["data"].action == "redone" and path.read_bytes() == saved
        aside = list(recipe.run_path.glob("candidates.jsonl.damaged-*"))
        assert len(aside) == 1 and aside[0].read_bytes().count(b"\n") == 9  # kept, not deleted
        # the rebuilt candidates equal the ones labelled: every later stage skips itself (evaluate last ran
        # with another eval section in an earlier test, so it recomputes from its cache)
        assert {r.stage: r.action for r in rows.values() if r.stage != "evaluate"} == {
            "data": "redone", "calibrate": "not needed", "label": "skip", "train": "skip", "export": "skip",
            "select": "skip"}
        for leftover in aside:
            leftover.unlink()
    finally:
        path.write_bytes(saved)
    assert set(_plan(recipe).values()) == {"skip", "not needed"}


def test_changed_student_section_is_blocked_before_anything_runs(finished):
    recipe, _ = finished
    changed = dataclasses.replace(recipe, student=dataclasses.replace(recipe.student, lm_weight=0.5))
    plan = _plan(changed)
    assert plan["label"] == "skip" and plan["train"] == plan["export"] == "blocked"
    before = (recipe.run_path / "train.run.json").read_bytes()
    with pytest.raises(RuntimeError, match="stage train is blocked"):
        run_pipeline(changed, show_progress=False, echo=lambda _: None)
    assert (recipe.run_path / "train.run.json").read_bytes() == before


def test_from_stage_reruns_it_and_everything_after(finished):
    recipe, _ = finished
    assert _plan(recipe, "export") == {"data": "skip", "calibrate": "not needed", "label": "skip", "train": "skip",
                                       "export": "rerun", "select": "rerun", "evaluate": "rerun"}
    with pytest.raises(ValueError, match="unknown stage"):
        plan_pipeline(recipe, "deploy")


def test_interrupted_stage_is_resumed(finished, tmp_path):
    recipe, _ = finished
    manifest = recipe.run_path / "label.run.json"
    saved = manifest.read_text()
    data = json.loads(saved)
    data["summary"] = {"status": "running"}
    manifest.write_text(json.dumps(data))
    try:
        plan = _plan(recipe)
        assert plan["label"] == "resume"
        assert plan["train"] == plan["export"] == plan["select"] == plan["evaluate"] == "run"  # downstream
    finally:
        manifest.write_text(saved)


def test_dry_run_lists_resources_and_plan(tmp_path, demo_model, capsys):
    code = main(["pipeline", str(DEMO), "--dry-run", "--set", f"run_dir={tmp_path / 'run'}",
                 "--set", f"teacher.model={demo_model}", "--set", f"eval.generator={demo_model}",
                 "--set", "student.model=missing/dir/"])
    out, err = capsys.readouterr()
    assert code == 0
    assert re.search(r"teacher\.model +found +\S*tiny-qwen2", out)
    assert re.search(r"student\.model +missing +missing/dir/", out)
    assert all(f"  {stage}" in out for stage in STAGES)
    assert "1 input(s) missing here: student.model" in err
    strict = main(["pipeline", str(DEMO), "--dry-run", "--strict", "--set", f"run_dir={tmp_path / 'run'}",
                   "--set", f"teacher.model={demo_model}", "--set", f"eval.generator={demo_model}",
                   "--set", "student.model=missing/dir/"])
    assert strict == 1
    capsys.readouterr()
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_dry_run_marks_hub_ids_without_fetching(capsys, tmp_path):
    code = main(["pipeline", "--dry-run", "--set", f"run_dir={tmp_path}/r", "--set", "data.path=demo"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert re.search(r"teacher\.model +hub +Qwen/Qwen2\.5-32B-Instruct", out)


def test_stage_file_names_come_from_the_run_dir_layout():
    """The stage modules' file-name constants are the RunDir layout's, not literals of their own."""
    from purecover.data.data_stage import CANDIDATES_FILE
    from purecover.rundir import FILES
    from purecover.select.select_stage import SELECTIONS_FILE
    from purecover.teacher.label_stage import LABELS_FILE, SHARD_DIR
    from purecover.train.export_stage import SELECTOR_DIR
    from purecover.train.train_stage import CHECKPOINTS, FINAL

    assert FILES["candidates"] == CANDIDATES_FILE and FILES["labels"] == LABELS_FILE
    assert FILES["label_shards"] == SHARD_DIR and FILES["selections"] == SELECTIONS_FILE
    assert f"{CHECKPOINTS}/{FINAL}" == FILES["final"] and FILES["selector"] == SELECTOR_DIR


def test_a_real_pipeline_run_plans_once(finished, monkeypatch, capsys):
    """`purecover pipeline` makes its plan once, under the run directory's lock (not once more before it)."""
    import purecover.pipeline as pipeline

    recipe, _ = finished
    calls = []
    real = pipeline.plan_pipeline
    monkeypatch.setattr(pipeline, "plan_pipeline", lambda *a, **k: calls.append(a) or real(*a, **k))
    sets = [f"{k}={v}" for k, v in (("run_dir", recipe.run_dir), ("teacher.model", recipe.teacher.model),
                                    ("student.model", recipe.student.model), ("eval.generator", recipe.eval.generator),
                                    ("data.limit", 8), ("student.training.max_steps", 3),
                                    ("student.training.save_steps", 2), ("eval.budgets", "[1,3]"),
                                    ("eval.max_new_tokens", 2), ("student.eval_fraction", 0.4))]
    assert main(["pipeline", str(DEMO), "-q", *[a for s in sets for a in ("--set", s)]]) == 0
    assert len(calls) == 1
    assert "| data | skip |" in capsys.readouterr().out


def test_the_passage_readout_runs_every_stage(tmp_path, demo_model):
    """student.readout: passage through the whole pipeline: train, export, select and evaluate read the marker
    scores (the selector records the readout, and the selections it wrote are its own sets)."""
    from purecover.models.selector import Selector
    from purecover.utils.io import read_jsonl

    recipe = _recipe(tmp_path / "run", demo_model, "student.readout=passage", "student.lm_weight=0.0",
                     "student.bce_weight=1.0", "eval.methods=[retrieval,student]")
    rows = run_pipeline(recipe, show_progress=False, echo=lambda _: None)
    assert {r.stage for r in rows if r.action == "ran"} >= {"train", "export", "select", "evaluate"}
    run = recipe.run_path
    assert json.loads((run / "selector" / "selector_config.json").read_text())["readout"] == "passage"
    selector = Selector.from_pretrained(run / "selector", device="cpu", dtype="float32")
    cands = {rec["qid"]: rec for _, rec in read_jsonl(run / "candidates.jsonl")}
    selections = [rec for _, rec in read_jsonl(run / "selections.jsonl")]
    assert selections
    for rec in selections[:3]:
        c = cands[rec["qid"]]
        assert rec["selected"] == selector.select(c["question"], c["docs"]).indices
    assert (run / "eval" / "metrics.json").is_file()
