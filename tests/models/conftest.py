"""Fixtures for selector tests: a real (tiny) trained student run and its export.

`trained_run(tmp_path_factory, sample_dir, lora=...)` runs the data, label and train stages on
the bundled demo set with a tiny random Qwen2 and the real Qwen2 tokenizer (seconds on CPU).
Results are cached per session, so tests in other folders (tests/train/test_export_stage.py) import
and share them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.run_dirs import new_run_dir

_CACHE: dict[Any, Any] = {}
N_QUESTIONS = 10  # two select batches (8 + 2)


def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Path:
    if "tiny" not in _CACHE:
        from purecover.demo.tiny import build_tiny_model

        tok = sample_dir / "qwen2_tokenizer"
        if not tok.is_dir():
            pytest.skip(f"Qwen2 tokenizer not found at {tok}")
        _CACHE["tiny"] = build_tiny_model(tmp_path_factory.mktemp("tiny_student"), tok, "qwen2", seed=0)
    return _CACHE["tiny"]


def _recipe(run_dir: Path, tiny: Path, lora: bool, extra: tuple[str, ...] = ()) -> Any:
    from purecover.config import load_recipe

    return load_recipe(None, [
        f"run_dir={run_dir}", "data.path=demo", "data.k1=6", f"data.limit={N_QUESTIONS}", f"teacher.model={tiny}",
        "teacher.steps=oracle", "teacher.calibrate=false", "teacher.dtype=float32", "teacher.device=cpu",
        f"student.model={tiny}", "student.training.max_steps=4", "student.eval_fraction=0.25",
        "student.max_passage_tokens=40",
        f"student.lora.enabled={'true' if lora else 'false'}", *extra,
    ])


def trained_run(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path, lora: bool = True,
                extra: tuple[str, ...] = ()) -> Any:
    """The recipe of a finished train stage (LoRA or full model; `extra` overrides); data and labels are made
    once."""
    if ("run", lora, extra) in _CACHE:
        return _CACHE[("run", lora, extra)]
    from purecover.data.data_stage import run_data_stage
    from purecover.teacher.label_stage import run_label_stage
    from purecover.train.train_stage import run_train_stage

    tiny = tiny_model_dir(tmp_path_factory, sample_dir)
    recipe = _recipe(tmp_path_factory.mktemp("lora_run" if lora else "full_run"), tiny, lora, extra)
    labelled = _CACHE.get("labelled")
    if labelled is None:
        run_data_stage(recipe, show_progress=False)
        run_label_stage(recipe, show_progress=False)
        _CACHE["labelled"] = recipe.run_path
    else:
        new_run_dir(recipe.run_path)
        for name in ("candidates.jsonl", "labels.jsonl", "data.run.json", "label.run.json"):
            shutil.copy2(labelled / name, recipe.run_path / name)
    run_train_stage(recipe, show_progress=False)
    _CACHE[("run", lora, extra)] = recipe
    return recipe


def exported_run(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Any:
    """The LoRA run with its merged export in run_dir/selector."""
    if "exported" not in _CACHE:
        from purecover.train.export_stage import run_export_stage

        recipe = trained_run(tmp_path_factory, sample_dir, lora=True)
        run_export_stage(recipe)
        _CACHE["exported"] = recipe
    return _CACHE["exported"]


@pytest.fixture(scope="session")
def selector_run(tmp_path_factory, sample_dir):
    """Recipe of a trained LoRA run whose merged selector is exported to run_dir/selector."""
    return exported_run(tmp_path_factory, sample_dir)


@pytest.fixture(scope="session")
def selector_dir(selector_run) -> Path:
    return selector_run.run_path / "selector"


@pytest.fixture(scope="session")
def selector(selector_dir):
    from purecover.models.selector import Selector

    return Selector.from_pretrained(selector_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def candidates(selector_run) -> list[dict]:
    from purecover.utils.io import read_jsonl

    return [rec for _, rec in read_jsonl(selector_run.run_path / "candidates.jsonl")]


@pytest.fixture(scope="module")
def tokenizer(sample_dir):
    """The real Qwen2 tokenizer of the sample data (skipped without it)."""
    from transformers import AutoTokenizer

    path = sample_dir / "qwen2_tokenizer"
    if not path.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {path}")
    return AutoTokenizer.from_pretrained(path)
