"""Shared helpers for the train tests."""

from __future__ import annotations

from pathlib import Path

import pytest


def labelled_overrides(tiny: Path) -> list[str]:
    """The data and teacher keys `labelled_run` labels with: a train recipe on its run directory repeats them (the
    train stage refuses candidates or labels made with another data or teacher configuration)."""
    return ["data.path=demo", "data.k1=6", "data.limit=8", f"teacher.model={tiny}", "teacher.steps=oracle",
            "teacher.calibrate=false", "teacher.dtype=float32", "teacher.device=cpu"]


def labelled_run(tmp: Path, name: str = "run") -> tuple[Path, Path]:
    """A tiny model + a data/label run dir (seconds); skips without the real sample tokenizer."""
    from purecover.config import load_recipe
    from purecover.data.data_stage import run_data_stage
    from purecover.data.samples import sample_data_dir
    from purecover.demo.tiny import build_tiny_model
    from purecover.teacher.label_stage import run_label_stage

    samples = sample_data_dir()
    if samples is None:
        pytest.skip("real sample data not found (needs its qwen2_tokenizer): set PURECOVER_SAMPLE_DATA "
                    "or put ../shared/data beside the repo")
    tiny = build_tiny_model(tmp / "tiny", samples / "qwen2_tokenizer")
    run = tmp / name
    recipe = load_recipe(None, [f"run_dir={run}", *labelled_overrides(tiny), f"student.model={tiny}"])
    run_data_stage(recipe, show_progress=False)
    run_label_stage(recipe, show_progress=False)
    return tiny, run
