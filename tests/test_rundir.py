"""RunDir: file names, the running → complete manifest lifecycle, the output check, the config guard."""

from __future__ import annotations

import json

import pytest

from purecover.config import load_recipe
from purecover.rundir import FILES, RunDir, describe_output


@pytest.fixture
def run(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}"])
    rd = RunDir.of(recipe)
    rd.path.mkdir()
    return recipe, rd


def test_paths_come_from_one_table(run):
    _, rd = run
    assert rd.path_of("labels") == rd.path / "labels.jsonl" == rd.path / FILES["labels"]
    assert rd.outputs("train") == [rd.path / "checkpoints" / "final"]
    with pytest.raises(KeyError, match="unknown run-directory file 'lables'"):
        rd.path_of("lables")


def test_describe_output(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"qid": 1}\n{"qid": 2}\n{"qid": 3')  # a torn last line is not counted
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("x")
    assert describe_output(tmp_path / "a.jsonl") == {"lines": 2}
    assert describe_output(tmp_path / "b.json") == {"bytes": 2}
    assert describe_output(tmp_path / "d") == {"files": 1}
    assert describe_output(tmp_path / "nothing") is None


def test_lifecycle_running_then_complete(run):
    recipe, rd = run
    rd.begin("data", recipe, "h1")
    assert rd.manifest("data")["summary"] == {"status": "running"}
    assert rd.completed("data", "h1") is None
    rd.path_of("candidates").write_text('{"qid": "a"}\n{"qid": "b"}\n')
    summary = rd.complete("data", recipe, "h1", {"questions": 2})
    manifest = rd.manifest("data")
    assert summary == {"questions": 2, "status": "complete"} == manifest["summary"]
    assert manifest["outputs"] == {"candidates.jsonl": {"lines": 2}} and manifest["config_hash"] == "h1"
    assert manifest["recipe"]["run_dir"] == recipe.run_dir and "versions" in manifest
    assert rd.completed("data", "h1") == summary
    assert rd.completed("data", "h2") is None  # another configuration is never "complete"


def test_complete_is_not_trusted_when_outputs_changed(run):
    recipe, rd = run
    out = rd.path_of("candidates")
    out.write_text('{"qid": "a"}\n')
    rd.complete("data", recipe, "h", {})
    out.write_text('{"qid": "a"}\n{"qid": "a"}\n')  # e.g. a second writer appended
    assert rd.output_problem("data") == "candidates.jsonl holds 2 lines, its manifest recorded 1"
    assert rd.completed("data", "h") is None
    out.unlink()
    assert rd.output_problem("data") == "candidates.jsonl is missing"


def test_guard_refuses_outputs_of_another_configuration(run):
    recipe, rd = run
    rd.guard("label", "h1", "delete them")  # nothing yet: nothing to check
    rd.begin("label", recipe, "h1")
    rd.guard("label", "h2", "delete them")  # a manifest but no output yet
    rd.path_of("labels").write_text('{"qid": "a"}\n')
    rd.guard("label", "h1", "delete them")
    with pytest.raises(RuntimeError, match=r"labels\.jsonl was made with a different data/teacher configuration "
                                           r"\(hash h1, now h2\); delete them"):
        rd.guard("label", "h2", "delete them")


def test_manifest_writes_are_atomic_json(run):
    recipe, rd = run
    rd.begin("export", recipe, "h")
    text = rd.manifest_path("export").read_text()
    assert json.loads(text)["stage"] == "export" and not list(rd.path.glob(".export.run.json.*"))
    rd.manifest_path("export").write_text("{not json")
    assert rd.manifest("export") is None
