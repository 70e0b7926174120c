"""The dry run's time estimate: its reference figures are the benchmark rows they name, it scales with questions,
parameters and K1, it reads model sizes without loading anything, and the dry run prints it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import load_recipe
from purecover.estimate import (
    REFERENCE,
    REFERENCE_PARAMETERS,
    estimate_stages,
    model_parameters,
    question_count,
)

REPO = Path(__file__).resolve().parents[1]


def _row(file: str, figure: str, variant_hint: str | None = None) -> dict:
    rows = json.loads((REPO / "benchmarks" / "results" / file).read_text())["rows"]
    return next(r for r in rows if r["figure"] == figure and (variant_hint is None or variant_hint in str(r.get("variant"))))


@pytest.mark.parametrize("key", sorted(REFERENCE))
def test_each_reference_is_the_benchmark_row_it_names(key):
    seconds, source = REFERENCE[key]
    file, figure = source.split()[0], source.split()[1].rstrip(":")
    variant = re.match(r"\S+ \S+ \(variant ([^)]+)\):", source)  # a row of several variants names its own
    row = _row(file, figure, variant.group(1) if variant else "hotpotqa" if "real_models" in file else None)
    if figure.endswith("headline_minutes"):  # a stage of the headline run: "<stage> <seconds>" in the row's note
        stage_seconds, questions = re.search(r"(\w+) (\d+) s for (\d+) questions", source).group(2, 3)
        assert seconds == pytest.approx(int(stage_seconds) / int(questions))
        assert f"{questions} questions" in row["note"] and f"{key.split(':')[0]} {stage_seconds}," in row["note"]
    elif figure.endswith("train_seconds"):
        steps = int(re.search(r"for (\d+) questions", source).group(1))
        assert seconds == pytest.approx(row["value"] / steps) and str(steps) in row["note"]
    else:
        quoted = float(re.search(r"([\d.]+) s(?:/question| vs| a question)", row["note"]).group(1))
        assert seconds == pytest.approx(quoted)


def test_sizes_are_read_without_loading_a_model(tmp_path):
    from tests.models.gguf_files import write_tiny_gguf

    assert model_parameters("smollm2-135m-instruct") == REFERENCE_PARAMETERS
    assert model_parameters("gemma-3-270m") == 270_000_000  # the catalogue's other model, by its size tag
    assert model_parameters("Qwen/Qwen2.5-7B-Instruct") == 7_000_000_000
    assert model_parameters("Qwen/Qwen2.5-32B-Instruct") == 32_000_000_000
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf")
    import gguf as gguf_pkg

    assert model_parameters(str(gguf)) == sum(int(t.n_elements) for t in gguf_pkg.GGUFReader(str(gguf)).tensors)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                                              "intermediate_size": 128, "vocab_size": 1000,
                                                              "num_attention_heads": 4, "num_key_value_heads": 2,
                                                              "tie_word_embeddings": True}))
    assert model_parameters(str(tmp_path / "dir")) == 1000 * 64 + 2 * (64 * 16 * 12 + 3 * 64 * 128)
    assert model_parameters("some/model-without-a-size") is None


def test_the_estimate_scales_with_questions_parameters_and_k1():
    base = load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", ["data.sample=100", "data.limit=null"])
    twice = load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", ["data.sample=200", "data.limit=null",
                                                                     "data.k1=20"])
    assert question_count(base) == 100
    one = {e.stage: e.seconds for e in estimate_stages(base, ["label", "select"])}
    four = {e.stage: e.seconds for e in estimate_stages(twice, ["label", "select"])}
    assert four["select"] == pytest.approx(4 * one["select"]) and four["label"] == pytest.approx(4 * one["label"])
    test_share = base.student.eval_fraction * (1 - base.student.calibration_share)  # eval.questions: heldout
    assert one["select"] == pytest.approx(100 * test_share * REFERENCE["select"][0])
    every = load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", ["data.sample=100", "data.limit=null",
                                                                     "eval.questions=all"])
    assert estimate_stages(every, ["select"])[0].seconds == pytest.approx(100 * REFERENCE["select"][0])


def test_the_dry_run_prints_the_estimate(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("purecover.estimate._has_gpu", lambda: False)
    assert main(["pipeline", "configs/recipes/demo_cpu.yaml", "--dry-run", "--set", f"run_dir={tmp_path}/run"]) == 0
    out = capsys.readouterr().out
    assert "estimate (rough, within about x3" in out
    assert re.search(r"label\s+~\S+\s+36 questions x 1\.27 s", out)


def _config_dir(tmp_path: Path, name: str, **sizes) -> str:
    d = tmp_path / name
    d.mkdir()
    base = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 1000,
            "num_attention_heads": 4}
    (d / "config.json").write_text(json.dumps({**base, **sizes}))
    return str(d)


def test_absurd_sizes_are_unknown_never_an_overflow_or_a_negative_count(tmp_path, capsys, monkeypatch):
    """Issue 55 (4): a 300-digit size tag, config sizes of 10^200, negative layer counts and 10^30 questions gave
    OverflowError, negative parameters or a 57-digit hour count. Now each is "unknown" and the plan prints."""
    monkeypatch.setattr("purecover.estimate._has_gpu", lambda: False)
    assert model_parameters("org/model-" + "9" * 300 + "B") is None
    assert model_parameters(_config_dir(tmp_path, "huge", hidden_size=10**200)) is None
    assert model_parameters(_config_dir(tmp_path, "negative", num_hidden_layers=-4)) is None
    assert model_parameters(_config_dir(tmp_path, "text", num_hidden_layers="2")) is None
    assert model_parameters(_config_dir(tmp_path, "fine")) > 0
    huge_tag = "org/model-" + "9" * 300 + "B"
    for model, said in ((huge_tag, "unknown: the size of"), (_config_dir(tmp_path, "big", hidden_size=10**200),
                                                               "unknown: the size of")):
        est = {e.stage: e for e in estimate_stages(load_recipe(None, [f"student.model={model}"]), ["select"])}
        assert est["select"].seconds is None and said in est["select"].how
    many = load_recipe(None, ["student.model=org/model-100B", "data.sample=null", "data.limit=1000000000000000000000"
                              "000000000", "data.path=nowhere.json"])
    est = {e.stage: e for e in estimate_stages(many, ["select"])}
    assert est["select"].seconds is None and "over 1,000 days" in est["select"].how
    code = main(["pipeline", "configs/recipes/demo_cpu.yaml", "--dry-run", "--set", f"run_dir={tmp_path}/run",
                 "--set", f"student.model={huge_tag}"])
    out = capsys.readouterr().out
    assert code == 0 and "unknown: the size of" in out and not re.search(r"\d{12,}h", out)


def test_auto_steps_are_estimated_as_the_teachers_own_steps_and_say_it_is_an_upper_bound():
    over = ["data.sample=100", "data.limit=null"]
    own = estimate_stages(load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", [*over, "teacher.steps=model"]),
                          ["label"])[0]
    auto = estimate_stages(load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", [*over, "teacher.steps=auto"]),
                           ["label"])[0]
    oracle = estimate_stages(load_recipe("configs/recipes/real_cpu/hotpotqa.yaml", [*over, "teacher.steps=oracle"]),
                             ["label"])[0]
    assert auto.seconds == pytest.approx(own.seconds) and auto.seconds > oracle.seconds
    assert "at most" in auto.how and "at most" not in own.how


@pytest.mark.parametrize("recipe", ["hotpotqa_own_steps.yaml", "own_data.yaml"])
def test_the_own_steps_recipes_are_estimated_with_their_teachers_measured_figure(recipe):
    """Qwen2.5-Coder-0.5B writing its own steps has its own row (no scaling of SmolLM2's figure by size)."""
    loaded = load_recipe(f"configs/recipes/real_cpu/{recipe}", ["data.path=unused.jsonl", "data.sample=100",
                                                                "data.limit=null"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("purecover.estimate.question_count", lambda _recipe: 100)
        [label] = estimate_stages(loaded, ["label"])
    per_q = REFERENCE["label:model@qwen2.5-coder-0.5b-instruct"][0]
    assert label.seconds == pytest.approx(100 * per_q) and "measured with qwen2.5-coder-0.5b-instruct" in label.how
    assert ("at most" in label.how) == (recipe == "own_data.yaml")
