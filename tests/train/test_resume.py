"""Resuming a killed training run, and the validation of `student.training`.

Resume: run A trains 6 steps in one go (checkpoints every 3 steps). Run B is the same recipe in
another run dir, started as ``python -m purecover.train`` and SIGKILLed as soon as checkpoint-3 is
complete (what a user hits on a pre-empted node); rerunning the same command resumes from
checkpoint-3 (the train stage picks the last checkpoint by itself) and must end with the same
adapter as run A. CPU, float32, fixed seeds: the weights agree to 1e-6. Training uses two shuffled
candidate orders per question (`student.candidate_shuffles`), so this also checks that the orders are the
same on the resumed load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from purecover.config import ConfigError, load_recipe
from purecover.train.train_stage import build_training_arguments
from tests.process_helpers import run_and_kill_when
from tests.run_dirs import new_run_dir
from tests.train.helpers import labelled_run

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS, SAVE_STEPS = 6, 3


# --- student.training validation ------------------------------------------------------------------

@pytest.mark.parametrize(("key", "closest"), [
    ("learning_rat", "learning_rate"),
    ("per_device_train_batchsize", "per_device_train_batch_size"),
    ("num_train_epoch", "num_train_epochs"),
    ("save_step", "save_steps"),
])
def test_unknown_training_key_names_the_closest_field(tmp_path, key, closest):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", f"student.training.{key}=1"])
    with pytest.raises(ConfigError) as err:
        build_training_arguments(recipe, has_eval=False)
    message = str(err.value)
    assert f"student.training.{key}" in message and f"student.training.{closest}" in message


def test_training_keys_reach_training_arguments(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "student.training.max_steps=7",
                                "student.training.learning_rate=0.003", "student.training.save_total_limit=5"])
    args = build_training_arguments(recipe, has_eval=True)
    assert (args.max_steps, args.learning_rate, args.save_total_limit) == (7, 0.003, 5)
    assert Path(args.output_dir) == tmp_path / "checkpoints"
    assert args.seed == recipe.seed and args.eval_strategy == "epoch"
    assert build_training_arguments(recipe, has_eval=False).eval_strategy == "no"
    if not torch.cuda.is_available():
        assert args.use_cpu


def test_training_output_dir_is_fixed(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", f"student.training.output_dir={tmp_path / 'elsewhere'}"])
    with pytest.raises(ConfigError, match="output_dir"):
        build_training_arguments(recipe, has_eval=False)


# --- kill and resume ------------------------------------------------------------------------------

def _labelled_run(tmp: Path) -> tuple[Path, Path]:
    return labelled_run(tmp, 'labelled')


def _new_run(labelled: Path, run_dir: Path) -> Path:
    new_run_dir(run_dir)
    for name in ("candidates.jsonl", "labels.jsonl"):
        (run_dir / name).write_bytes((labelled / name).read_bytes())
    return run_dir


def _command(tiny: Path, run_dir: Path) -> list[str]:
    # two shuffled candidate orders per question: the resumed run must see the very examples (orders and
    # permuted labels) the uninterrupted run saw after the checkpoint
    sets = [f"run_dir={run_dir}", f"student.model={tiny}", "student.dtype=float32", "student.max_passage_tokens=64",
            "student.candidate_shuffles=2",
            f"student.training.max_steps={MAX_STEPS}", f"student.training.save_steps={SAVE_STEPS}",
            "student.training.learning_rate=0.01", "student.training.logging_steps=1",
            "student.training.save_total_limit=3"]
    return [sys.executable, "-m", "purecover.train", "-q", *(x for s in sets for x in ("--set", s))]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    return env


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}"


def _complete_checkpoint_step(ckpt: Path) -> int | None:
    """global_step of a fully written Trainer checkpoint (trainer_state.json is written last)."""
    try:
        return int(json.loads((ckpt / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError):
        return None


def _adapter(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path / "adapter_model.safetensors")


def _step_losses(state_file: Path) -> dict[int, float]:
    history = json.loads(state_file.read_text())["log_history"]
    return {h["step"]: h["loss"] for h in history if "loss" in h}


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    pytest.importorskip("peft")
    tiny, labelled = _labelled_run(tmp_path)

    # Run A: uninterrupted.
    run_a = _new_run(labelled, tmp_path / "a")
    _run(_command(tiny, run_a))

    # Run B: SIGKILL once checkpoint-3 is complete.
    run_b = _new_run(labelled, tmp_path / "b")
    ckpt3 = run_b / "checkpoints" / f"checkpoint-{SAVE_STEPS}"
    run_and_kill_when(_command(tiny, run_b), lambda: _complete_checkpoint_step(ckpt3) == SAVE_STEPS,
                      what=f"run B (waiting for checkpoint-{SAVE_STEPS})", timeout=600, cwd=REPO, env=_env())
    later = [p.name for p in (run_b / "checkpoints").iterdir() if p.name != ckpt3.name]
    assert not later, f"run B got past step {SAVE_STEPS} before the kill: {later}"
    ckpt3_mtime = (ckpt3 / "adapter_model.safetensors").stat().st_mtime_ns

    # Up to the kill both runs are the same computation: a difference here is non-determinism of
    # training itself (e.g. an unseeded LoRA initialisation), not a resume problem.
    ckpt3_a, ckpt3_b = _adapter(run_a / "checkpoints" / ckpt3.name), _adapter(ckpt3)
    for name in ckpt3_a:
        assert torch.allclose(ckpt3_a[name], ckpt3_b[name], atol=1e-6, rtol=0), (
            f"two runs of the same recipe already differ at {ckpt3.name} in {name} "
            f"(max |Δ| {float((ckpt3_a[name] - ckpt3_b[name]).abs().max()):.3g}): training is not reproducible; "
            "is the LoRA initialisation seeded?")

    # Run B again: the same command resumes from checkpoint-3 and finishes.
    _run(_command(tiny, run_b))
    summary = json.loads((run_b / "train.run.json").read_text())["summary"]
    assert summary["resumed_from"] is not None and Path(summary["resumed_from"]).name == ckpt3.name
    assert summary["global_step"] == MAX_STEPS
    assert (ckpt3 / "adapter_model.safetensors").stat().st_mtime_ns == ckpt3_mtime, "checkpoint-3 was retrained"

    # Same final weights (and the same per-step losses) as the uninterrupted run.
    final_a, final_b = _adapter(run_a / "checkpoints" / "final"), _adapter(run_b / "checkpoints" / "final")
    assert final_a.keys() == final_b.keys() and final_a
    for name in final_a:
        assert torch.allclose(final_a[name], final_b[name], atol=1e-6, rtol=0), (
            name, float((final_a[name] - final_b[name]).abs().max()))
    mid = _adapter(ckpt3)
    assert any(not torch.allclose(mid[n], final_b[n], atol=1e-4) for n in mid), "no training after the resume"
    losses_a = _step_losses(run_a / "checkpoints" / f"checkpoint-{MAX_STEPS}" / "trainer_state.json")
    losses_b = _step_losses(run_b / "checkpoints" / f"checkpoint-{MAX_STEPS}" / "trainer_state.json")
    assert sorted(losses_a) == sorted(losses_b) == list(range(1, MAX_STEPS + 1))
    for step in losses_a:
        assert losses_a[step] == pytest.approx(losses_b[step], abs=1e-4), step
    # train_loss covers the whole run across the resume, like the uninterrupted run's; the Trainer's own
    # figure (steps 4-6 only) is kept as train_loss_this_run.
    summary_a = json.loads((run_a / "train.run.json").read_text())["summary"]
    assert summary["train_loss"] == pytest.approx(summary_a["train_loss"], abs=1e-4)
    assert summary["train_loss"] == pytest.approx(sum(losses_b.values()) / MAX_STEPS, abs=1e-4)
    assert summary["train_loss_this_run"] == pytest.approx(
        sum(losses_b[s] for s in range(SAVE_STEPS + 1, MAX_STEPS + 1)) / (MAX_STEPS - SAVE_STEPS), abs=1e-4)
    assert summary["train_loss_steps"] == MAX_STEPS and summary["resumes"] == [SAVE_STEPS]
    assert summary_a["resumes"] == [] and summary_a["train_loss_this_run"] == pytest.approx(summary_a["train_loss"], abs=1e-5)
