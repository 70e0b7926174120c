from __future__ import annotations

import pytest

from purecover.config import (
    ConfigError,
    Recipe,
    load_recipe,
    parse_override,
    recipe_from_dict,
    recipe_to_dict,
    section_fingerprint,
)


def test_defaults_match_design_section_8():
    r = Recipe()
    assert r.data.dataset == "hotpotqa" and r.data.corpus == "shared" and r.data.k1 == 20
    # temperatures, λ and the scale default to null: resolved per signal (purecover/teacher/defaults.py)
    assert r.teacher.tau1 is None and r.teacher.lam is None and r.teacher.normalize is None
    assert r.teacher.lancer.n_subquestions == 2 and r.teacher.lancer.beta == 0.0
    assert r.student.lora.r == 16 and r.student.lora.target_modules == "all-linear"
    assert r.eval.budgets == [1, 3, 5, 10, 15]


def test_yaml_recipe_and_typed_overrides(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("run_dir: runs/a\ndata:\n  dataset: musique\n  k1: 30\nteacher:\n  tau1: 1e-4\n")
    r = load_recipe(path, ["data.k1=50", "teacher.layers=[0, 2]", "teacher.lancer.beta=0.5",
                           "student.training.learning_rate=1e-5", "data.limit=null", "seed=3"])
    assert r.run_dir == "runs/a" and r.seed == 3
    assert r.data.dataset == "musique" and r.data.k1 == 50 and r.data.limit is None
    assert isinstance(r.teacher.tau1, float) and r.teacher.tau1 == pytest.approx(1e-4)
    assert r.teacher.layers == [0, 2]
    assert r.teacher.lancer.beta == 0.5
    assert r.student.training == {"learning_rate": 1e-5}
    r = load_recipe(None, ["student.training.eval_strategy=no", "student.training.save_strategy=on",
                           "teacher.calibrate=False"])
    assert r.student.training == {"eval_strategy": "no", "save_strategy": "on"}  # YAML 1.2: not booleans
    assert r.teacher.calibrate is False


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.datset=musique", "did you mean 'data.dataset'"),
        ("teacher.tua1=0.1", "did you mean 'teacher.tau1'"),
        ("rundir=x", "did you mean 'run_dir'"),
        ("teacher.lancer.enable=true", "did you mean 'teacher.lancer.enabled'"),
        ("daata.k1=3", "did you mean 'data'"),
    ],
)
def test_unknown_keys_name_the_closest_valid_key(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_recipe(None, [override])


def test_unknown_key_in_yaml_names_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("data:\n  retriver: bm25\n")
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert str(path) in str(err.value) and "data.retriver" in str(err.value) and "data.retriever" in str(err.value)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("data.k1=abc", "data.k1: expected an integer"),
        ("data.k1=0", "data.k1: must be >= 1"),
        ("data.dataset=hotpot", "did you mean 'hotpotqa'"),
        ("teacher.layers=some", "teacher.layers"),
        ("teacher.calibrate=maybe", "expected true or false"),
        ("teacher.lancer.beta=2", "must be in \\[0, 1\\]"),
        ("eval.budgets=[1, x]", "eval.budgets\\[1\\]"),
        ("data=3", "data: expected a mapping"),
    ],
)
def test_bad_values_are_errors_naming_the_key(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_recipe(None, [override])


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="expected section.key=value"):
        parse_override("data.k1")
    with pytest.raises(ConfigError, match="empty key"):
        parse_override("data..k1=3")
    with pytest.raises(ConfigError, match="seed: expected an integer"):
        load_recipe(None, ["seed.x=1"])
    with pytest.raises(ConfigError, match="run_dir is not a section"):
        load_recipe(None, ["run_dir=a", "run_dir.x=1"])


def test_recipe_must_be_a_mapping(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_recipe(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_recipe(tmp_path / "missing.yaml")


def test_round_trip_and_fingerprint():
    r = load_recipe(None, ["data.k1=7"])
    again = recipe_from_dict(recipe_to_dict(r))
    assert again == r
    assert section_fingerprint(r, "data") == section_fingerprint(again, "data")
    assert section_fingerprint(r, "data") != section_fingerprint(load_recipe(None, ["data.k1=8"]), "data")
    # A change elsewhere does not change the data fingerprint.
    assert section_fingerprint(r, "data") == section_fingerprint(load_recipe(None, ["data.k1=7", "teacher.lam=1"]), "data")
    # Excluded dotted keys do not count; the rest of their section does; missing keys are ignored.
    ported = load_recipe(None, ["data.k1=7", "student.launch.config_file=c.yaml", "student.launch.main_process_port=1"])
    excl = ("student.launch.config_file", "student.launch.main_process_port", "no.such.key")
    assert section_fingerprint(ported, "student") != section_fingerprint(r, "student")
    assert section_fingerprint(ported, "student", exclude=excl) == section_fingerprint(r, "student", exclude=excl)
    assert section_fingerprint(r, "student", exclude=excl) != section_fingerprint(r, "student")
    assert section_fingerprint(load_recipe(None, ["student.lora.r=4"]), "student", exclude=excl) != \
        section_fingerprint(r, "student", exclude=excl)


def test_shipped_recipes_validate():
    from pathlib import Path

    recipes = sorted((Path(__file__).resolve().parents[1] / "configs" / "recipes").glob("*.yaml"))
    assert recipes, "no recipes shipped"
    for path in recipes:
        load_recipe(path)
