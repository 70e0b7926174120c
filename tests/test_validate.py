"""The whole recipe is validated before any stage runs: `purecover.validate` and its entry points."""

from __future__ import annotations

from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import ConfigError, load_recipe
from purecover.validate import validate_recipe

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "configs" / "recipes" / "demo_cpu.yaml")
RECIPES = sorted((REPO / "configs" / "recipes").rglob("*.yaml"))


def _error(*overrides: str, path: str | None = None) -> str:
    """The ConfigError message of validating the recipe (defaults or `path`) with `overrides`."""
    recipe = load_recipe(path, list(overrides))
    with pytest.raises(ConfigError) as err:
        validate_recipe(recipe)
    return str(err.value)


# --- student.training -----------------------------------------------------------------------------

def test_unknown_training_key_names_the_closest_field():
    message = _error("student.training.learning_rat=1e-4")
    assert "unknown key 'student.training.learning_rat'" in message
    assert "did you mean 'student.training.learning_rate'" in message


@pytest.mark.parametrize(("override", "key", "shown", "expected"), [
    ("student.training.learning_rate=fast", "learning_rate", "'fast'", "expected a number"),
    ("student.training.max_steps=many", "max_steps", "'many'", "expected an integer"),
    ("student.training.max_steps=2.5", "max_steps", "2.5", "expected an integer"),
    ("student.training.bf16=3", "bf16", "got 3", "expected true or false"),
    ("student.training.save_total_limit=lots", "save_total_limit", "'lots'", "an integer or null"),
    ("student.training.report_to=[none, 3]", "report_to", "[", "a list (each item a string)"),
])
def test_training_value_of_the_wrong_type(override, key, shown, expected):
    message = _error(override)
    assert message.startswith(f"student.training.{key}: ")
    assert shown in message and expected in message


def test_enum_like_training_field_lists_its_values():
    message = _error("student.training.lr_scheduler_type=wobbly")
    assert message.startswith("student.training.lr_scheduler_type: ")
    assert "'wobbly'" in message and "'linear'" in message and "'cosine'" in message


def test_enum_like_training_field_suggests_the_closest_value():
    message = _error("student.training.save_strategy=epochs")
    assert "student.training.save_strategy" in message and "did you mean 'epoch'" in message


def test_declared_choices_of_a_string_field_are_checked():
    message = _error("student.training.ddp_backend=carrier-pigeon")
    assert "student.training.ddp_backend" in message and "'nccl'" in message and "'carrier-pigeon'" in message


@pytest.mark.parametrize("override", [
    "student.training.num_train_epochs=2",  # an int for a float field
    "student.training.learning_rate=1",
    "student.training.save_total_limit=null",
    "student.training.report_to=[none]",
    "student.training.report_to=none",
    "student.training.lr_scheduler_type=cosine",
    "student.training.eval_strategy=no",
    "student.training.ddp_backend=gloo",
    "student.training.gradient_checkpointing=true",
    "student.training.bf16=true",  # checked on the CPU: no bf16 GPU needed to validate
])
def test_valid_training_values_pass(override):
    validate_recipe(load_recipe(None, [override]))


def test_training_arguments_own_checks_run():
    message = _error("student.training.fp16=true", "student.training.bf16=true")
    assert message.startswith("student.training: ") and "fp16 and bf16" in message
    message = _error("student.training.lr_scheduler_type=reduce_lr_on_plateau", "student.training.eval_strategy=no")
    assert message.startswith("student.training: ") and "reduce_lr_on_plateau" in message


def test_training_output_dir_is_fixed(tmp_path):
    message = _error(f"run_dir={tmp_path}", f"student.training.output_dir={tmp_path / 'elsewhere'}")
    assert "student.training.output_dir" in message


def test_build_training_arguments_uses_the_same_checks(tmp_path):
    from purecover.train.train_stage import build_training_arguments

    recipe = load_recipe(None, [f"run_dir={tmp_path}", "student.training.learning_rate=fast"])
    with pytest.raises(ConfigError, match=r"student\.training\.learning_rate: expected a number, got 'fast'"):
        build_training_arguments(recipe, has_eval=False)


def test_validation_leaves_accelerate_state_alone(monkeypatch):
    """The dry construction must not set up accelerate's process-wide state (it would pin later stages
    of the process to the CPU): the real device set-up is never reached."""
    import transformers.training_args as training_args

    def untouchable(*args, **kwargs):
        raise AssertionError("validation set up accelerate's process state")

    monkeypatch.setattr(training_args.PartialState, "__init__", untouchable)
    monkeypatch.setattr(training_args.AcceleratorState, "_reset_state", untouchable)
    validate_recipe(load_recipe(DEMO))


# --- student.lora, data.k1, eval.table_budget ----------------------------------------------------

@pytest.mark.parametrize(("override", "pattern"), [
    ("student.lora.r=0", r"student\.lora\.r: must be >= 1, got 0"),
    ("student.lora.alpha=0", r"student\.lora\.alpha: must be > 0, got 0"),
    ("student.lora.dropout=1.5", r"student\.lora\.dropout: must be in \[0, 1\), got 1\.5"),
    ("student.lora.dropout=-0.1", r"student\.lora\.dropout: must be in \[0, 1\), got -0\.1"),
])
def test_lora_ranges(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_recipe(None, [override])


def test_k1_above_the_identifier_capacity():
    message = _error("data.k1=30", "student.identifiers=letters")
    assert message.startswith("data.k1: 30 ")
    assert "letters labels at most 26" in message and "student.identifiers: letters52" in message
    validate_recipe(load_recipe(None, ["data.k1=30", "student.identifiers=letters52"]))
    validate_recipe(load_recipe(None, ["data.k1=26", "student.identifiers=letters"]))


def test_k1_above_every_scheme():
    message = _error("data.k1=60", "student.identifiers=letters52")
    assert "data.k1: 60" in message and "at most 52" in message
    # with the narrow scheme the suggestion names both ways out, each of which passes
    message = _error("data.k1=1_000", "student.identifiers=letters")
    assert message.endswith("lower data.k1 to at most 26, or to at most 52 with student.identifiers: letters52")
    validate_recipe(load_recipe(None, ["data.k1=26", "student.identifiers=letters"]))
    validate_recipe(load_recipe(None, ["data.k1=52", "student.identifiers=letters52"]))


def test_k1_is_free_when_the_student_is_not_trained():
    validate_recipe(load_recipe(None, ["data.k1=60", "eval.methods=[retrieval, teacher]"]))


def test_table_budget_must_be_evaluated():
    message = _error("eval.budgets=[1, 3]", "eval.table_budget=5")
    assert message.startswith("eval.table_budget: 5 ") and "[1, 3]" in message
    validate_recipe(load_recipe(None, ["eval.budgets=[1, 3]", "eval.table_budget=3"]))


# --- eval.methods ---------------------------------------------------------------------------------

def test_misspelt_eval_method_names_the_closest_one():
    assert _error("eval.methods=[retreival, student]") == \
        "eval.methods: unknown method 'retreival'; did you mean 'retrieval'?"


@pytest.mark.parametrize("override", ["eval.methods=[student, student]", "eval.methods=[]",
                                      "eval.methods=['mmr:runs/x']", "eval.methods=['selections:']"])
def test_malformed_eval_methods(override):
    assert _error(override).startswith("eval.methods")


def test_well_formed_eval_methods_pass():
    validate_recipe(load_recipe(None, ["eval.methods=[none, 'teacher:runs/a', 'selections:runs/b.trec=b', mmr]"]))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_shipped_recipe_validates(path):
    validate_recipe(load_recipe(path))


# --- entry points ---------------------------------------------------------------------------------

def test_config_command_reports_a_recipe_error(capsys):
    assert main(["config", DEMO, "--set", "student.training.learning_rat=1e-4"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("purecover: recipe error: ") and err.count("\n") == 1
    assert "student.training.learning_rat" in err and "did you mean 'student.training.learning_rate'" in err
    assert DEMO in err  # names the recipe file like load_recipe's errors


@pytest.mark.parametrize("strict", [["--strict"], []])
def test_pipeline_dry_run_reports_a_recipe_error(tmp_path, capsys, strict):
    code = main(["pipeline", DEMO, "--dry-run", *strict, "--set", f"run_dir={tmp_path / 'run'}",
                 "--set", "student.training.max_steps=many"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "purecover: recipe error: " in err and "student.training.max_steps" in err and "'many'" in err
    assert "plan:" not in out and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["config"], ["pipeline", "--dry-run"]])
def test_a_misspelt_method_is_a_recipe_error(tmp_path, capsys, command):
    code = main([command[0], DEMO, *command[1:], "--set", f"run_dir={tmp_path / 'run'}",
                 "--set", "eval.methods=[retreival, student]"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (f"purecover: recipe error: {DEMO} + overrides: eval.methods: unknown method 'retreival'; "
                   "did you mean 'retrieval'?\n")
    assert not (tmp_path / "run").exists()


def test_stage_command_validates_before_any_work(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["data", DEMO, "-q", "--set", f"run_dir={run_dir}", "--set", "data.limit=2",
                 "--set", "student.training.learning_rat=1e-4"])
    err = capsys.readouterr().err
    assert code == 2
    assert "purecover: recipe error: " in err and "student.training.learning_rat" in err
    assert not (run_dir / "candidates.jsonl").exists() and not run_dir.exists()


def test_stage_main_validates_before_running(capsys, monkeypatch, tmp_path):
    from purecover import contract
    from purecover.entry import stage_main
    from purecover.records import StageSummary

    calls = []

    def body(run):
        calls.append((run.name, run.action))
        (run.run_dir.path_of("final") / "weights").mkdir(parents=True, exist_ok=True)
        return StageSummary()

    monkeypatch.setattr(contract, "load_runner", lambda name: body)
    monkeypatch.setattr(contract, "stage_inputs", lambda recipe, name: {})
    run_dir = ["--set", f"run_dir={tmp_path / 'run'}"]
    code = stage_main("train", "python -m purecover.train", None, [DEMO, "--set", "data.k1=30", *run_dir])
    assert code == 2 and calls == []
    err = capsys.readouterr().err
    assert err.startswith("python -m purecover.train: recipe error: ") and "data.k1: 30" in err
    assert stage_main("train", "p", None, [DEMO, "-q", *run_dir]) == 0
    assert calls == [("train", "run")]
    assert stage_main("train", "p", None, [DEMO, "-q", *run_dir]) == 0  # complete now: skipped
    assert stage_main("train", "p", None, [DEMO, "-q", "--rerun", *run_dir]) == 0  # what `--from train` launches
    assert calls == [("train", "run"), ("train", "rerun")]
