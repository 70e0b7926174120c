"""The stage registry: one entry per stage, read by the CLI, the pipeline and the `python -m` entries."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

from purecover import contract, stages
from purecover.cli import build_parser
from purecover.config import load_recipe
from purecover.contract import run_stage
from purecover.pipeline import STAGES as PIPELINE_STAGES
from purecover.records import StageSummary
from purecover.rundir import FILES
from purecover.stages import PIPELINE, STAGES, Stage, config_hash, get_stage, not_needed

PACKAGE = Path(stages.__file__).parent


@pytest.mark.parametrize("name", list(STAGES))
def test_every_entry_is_complete(name):
    stage = STAGES[name]
    runner = stages.load_runner(name)
    assert list(inspect.signature(runner).parameters) == ["run"]  # a body: the contract is execute_stage's
    assert set(stage.reads) <= set(FILES) and set(stage.writes) <= set(FILES) and stage.writes
    assert set(stage.scratch) <= set(FILES)
    assert stage.sections and stage.headline and stage.help and stage.description
    assert stage.on_change in ("refuse", "rerun") and set(stage.before) <= set(STAGES)
    for hook in (stage.hash_extra, stage.needed, stage.directory, stage.inputs, stage.launcher):
        if hook:
            module, _, attr = hook.partition(":")
            assert callable(getattr(importlib.import_module(module), attr)), hook


def test_no_stage_name_is_special_cased_outside_the_registry():
    """Stage differences are fields or hooks of `Stage`: no ``stage == "train"``-style test elsewhere."""
    names = set(STAGES)
    for path in [PACKAGE / "pipeline.py", PACKAGE / "cli.py", PACKAGE / "rundir.py", PACKAGE / "stages.py",
                 PACKAGE / "contract.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In)) for op in node.ops):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                assert not (set(consts) & names), f"{path.name}:{node.lineno} compares with a stage name"


@pytest.mark.parametrize("name", [n for n, s in STAGES.items() if s.module])
def test_python_m_entries_run_their_own_registry_entry(name):
    """`python -m purecover.<x>` calls stage_main with the stage's registry name (no runner of its own)."""
    main = PACKAGE.joinpath(*STAGES[name].module.split(".")[1:], "__main__.py")
    calls = [n for n in ast.walk(ast.parse(main.read_text())) if isinstance(n, ast.Call)
             and getattr(n.func, "id", None) == "stage_main"]
    assert len(calls) == 1 and isinstance(calls[0].args[0], ast.Constant) and calls[0].args[0].value == name


def test_cli_and_pipeline_read_the_registry():
    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(STAGES) <= set(commands)
    for name, stage in STAGES.items():
        assert commands[name].description == stage.description
    assert PIPELINE_STAGES == PIPELINE == tuple(STAGES)
    pipeline_from = next(a for a in commands["pipeline"]._actions if a.dest == "start")
    assert list(pipeline_from.choices) == list(PIPELINE)


def test_adding_a_stage_is_one_entry(monkeypatch, capsys):
    extra = Stage(name="audit", runner="purecover.stages:get_stage", help="audit the run", description="Audit it.",
                  reads=("labels",), writes=("labels",), sections=("data",), headline=("questions",))
    monkeypatch.setitem(STAGES, "audit", extra)
    commands = build_parser()._subparsers._group_actions[0].choices
    assert commands["audit"].description == "Audit it."
    assert get_stage("audit") is extra
    with pytest.raises(ValueError, match="unknown stage 'deploy'; expected one of data, calibrate"):
        get_stage("deploy")


def test_config_hash_covers_exactly_the_declared_sections():
    recipe = load_recipe(None)
    for name, stage in STAGES.items():
        if stage.hash_extra:
            continue
        base = config_hash(recipe, name)
        for section in ("data", "teacher", "student", "export", "eval"):
            sub = getattr(recipe, section)
            field = next(f for f in dataclasses.fields(sub) if isinstance(getattr(sub, f.name), (bool, int)))
            value = getattr(sub, field.name)
            new = (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int) else value + "x"
            changed = dataclasses.replace(recipe, **{section: dataclasses.replace(sub, **{field.name: new})})
            assert (config_hash(changed, name) != base) == (section in stage.sections), (name, section)
        assert config_hash(dataclasses.replace(recipe, run_dir="elsewhere"), name) == base


def test_select_hash_follows_the_selector_and_the_test_set(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path}"])
    before = config_hash(recipe, "select")
    (tmp_path / "selector").mkdir()
    (tmp_path / "selector" / "selector_config.json").write_text('{"tau3": 0.5}')
    exported = config_hash(recipe, "select")
    assert exported != before
    assert config_hash(dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, budgets=[1])),
                       "select") == exported
    assert config_hash(dataclasses.replace(recipe, eval=dataclasses.replace(recipe.eval, path="test.json")),
                       "select") != exported


def test_not_needed_and_before(monkeypatch, tmp_path):
    recipe = load_recipe(None, ["eval.methods=[retrieval]", f"run_dir={tmp_path / 'a'}"])
    assert not_needed(recipe, "select") == "eval.methods has no student"
    assert not_needed(recipe, "calibrate") is None or "teacher" in not_needed(recipe, "calibrate")
    ran = []
    monkeypatch.setattr(contract, "load_runner", lambda name: lambda run: ran.append(name) or StageSummary())
    monkeypatch.setattr(contract, "stage_inputs", lambda recipe, name: {})
    monkeypatch.setattr(contract, "upstream_problem", lambda recipe, name: None)  # the stubs write no outputs
    run_stage("evaluate", recipe, show_progress=False)
    assert ran == ["evaluate"]  # no student: select is not run first
    run_stage("evaluate", load_recipe(None, [f"run_dir={tmp_path / 'b'}"]), show_progress=False)
    assert ran == ["evaluate", "select", "evaluate"]


def test_launch_keys_that_do_not_change_the_result_are_outside_every_hash():
    recipe = load_recipe(None)
    launched = load_recipe(None, ["student.launch.config_file=configs/accelerate/deepspeed_zero3.yaml",
                                  "student.launch.main_process_port=29511", "student.launch.main_process_ip=10.0.0.1",
                                  "student.launch.num_machines=2", "student.launch.machine_rank=1",
                                  "student.launch.extra_args=[--mixed_precision,bf16]"])
    wider = load_recipe(None, ["student.launch.config_file=configs/accelerate/multi_gpu.yaml",
                               "student.launch.num_processes=4"])
    for name in ("train", "export", "evaluate"):
        assert config_hash(launched, name) == config_hash(recipe, name), name  # the launcher and port: resumable
        assert config_hash(wider, name) != config_hash(recipe, name), name  # the world size: another batch size
    assert all(key.startswith("student.launch.") or key in ("data.index_dir", "data.index_verify", "threads")
               for key in stages.HASH_EXCLUDE)
    threaded = load_recipe(None, ["threads=1"])  # how many threads compute, not what: every stage resumes
    assert all(config_hash(threaded, name) == config_hash(recipe, name) for name in stages.STAGES)


def test_where_indexes_live_is_outside_the_hash_and_new_keys_keep_old_hashes_at_their_defaults():
    from purecover.config import section_fingerprint

    recipe = load_recipe(None)
    assert config_hash(load_recipe(None, ["data.index_dir=/somewhere/else"]), "data") == config_hash(recipe, "data")
    assert config_hash(load_recipe(None, ["data.index_verify=always"]), "data") == config_hash(recipe, "data")
    # At their defaults the keys added for corpus scale are left out: the hash a recipe had before they existed.
    assert config_hash(recipe, "data") == section_fingerprint(
        recipe, "data", exclude=stages.HASH_EXCLUDE + stages.HASH_OMIT_AT_DEFAULT)
    for override in ("data.faiss_index=HNSW32", "data.embedding_dtype=float16", "data.encode_shard_size=1000",
                     "data.faiss_search_params=nprobe=8"):
        assert config_hash(load_recipe(None, [override]), "data") != config_hash(recipe, "data"), override


def test_the_pipeline_order_follows_reads_and_writes():
    assert PIPELINE == ("data", "calibrate", "label", "train", "export", "select", "evaluate")
    shuffled = {n: STAGES[n] for n in reversed(STAGES)}  # declaration order does not matter
    assert stages.dependency_order(shuffled) == PIPELINE
    loop = {"a": Stage(name="a", runner="m:f", help="", description="", reads=("labels",), writes=("candidates",),
                       sections=("data",)),
            "b": Stage(name="b", runner="m:f", help="", description="", reads=("candidates",), writes=("labels",),
                       sections=("data",))}
    with pytest.raises(ValueError, match="the stages a, b read each other's outputs"):
        stages.dependency_order(loop)


def test_each_stage_body_sits_in_a_module_named_after_the_stage():
    """`<package>/<stage>_stage.py` in every package (docs/development/architecture.md#adding-a-stage)."""
    for name, stage in STAGES.items():
        module = stage.runner.split(":")[0]
        assert module.rsplit(".", 1)[-1] == f"{name}_stage", (name, stage.runner)
