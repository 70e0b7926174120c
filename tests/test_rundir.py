"""RunDir: file names, the running → complete manifest lifecycle, the output and input checks, the status."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from purecover.config import load_recipe
from purecover.records import OutputDescription, StageSummary
from purecover.rundir import FILES, RunDir, describe_change, describe_output


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
    a = describe_output(tmp_path / "a.jsonl")
    assert a.lines == 2 and a.sha256.startswith("sha256:") and a.to_json_dict() == {"lines": 2, "sha256": a.sha256}
    b = describe_output(tmp_path / "b.json")
    assert b.bytes == 2 and b.sha256 == "sha256:" + hashlib.sha256(b"{}").hexdigest()
    assert describe_output(tmp_path / "d").to_json_dict() == {
        "files": 1, "sizes": {"e/f": 1}, "digests": {"e/f": "sha256:" + hashlib.sha256(b"x").hexdigest()}}
    assert describe_output(tmp_path / "nothing") is None


def test_a_reordered_jsonl_is_noticed_though_its_lines_are_the_same(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"qid": "a"}\n{"qid": "b"}\n')
    before = describe_output(path)
    path.write_text('{"qid": "b"}\n{"qid": "a"}\n')  # same size, same line count
    assert describe_change("c.jsonl", before, describe_output(path)) == \
        "c.jsonl was changed since it was recorded (content hash differs)"
    # manifests written before content hashes existed are compared on what they recorded
    assert describe_change("c.jsonl", OutputDescription(lines=2), describe_output(path)) is None


def test_a_file_missing_from_a_directory_is_named(tmp_path):
    d = tmp_path / "final"
    d.mkdir()
    (d / "adapter_model.safetensors").write_bytes(b"w" * 10)
    (d / "adapter_config.json").write_text("{}")
    before = describe_output(d)
    (d / "adapter_model.safetensors").unlink()
    assert describe_change("final", before, describe_output(d)) == "final/adapter_model.safetensors is missing"


def test_lifecycle_running_then_complete(run):
    recipe, rd = run
    rd.begin("data", recipe, "h1")
    assert rd.manifest("data").summary.to_json_dict() == {"status": "running"}
    assert rd.completed("data", "h1") is None
    rd.path_of("candidates").write_text('{"qid": "a"}\n{"qid": "b"}\n')
    summary = rd.complete("data", recipe, "h1", StageSummary(questions=2))
    manifest = rd.manifest("data")
    assert summary.to_json_dict() == {"status": "complete", "questions": 2} == manifest.summary.to_json_dict()
    assert manifest.outputs["candidates.jsonl"].lines == 2 and manifest.config_hash == "h1"
    assert manifest.recipe["run_dir"] == recipe.run_dir and manifest.versions
    assert rd.completed("data", "h1") == summary
    assert rd.completed("data", "h2") is None  # another configuration is never "complete"


def test_complete_is_not_trusted_when_outputs_changed(run):
    recipe, rd = run
    out = rd.path_of("candidates")
    out.write_text('{"qid": "a"}\n')
    rd.complete("data", recipe, "h", StageSummary())
    out.write_text('{"qid": "a"}\n{"qid": "a"}\n')  # e.g. a second writer appended
    assert rd.output_problem("data") == "candidates.jsonl holds 2 lines, its manifest recorded 1"
    assert rd.completed("data", "h") is None
    out.unlink()
    assert rd.output_problem("data") == "candidates.jsonl is missing"


def test_status_refuses_outputs_of_another_configuration(run):
    recipe, rd = run
    assert rd.status("label", "h1").action == "run"  # nothing yet
    rd.begin("label", recipe, "h1")
    assert rd.status("label", "h2").action == "run"  # a manifest but no output yet: nothing to mix
    rd.path_of("labels").write_text('{"qid": "a"}\n')
    assert rd.status("label", "h1").action == "resume"
    blocked = rd.status("label", "h2")
    assert blocked.action == "blocked"
    assert blocked.reason.startswith("labels.jsonl was made with a different data/teacher configuration (hash h1, "
                                     "now h2); use another run_dir or delete labels.jsonl")


def test_status_after_complete_skips_redoes_and_refuses_changed_inputs(run):
    recipe, rd = run
    rd.path_of("labels").write_text('{"qid": "a"}\n')
    cands = rd.path_of("candidates")
    cands.write_text('{"qid": "a", "docs": [1, 2]}\n')
    inputs = {"candidates.jsonl": describe_output(cands)}
    rd.complete("label", recipe, "h", StageSummary(), inputs=inputs)
    assert rd.status("label", "h", inputs).action == "skip"
    cands.write_text('{"qid": "a", "docs": [2, 1]}\n')  # reordered after labelling
    changed = rd.status("label", "h", {"candidates.jsonl": describe_output(cands)})
    assert changed.action == "blocked" and "candidates.jsonl was changed" in changed.reason
    assert rd.status("label", "h", {"candidates.jsonl": None}).action == "skip"  # missing: made again upstream
    rd.path_of("labels").write_text('{"qid": "a", "edited": 1}\n')
    assert rd.status("label", "h", inputs).action == "redo"
    moved = rd.set_aside("label")
    assert len(moved) == 1 and moved[0].name.startswith("labels.jsonl.damaged-")
    assert moved[0].read_text() == '{"qid": "a", "edited": 1}\n' and not rd.path_of("labels").exists()


def test_record_outputs_rerecords_a_complete_stage(run):
    recipe, rd = run
    sel = rd.path_of("selector")
    sel.mkdir()
    (sel / "README.md").write_text("card")
    rd.complete("export", recipe, "h", StageSummary())
    (sel / "README.md").write_text("a longer card")
    assert rd.status("export", "h").action == "redo"
    rd.record_outputs("export")
    assert rd.status("export", "h").action == "skip"


def test_manifest_writes_are_atomic_json(run):
    recipe, rd = run
    rd.begin("export", recipe, "h")
    text = rd.manifest_path("export").read_text()
    assert json.loads(text)["stage"] == "export" and not list(rd.path.glob(".export.run.json.*"))
    rd.manifest_path("export").write_text("{not json")
    assert rd.manifest("export") is None


def test_the_test_set_has_its_own_directory_apart_from_evaluates_outputs(run):
    _, rd = run
    assert rd.test_set().path == rd.path / "test" != rd.path_of("eval")
    # a run made before the test set had its own directory: its test set in run_dir/eval is still used
    (rd.path / "eval").mkdir()
    (rd.path / "eval" / "data.run.json").write_text("{}")
    assert rd.test_set().path == rd.path / "eval"
    (rd.path / "test").mkdir()  # once run_dir/test exists, it is the test set
    assert rd.test_set().path == rd.path / "test"


def test_an_output_its_manifest_did_not_record_is_not_damaged(run):
    """A manifest written by an earlier version recorded its outputs under other names (export recorded
    selector/selector_config.json, not selector/): the stage is not redone for that."""
    recipe, rd = run
    sel = rd.path_of("selector")
    sel.mkdir()
    (sel / "selector_config.json").write_text("{}")
    rd.complete("export", recipe, "h", StageSummary())
    manifest = rd.manifest("export").to_json_dict()
    manifest["outputs"] = {"selector/selector_config.json": {"bytes": 2}}
    rd.manifest_path("export").write_text(json.dumps(manifest))
    assert rd.status("export", "h").action == "skip"
    shutil.rmtree(sel)
    assert rd.status("export", "h").action == "redo"  # missing is still missing
