"""`purecover.config` is a package of small modules (one per job) behind one unchanged public surface: every module
at most 400 lines, the same public names as the single module it replaced, every name other modules import still
importable from ``purecover.config``, and imports among the modules going one way (each imports only the modules
listed before it in `ORDER`)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

import purecover.config as config
from purecover.config import ConfigError, load_recipe
from tests.package_imports import sibling_imports

PACKAGE = Path(config.__file__).resolve().parent
MAX_LINES = 400

# The modules bottom first: a module may import only those before it (so `base` imports none of them).
# base: ConfigError and the shared field types; safe_yaml: reading YAML text and its limits; data_teacher,
# student_settings (the student's loss and readout settings), student_eval, recipe: the section dataclasses
# and the Recipe; schema: JSON-schema look-ups and error messages; loading: load_recipe, bases, --set overrides,
# recipe_to_dict, dump_recipe_yaml, section_fingerprint.
ORDER = ("base", "safe_yaml", "data_teacher", "student_settings", "student_eval", "recipe", "schema", "loading",
         "reference")

# `__all__` as it was when config.py became this package (same names, same order).
EXPECTED_ALL = (
    "LAUNCH_FLAGS", "ConfigError", "DataConfig", "EvalConfig", "ExportConfig", "LancerConfig", "LaunchConfig",
    "LoraConfig", "Recipe", "StudentConfig", "TeacherConfig", "TrackingConfig", "dump_recipe_yaml", "load_recipe",
    "parse_override", "recipe_from_dict", "recipe_json_schema", "recipe_to_dict", "section_fingerprint",
)

# Every public name config.py had (its `__all__` and its limits), besides what it imported from other libraries.
EXPECTED_PUBLIC = {*EXPECTED_ALL, "MAX_BASE_DEPTH", "MAX_RECIPE_BYTES", "MAX_RECIPE_VALUES"}

# Private names of purecover.config's modules that another module of it reads (config/reference.py), or that a section's
# check raises.
ALSO_IMPORTED = ("_range_text", "_resolve", "_type_name", "_SectionError")


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_every_module_is_at_most_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"purecover/config/{path.name} has {lines} lines (at most {MAX_LINES}): split it"


def test_no_config_module_beside_the_package():
    """A purecover/config.py would be shadowed by the package: its edits would silently do nothing."""
    assert not (PACKAGE.parent / "config.py").exists()


def test_the_public_names_are_unchanged_and_resolve():
    assert tuple(config.__all__) == EXPECTED_ALL
    public = {name for name, value in vars(config).items()
              if not name.startswith("_") and name != "annotations" and not isinstance(value, types.ModuleType)}
    assert public == EXPECTED_PUBLIC
    for name in (*EXPECTED_PUBLIC, *ALSO_IMPORTED):
        assert getattr(config, name) is not None, name
    for name in config.__all__:  # each type comes from one module of the package, never a copy
        obj = getattr(config, name)
        if isinstance(obj, type):
            module = obj.__module__.removeprefix("purecover.config.")
            assert module in ORDER, f"{name} is defined in {obj.__module__}"


def _sibling_imports(path: Path) -> list[tuple[int, str]]:
    return sibling_imports(path, "purecover.config")


def test_the_modules_are_listed_in_their_import_order():
    assert sorted(ORDER) == sorted(p.stem for p in _modules() if p.stem != "__init__"), \
        "add a new module of purecover/config/ to ORDER (after the modules it imports)"


@pytest.mark.parametrize("name", ORDER)
def test_each_module_imports_only_the_modules_before_it(name):
    allowed = set(ORDER[:ORDER.index(name)])
    wrong = [f"purecover/config/{name}.py:{line}: imports {target}"
             for line, target in _sibling_imports(PACKAGE / f"{name}.py") if target not in allowed]
    assert wrong == []


def test_the_import_check_sees_relative_and_absolute_imports(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from .base import ConfigError\nfrom . import schema\nimport purecover.config.loading\n"
                    "from purecover.config import Recipe\nfrom pydantic import Field\n")
    assert _sibling_imports(path) == [(1, "base"), (2, "schema"), (3, "loading"), (4, "__init__")]


# --------------------------------------------------------------------------- messages kept word for word

# Messages of invalid overrides, recorded with config.py before it became this package (each line is what
# `purecover config` prints after "recipe error: ").
MESSAGES = {
    ("data.k1=0",): "data.k1: must be >= 1, got 0",
    ("data.k1='3'",): "data.k1: expected an integer, got '3'",
    ("teacher.calibrate=1",): "teacher.calibrate: expected true or false, got 1",
    ("student.lora.dropout=1.0",): "student.lora.dropout: must be in [0, 1), got 1.0",
    ("data.retriever=bm24",): "data.retriever: 'bm24' is not one of 'bm25', 'dense'; did you mean 'bm25'?",
    ("teacher.layers=ful_attention",):
        "teacher.layers: 'ful_attention' is not one of 'full_attention', 'all'; did you mean 'full_attention'?",
    ("teacher.layers=[0, a]",): "teacher.layers: expected 'full_attention' | 'all' | list of int, got [0, 'a']",
    ("teacher.calibration_lengths=0",): "teacher.calibration_lengths: must be 'candidates' or an integer >= 1, got 0",
    ("teacher.tau1=-1",): "teacher.tau1: must be > 0 or null, got -1.0",
    ("teacher.lam=abc",): "teacher.lam: expected float | null, got 'abc'",
    ("teacher.lancer.beta=2",): "teacher.lancer.beta: must be in [0, 1], got 2.0",
    ("eval.budgets=[0, 3]",): "eval.budgets[0]: must be >= 1, got 0",
    ("eval.icr_layers=[1, 1]",): "eval.icr_layers: lists a layer twice: [1, 1]",
    ("seed=-1",): "seed: must be in [0, 4294967295], got -1",
    ("run_dir=' '",): "run_dir: must be a non-blank string, got ' '",
    ("student.lora.target_modules=3",): "student.lora.target_modules: expected str | list of str, got 3",
    ("student.passage_score=head",):
        "student.passage_score: head scores the passage readout's markers: needs readout: passage",
    ("student.cl_weight=0", "student.lm_weight=0"):
        "student.cl_weight: cl_weight, lm_weight and bce_weight cannot all be 0",
    ("student.launch.num_processes=2",):
        "student.launch.num_processes: is set but student.launch.config_file is null: set config_file to an "
        "accelerate config (e.g. configs/accelerate/multi_gpu.yaml) or remove it",
    ("data.path=[a.json, b.json, a.json]",): "data.path: lists 'a.json' twice (entries 0 and 2)",
    ("data.index_path=x.index",): "data.index_path: is a FAISS index: it needs data.retriever: dense",
    ("data.dataset=coverage",): "data.qrels: is needed with data.dataset: coverage (the collection's nugget qrels)",
    ("data.k1.x=1",): "data.k1: expected an integer, got {'x': 1}",
    ("foo.bar=1",): "unknown key 'foo' (valid keys of recipe: run_dir, seed, data, teacher, student, export, eval, "
                    "tracking, threads)",
    ("tracking.report_to=wand",): "tracking.report_to: 'wand' is not one of 'none', 'wandb'; did you mean 'wandb'?",
}


@pytest.mark.parametrize("overrides", list(MESSAGES), ids=lambda o: " ".join(o))
def test_override_messages_are_kept_word_for_word(overrides):
    with pytest.raises(ConfigError) as caught:
        load_recipe(None, list(overrides))
    assert str(caught.value) == f"defaults + overrides: {MESSAGES[overrides]}"


@pytest.mark.parametrize(("item", "message"), [
    ("data.k1", "override 'data.k1': expected section.key=value"),
    (".x=1", "override '.x=1': empty key"),
    ("student.training={a: 1, a: 2}", "override student.training: duplicate key 'a' given twice; YAML would "
                                      "silently keep only the second value: remove one of them"),
])
def test_malformed_override_messages_are_kept_word_for_word(item, message):
    with pytest.raises(ConfigError) as caught:
        load_recipe(None, [item])
    assert str(caught.value) == message


def test_file_messages_are_kept_word_for_word(tmp_path):
    def message(name: str, text: str | bytes) -> str:
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ConfigError) as caught:
            load_recipe(path)
        return str(caught.value).replace(str(tmp_path), "DIR")

    assert message("a.yaml", "data:\n  k1: 3\n  k1: 4\n") == ("DIR/a.yaml: duplicate key 'data.k1' at line 2 and "
                                                            "line 3; YAML would silently keep only the second "
                                                            "value: remove one of them")
    assert message("b.yaml", "# " + "x" * 1_000_000) == ("DIR/b.yaml: a recipe is larger than 1,000,000 bytes; is "
                                                       "it really a recipe?")
    assert message("c.yaml", b"seed: 1\n\xff\n") == "DIR/c.yaml: a recipe is not UTF-8 text (byte 8: invalid start byte)"
    assert message("d.yaml", "- 1\n") == "DIR/d.yaml: a recipe must be a YAML mapping, got list"
    assert message("e.yaml", "base: [1, 2]\n") == ("DIR/e.yaml: base: expected a path or a non-empty list of paths "
                                                  "(relative to the recipe's folder), got [1, 2]")
    assert message("f.yaml", "data: 3\n") == "DIR/f.yaml: data: expected a mapping, got 3"
    assert message("g.yaml", "student:\n  training: {1: 2}\n") == "DIR/g.yaml: student.training: key 1 is not a string"
