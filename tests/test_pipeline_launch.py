"""`student.launch`: the pipeline (and `purecover train`) run the train stage under a real `accelerate launch`.

Fast tests: the command line built from a LaunchConfig, the plan and the dry run's output, a failing
launch. Slow tests (`@pytest.mark.slow`) run the demo pipeline with the train stage launched through
accelerate on CPU: (a) one plain process (configs/accelerate/cpu.yaml), (b) DeepSpeed ZeRO-2 in one
process (configs/accelerate/deepspeed_zero2_cpu.yaml; the first run compiles a DeepSpeed op, cached in
TORCH_EXTENSIONS_DIR). Multi-process DeepSpeed does not run on CPU.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import ConfigError, load_recipe, recipe_to_dict
from purecover.pipeline import (
    LAUNCH_LOG,
    LAUNCH_RECIPE,
    launch_command,
    plan_pipeline,
    run_launched_train,
    run_pipeline,
    train_needs_launch,
)
from purecover.stages import config_hash
from purecover.utils.rundir_lock import LOCK_FILE
from tests.test_pipeline import DEMO, _recipe

REPO = Path(__file__).resolve().parents[1]
CPU = "configs/accelerate/cpu.yaml"
ZERO2_CPU = "configs/accelerate/deepspeed_zero2_cpu.yaml"
SMALL = ("student.training.max_steps=2", "student.training.save_steps=2", "eval.budgets=[1]", "eval.table_budget=1",
         "eval.methods=[student]")  # the slow tests: 2 steps, one budget, the student only


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> Path:
    from purecover.demo.assets import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("assets"))


@pytest.fixture
def launch_env(monkeypatch):
    """Run from the repo root (accelerate configs name DeepSpeed JSONs relative to it), offline."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", os.environ.get("TORCH_EXTENSIONS_DIR")
                       or str(Path.home() / ".cache" / "purecover" / "torch_extensions"))
    for key, value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("WANDB_MODE", "offline"),
                       ("TOKENIZERS_PARALLELISM", "false")):
        monkeypatch.setenv(key, value)


def test_command_line_from_the_launch_config(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "student.launch.config_file=configs/accelerate/x y.yaml",
                                "student.launch.num_processes=8", "student.launch.num_machines=2",
                                "student.launch.machine_rank=1", "student.launch.main_process_ip=10.0.0.1",
                                "student.launch.main_process_port=29511",
                                "student.launch.extra_args=[--mixed_precision, bf16]"])
    cmd = launch_command(recipe, tmp_path / "r.yaml")
    assert cmd == [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/accelerate/x y.yaml",
                   "--num_processes", "8", "--num_machines", "2", "--machine_rank", "1",
                   "--main_process_ip", "10.0.0.1", "--main_process_port", "29511", "--mixed_precision", "bf16",
                   "-m", "purecover.train", str(tmp_path / "r.yaml")]
    assert launch_command(recipe, "r.yaml", quiet=True)[-2:] == ["r.yaml", "-q"]
    assert "'configs/accelerate/x y.yaml'" in shlex.join(cmd)  # copy-pasteable
    plain = load_recipe(None, [f"run_dir={tmp_path}", "student.launch.config_file=c.yaml"])
    assert launch_command(plain, "r.yaml")[3:] == ["--config_file", "c.yaml", "-m", "purecover.train", "r.yaml"]
    assert launch_command(load_recipe(None), "r.yaml") is None  # in-process
    assert train_needs_launch(plain) and not train_needs_launch(load_recipe(None, [f"run_dir={tmp_path}"]))
    # A launch key without a launch config is a recipe error, raised when the recipe loads.
    with pytest.raises(ConfigError, match=r"student\.launch\.num_processes: is set but student\.launch\.config_file "
                                          "is null"):
        load_recipe(None, ["student.launch.num_processes=8"])


def test_plan_and_dry_run_show_the_launch(tmp_path, demo_model, capsys, launch_env):
    recipe = _recipe(tmp_path / "run", demo_model, f"student.launch.config_file={ZERO2_CPU}",
                     "student.launch.num_processes=1")
    plans = {p.stage: p for p in plan_pipeline(recipe)}
    assert plans["train"].command == launch_command(recipe, recipe.run_path / LAUNCH_RECIPE)
    assert all(p.command is None for s, p in plans.items() if s != "train")

    args = ["pipeline", str(DEMO), "--dry-run", "--set", f"run_dir={tmp_path / 'run'}",
            "--set", f"student.launch.config_file={ZERO2_CPU}", "--set", "student.launch.num_processes=1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert shlex.join(plans["train"].command) in out
    assert f"command     {shlex.join(plans['train'].command)}" in out  # under the train row of the plan
    assert re.search(rf"student\.launch\.config_file +found +{re.escape(ZERO2_CPU)}", out)
    assert "configs/deepspeed/zero2_cpu.json" in out and "DEEPSPEED, 1 process(es)" in out

    missing = ["pipeline", str(DEMO), "--dry-run", "--strict", "--set", f"run_dir={tmp_path / 'run'}",
               "--set", "student.launch.config_file=configs/accelerate/nope.yaml"]
    assert main(missing) == 1  # --strict: a missing launch config is an error
    captured = capsys.readouterr()
    assert re.search(r"student\.launch\.config_file +missing +configs/accelerate/nope\.yaml", captured.out)
    assert "student.launch.config_file" in captured.err


def test_a_failing_launch_names_the_command_and_the_log(tmp_path, demo_model, launch_env):
    recipe = _recipe(tmp_path / "run", demo_model, f"student.launch.config_file={CPU}",
                     "student.launch.extra_args=[--no_such_accelerate_flag]")
    with pytest.raises(RuntimeError, match=r"exit code [12]\): .*--no_such_accelerate_flag.*train\.launch\.log"):
        run_launched_train(recipe, show_progress=False, echo=lambda _: None)
    log = (recipe.run_path / LAUNCH_LOG).read_text()
    assert "--no_such_accelerate_flag" in log and "unrecognized arguments" in log
    assert "handover" not in json.loads((recipe.run_path / LOCK_FILE).read_text())  # the hand-over ended


def _launched_pipeline(run_dir: Path, model: Path, config_file: str) -> tuple:
    recipe = _recipe(run_dir, model, f"student.launch.config_file={config_file}", "student.launch.main_process_port=0",
                     *SMALL)
    lines: list[str] = []
    rows = run_pipeline(recipe, show_progress=False, echo=lines.append)
    assert [(r.stage, r.action) for r in rows] == [
        ("data", "ran"), ("calibrate", "not needed"), ("label", "ran"), ("train", "ran"), ("export", "ran"),
        ("select", "ran"), ("evaluate", "ran")]
    cmd = launch_command(recipe, recipe.run_path / LAUNCH_RECIPE, quiet=True)
    assert f"[pipeline] train: {shlex.join(cmd)}" in lines
    # the child read exactly the resolved recipe (overrides included) and trained in its own process
    assert recipe_to_dict(load_recipe(recipe.run_path / LAUNCH_RECIPE)) == recipe_to_dict(recipe)
    log = (recipe.run_path / LAUNCH_LOG).read_text()
    assert f"$ {shlex.join(cmd)}" in log and '"status": "complete"' in log
    manifest = json.loads((recipe.run_path / "train.run.json").read_text())
    assert manifest["config_hash"] == config_hash(recipe, "train")
    assert manifest["summary"]["status"] == "complete" and manifest["summary"]["global_step"] == 2
    assert rows[3].summary.global_step == 2  # the pipeline read the child's summary
    assert "handover" not in json.loads((recipe.run_path / LOCK_FILE).read_text())
    return recipe, rows


@pytest.mark.slow
def test_pipeline_launches_the_train_stage_in_one_plain_process(tmp_path, demo_model, launch_env):
    recipe, _ = _launched_pipeline(tmp_path / "run", demo_model, CPU)
    assert not list((recipe.run_path / "checkpoints" / "checkpoint-2").glob("global_step*"))  # no DeepSpeed
    # a changed port or launcher keeps the run resumable: everything is complete, nothing relaunches
    moved = _recipe(recipe.run_path, demo_model, f"student.launch.config_file={ZERO2_CPU}",
                    "student.launch.main_process_port=29555", *SMALL)
    assert {p.stage: p.action for p in plan_pipeline(moved)}["train"] == "skip"


@pytest.mark.slow
def test_pipeline_launches_the_train_stage_with_deepspeed_zero2(tmp_path, demo_model, launch_env):
    recipe, _ = _launched_pipeline(tmp_path / "run", demo_model, ZERO2_CPU)
    ds = recipe.run_path / "checkpoints" / "checkpoint-2" / "global_step2"
    assert ds.is_dir() and (ds / "mp_rank_00_model_states.pt").is_file()  # DeepSpeed really ran
    assert (recipe.run_path / "selector" / "selector_config.json").is_file()
