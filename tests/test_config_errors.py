"""Recipe mistakes that YAML or the overrides would otherwise accept silently."""

from __future__ import annotations

import pytest

from purecover.config import ConfigError, load_recipe, parse_override


def test_duplicate_top_level_key_names_file_key_and_both_lines(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("run_dir: runs/a\ndata:\n  k1: 30\nseed: 1\nrun_dir: runs/b\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    assert str(info.value) == (f"{path}: duplicate key 'run_dir' at line 1 and line 5; YAML would silently keep "
                               "only the second value: remove one of them")


def test_duplicate_nested_key_names_the_dotted_key(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher:\n  lancer:\n    beta: 0.2\n    enabled: true\n    beta: 0.5\n")
    with pytest.raises(ConfigError, match=r"r\.yaml: duplicate key 'teacher\.lancer\.beta' at line 3 and line 5"):
        load_recipe(path)
    path.write_text("data:\n  k1: 30\nteacher:\n  tau1: 1\ndata:\n  k1: 40\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'data' at line 1 and line 5"):
        load_recipe(path)
    path.write_text("eval:\n  methods:\n    - {name: a}\n    - {name: b, name: c}\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'eval\.methods\[1\]\.name' at line 4 and line 4"):
        load_recipe(path)


def test_same_key_in_different_sections_and_merge_keys_are_fine(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher:\n  dtype: float32\n  device: cpu\nstudent:\n  lora: &l {r: 8}\n"
                    "  training: {<<: {learning_rate: 1.0e-4}, learning_rate: 2.0e-5}\n")
    r = load_recipe(path)
    assert r.teacher.dtype == "float32" and r.student.lora.r == 8
    assert r.student.training == {"learning_rate": 2e-5}


def test_duplicate_key_in_an_override_value():
    with pytest.raises(ConfigError, match=r"override data: duplicate key 'k1' given twice"):
        parse_override("data={k1: 3, k1: 4}")


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing here yet\n# data:\n#   k1: 3\n", "null\n", "---\n~\n"])
def test_empty_recipe_file_is_an_error(tmp_path, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    assert str(info.value).startswith(f"recipe {path} is empty (no keys, only comments or null)")


def test_explicit_empty_mapping_still_means_defaults(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("{}\n")
    assert load_recipe(path).data.k1 == 20


@pytest.mark.parametrize(("override", "shown"), [("data=null", "null"), ("data=", "null"), ("teacher=3", "3"),
                                                 ("eval=[1, 2]", "[1, 2]"), ("teacher.lancer=null", "null"),
                                                 ("student.lora=off", "'off'")])
def test_overriding_a_whole_section_with_a_non_mapping_names_the_section(override, shown):
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as info:
        load_recipe(None, [override])
    msg = str(info.value)
    assert msg.startswith(f"override {override!r}: {key}: expected a mapping, got {shown}; "
                          f"{key} is a whole section, not a single value: set one of its keys instead ({key}.KEY=VALUE")


def test_section_override_with_a_mapping_and_null_leaf_values_still_work():
    r = load_recipe(None, ["data={k1: 7, dataset: musique}", "data.limit=null", "teacher.tau1=null"])
    assert r.data.k1 == 7 and r.data.dataset == "musique" and r.data.limit is None and r.teacher.tau1 is None


def test_every_problem_of_a_recipe_is_reported_in_one_run(tmp_path):
    """Two typos and three bad values: one error listing the five, misspelt keys first, each key once (a union's
    several alternatives give one line)."""
    path = tmp_path / "typos.yaml"
    path.write_text("data:\n  k11: 5\n  k1: -3\n  retriever: bm26\nteacher:\n  bugdet: 3\n  lam: .nan\n")
    with pytest.raises(ConfigError) as caught:
        load_recipe(path)
    head, *lines = str(caught.value).split("\n")
    assert head.endswith("typos.yaml: 5 problems:")
    assert lines[0].startswith("  - unknown key 'data.k11'; did you mean 'data.k1'?")
    assert lines[1].startswith("  - unknown key 'teacher.bugdet'; did you mean 'teacher.budget'?")
    assert sorted(lines[2:]) == ["  - data.k1: must be >= 1, got -3",
                                 "  - data.retriever: 'bm26' is not one of 'bm25', 'dense'; did you mean 'bm25'?",
                                 "  - teacher.lam: must be >= 0 or null, got nan"]
