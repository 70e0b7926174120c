"""Every recipe under configs/recipes/ loads and resolves to its recorded form; the paper recipes carry
the paper's hyper-parameters; the ablations are a few lines over paper/hotpotqa.yaml."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from purecover.config import Recipe, load_recipe, recipe_to_dict

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "configs" / "recipes"
FILES = sorted(RECIPES.rglob("*.yaml"))
ALL = [p for p in FILES if not p.name.startswith("_")]  # `_name.yaml` files are bases only, not recipes to run
PAPER = [p for p in ALL if p.is_relative_to(RECIPES / "paper") and not p.is_relative_to(RECIPES / "paper" / "released_code")]
RELEASED = RECIPES / "paper" / "released_code" / "hotpotqa.yaml"
SNAPSHOT = REPO / "tests" / "fixtures" / "resolved_recipes.json"
ABLATION_MAX_LINES = 15

# The paper's Table 2: each ablation changes exactly these keys of paper/hotpotqa.yaml (plus run_dir).
ABLATIONS: dict[str, dict[str, Any]] = {
    "no_attention": {"teacher.estimator": "no_attention"},
    "no_cot_weighting": {"teacher.cot_weighting": False},
    "no_calibration": {"teacher.calibrate": False},
    "no_optimisation_avg": {"teacher.selection": "avg"},
    "no_optimisation_max": {"teacher.selection": "max"},
    "lam0": {"teacher.lam": 0.0},
    "lam1": {"teacher.lam": 1.0},
}
MAIN_DATASETS = {"hotpotqa": "hotpotqa", "2wiki": "2wikimultihopqa", "musique": "musique", "strategyqa": "strategyqa"}


def rel(path: Path) -> str:
    return path.relative_to(RECIPES).as_posix()


def raw(path: Path) -> dict[str, Any]:
    """The recipe file's own mapping, its `base` not followed."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def with_bases(path: Path) -> list[Path]:
    """`path` and every base it names, recursively (the files whose comments document it)."""
    base = raw(path).get("base") or []
    out = [path]
    for name in [base] if isinstance(base, str) else base:
        out += with_bases((path.parent / name).resolve())
    return out


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping (lists are leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def test_the_paper_recipes_exist():
    assert {p.stem for p in (RECIPES / "paper").glob("[!_]*.yaml")} == set(MAIN_DATASETS)
    assert {p.stem for p in (RECIPES / "paper" / "ablations").glob("*.yaml")} == set(ABLATIONS)


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_recipe_loads(path):
    recipe = load_recipe(path)
    assert isinstance(recipe, Recipe)


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_training_keys_are_training_arguments(path):
    from transformers import TrainingArguments

    valid = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert set(load_recipe(path).student.training) <= valid


def restrict(resolved: dict[str, Any], recorded: dict[str, Any], defaults: dict[str, Any], where: str) -> dict:
    """`resolved` limited to the keys `recorded` has: a key added to the schema since the snapshot was taken
    must hold its default (so a new field does not invalidate the snapshot, but a recipe setting it does)."""
    out: dict[str, Any] = {}
    for key, value in resolved.items():
        if key not in recorded:
            assert key in defaults and value == defaults[key], f"{where}{key} is not in the snapshot: {value!r}"
        elif isinstance(value, dict) and isinstance(recorded[key], dict) and isinstance(defaults.get(key), dict):
            out[key] = restrict(value, recorded[key], defaults[key], f"{where}{key}.")
        else:
            out[key] = value
    return out


def test_every_recipe_resolves_to_its_snapshot():
    """The resolved recipe of every file (what `purecover config` prints) equals the one recorded before the
    recipes were composed from bases; key order included, since it is the order `purecover config` prints."""
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert set(recorded) == {rel(p) for p in ALL}, "a recipe was added or removed: record it in the snapshot"
    defaults = recipe_to_dict(load_recipe(None))
    for name, expected in recorded.items():
        resolved = restrict(recipe_to_dict(load_recipe(RECIPES / name)), expected, defaults, f"{name}: ")
        assert resolved == expected, name
        assert json.dumps(resolved) == json.dumps(expected), f"{name}: same values, other key order"


@pytest.mark.parametrize("name", list(ABLATIONS))
def test_ablation_is_a_few_lines_over_the_hotpotqa_recipe(name):
    path = RECIPES / "paper" / "ablations" / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= ABLATION_MAX_LINES, f"{rel(path)}: more than {ABLATION_MAX_LINES} lines"
    assert text.startswith("#"), f"{rel(path)}: no comment saying what the ablation is"
    own = raw(path)
    assert own.pop("base") == "../hotpotqa.yaml"
    assert own.pop("run_dir") == f"runs/paper/ablations/{name}"
    assert flatten(own) == ABLATIONS[name]


@pytest.mark.parametrize("name", list(MAIN_DATASETS))
def test_main_recipes_share_one_base(name):
    path = RECIPES / "paper" / f"{name}.yaml"
    assert raw(path)["base"] == "_shared.yaml"
    assert "run_dir" not in raw(RECIPES / "paper" / "_shared.yaml")  # each recipe names its own


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_config_files_named_in_comments_exist(path):
    for name in set(re.findall(r"configs/[\w./-]+\.(?:yaml|json)", path.read_text(encoding="utf-8"))):
        assert (REPO / name).is_file(), f"{rel(path)} mentions {name}, which does not exist"


def test_run_dirs_are_distinct():
    run_dirs = [load_recipe(p).run_dir for p in ALL]
    assert len(set(run_dirs)) == len(run_dirs)


def test_readme_lists_every_recipe():
    readme = (RECIPES / "README.md").read_text(encoding="utf-8")
    for path in ALL:
        assert f"`{rel(path)}`" in readme, f"configs/recipes/README.md does not list {rel(path)}"


@pytest.mark.parametrize("path", PAPER, ids=rel)
def test_paper_hyper_parameters(path):
    r = load_recipe(path)
    assert r.data.k1 == 20 and r.data.retriever == "dense" and r.data.dense_model == "intfloat/e5-base-v2"
    assert r.data.path == "RUC-NLPIR/FlashRAG_datasets" and r.data.corpus.endswith("wiki18_100w.jsonl")
    assert r.teacher.model == "Qwen/Qwen2.5-32B-Instruct"
    assert r.teacher.tau1 == pytest.approx(4e-5) and r.teacher.tau2 == pytest.approx(4e-5)
    assert r.teacher.normalize == "absolute"  # the paper's scale
    assert r.teacher.budget == 5
    assert r.teacher.lam == pytest.approx({"lam0": 0.0, "lam1": 1.0}.get(path.stem, 0.3))
    assert r.student.model == "Qwen/Qwen2.5-7B-Instruct" and r.student.lora.enabled
    assert r.student.training["num_train_epochs"] == 10
    assert r.student.training["learning_rate"] == pytest.approx(1e-5)
    assert r.student.training["bf16"] is True
    assert r.eval.generator == "Qwen/Qwen2.5-7B-Instruct"
    assert r.eval.sample == 500 and r.eval.limit is None and r.eval.seed == 0  # 500 at random, as the paper
    assert r.eval.table_budget == 5 and 5 in r.eval.budgets
    assert {"retrieval", "cross_encoder", "xquad", "teacher", "student"} <= set(r.eval.methods)


@pytest.mark.parametrize("name", list(MAIN_DATASETS))
def test_main_recipes_read_their_flashrag_configuration(name):
    r = load_recipe(RECIPES / "paper" / f"{name}.yaml")
    assert r.data.dataset == name and r.data.hub_config == MAIN_DATASETS[name] and r.data.split == "train"
    if name == "strategyqa":  # one split only: test on the student's held-out questions
        assert r.eval.path is None and r.eval.questions == "heldout"
        # the test split (held out, not calibration) must hold the 500 sampled questions with a margin
        expected_test = 2290 * r.student.eval_fraction * (1 - r.student.calibration_share)
        assert expected_test - 500 >= 2.5 * (2290 * 0.25) ** 0.5, expected_test
    else:
        assert r.eval.path == r.data.path and r.eval.split == "dev"


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_recipe_passes_the_pipeline_dry_run(path, tmp_path, capsys):
    """`purecover pipeline RECIPE --dry-run`: valid, every resource resolved or reported, nothing written."""
    from purecover.cli import main

    run_dir = tmp_path / "run"
    assert main(["pipeline", str(path), "--dry-run", "--set", f"run_dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert "resources:" in out and "plan:" in out and "  evaluate" in out
    assert not run_dir.exists()


@pytest.mark.parametrize("path", PAPER, ids=rel)
def test_paper_recipes_launch_training_with_deepspeed_zero2_on_8_gpus(path):
    launch = load_recipe(path).student.launch
    assert launch.config_file == "configs/accelerate/deepspeed_zero2.yaml" and launch.num_processes == 8
    accelerate = yaml.safe_load((REPO / launch.config_file).read_text(encoding="utf-8"))
    assert accelerate["distributed_type"] == "DEEPSPEED" and accelerate["num_processes"] == 8
    ds_json = REPO / accelerate["deepspeed_config"]["deepspeed_config_file"]
    assert ds_json.is_file() and '"stage": 2' in ds_json.read_text(encoding="utf-8")
    text = "\n".join(p.read_text(encoding="utf-8") for p in with_bases(path))  # the recipe's and its bases' comments
    # the header's commands agree with the recipe: `purecover train` (which launches), no hand-written launch
    assert "purecover train $R" in text
    assert not re.search(r"^#\s+accelerate launch .*-m purecover\.train", text, re.M)
    assert "--num_processes 8" in text and launch.config_file in text
    # the test set's stages in the header use --test-set (the sample eval.sample / eval.seed draws), never a
    # hand-written copy of the evaluation data section, and the test set gets its own bias (its documents' lengths)
    assert not re.search(r"^#.*--set run_dir=\$RUN/eval", text, re.M) and "data.limit=500" not in text
    if load_recipe(path).eval.path:
        assert re.search(r"^#.*purecover label \$R --test-set", text, re.M)
        assert not re.search(r"^#\s+cp \$(RUN|MAIN)/bias\.json \$RUN/eval/", text, re.M)


def test_the_released_code_recipe_is_the_paper_recipe_with_the_code_s_labelling_rule():
    """configs/recipes/paper/released_code/hotpotqa.yaml: the HotpotQA paper recipe, changed only in the teacher keys
    the authors' released code sets differently (run_reranker.py: --lbd 0.3, --tau 1e-5, rerank_topk 20;
    distillation.py: top-5 target in gain order, 0.01 · SFT + BPR on 5 of the bottom 10, --topk 5)."""
    own = raw(RELEASED)
    assert own.pop("base") == "../hotpotqa.yaml" and own.pop("run_dir") == "runs/paper/released_code/hotpotqa"
    assert flatten(own) == {"teacher.objective": "released_code", "teacher.budget": 20, "teacher.min_select": 0,
                            "teacher.tau_stop": 0.0, "teacher.tau2": 1e-5, "teacher.lam": 0.3,
                            "teacher.attention_layout": "plain", "teacher.calibration_procedure": "in_context",
                            "teacher.calibration_questions": 100,
                            "student.target": "top_k", "student.target_k": 5, "student.lm_weight": 0.01,
                            "student.reply_order": "target", "student.negatives": "sampled",
                            "student.negative_sample": 5, "student.negative_pool": 10,
                            "student.candidate_shuffles": 1, "student.k_max": 5, "student.min_select": 5}
    assert load_recipe(RELEASED).teacher.objective == "released_code"
    assert load_recipe(RECIPES / "paper" / "hotpotqa.yaml").teacher.objective == "paper"


@pytest.mark.parametrize("path", [p for p in ALL if rel(p).startswith("paper/") and not rel(p).endswith("_shared.yaml")],
                         ids=rel)
def test_every_paper_recipe_says_which_form_it_uses(path):
    """The header names the form (the paper text's or the released code's) and it is the one the recipe runs."""
    header = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# Form:")]
    assert len(header) == 1, "one '# Form:' line in the header"
    objective = load_recipe(path).teacher.objective
    assert f"teacher.objective: {objective}" in header[0]
    assert ("released code's (" in header[0]) == (objective == "released_code")


def test_the_released_code_page_shows_the_recipe_as_it_is():
    """docs/paper/released-code.md's recipe block is the recipe file's keys and values, comments aside."""
    page = (REPO / "docs" / "paper" / "released-code.md").read_text(encoding="utf-8")
    block = page.split("## The recipe", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == raw(RELEASED)
