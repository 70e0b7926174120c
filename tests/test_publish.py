"""Sharing through a local stand-in for the Hub's HTTP API (tests/hub_standin.py): pushing a selector folder
(bytes equal, card metadata, a repeated push recognised, no token in the record or output) and publishing
labels as a dataset (to disk and to the Hub as parquet, every row kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from purecover.cli import build_parser, main
from purecover.publish import build_dataset
from purecover.utils.hub import push_folder, read_card_metadata
from tests.hub_standin import hub  # noqa: F401  (fixture)

TOKEN = "hf_standin_secret_token"
LABELS = [
    {"qid": "q1", "selected": [2, 0], "gains": [0.5, 0.1], "W": [[0.2, None], [0.8, 0.1]], "status": "ok",
     "reason": None, "teacher": {"model": "t", "lam": 0.3}},
    {"qid": "q2", "selected": [1], "gains": [0.4], "W": [[1.0]], "status": "fallback", "reason": "no gain",
     "teacher": {"model": "t", "lam": 0.3}, "ratings": [[3, 5]]},
]


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LABELS))
    (run / "data.run.json").write_text(json.dumps({"recipe": {"data": {"dataset": "hotpotqa",
                                                                        "path": "hotpotqa/hotpot_qa"}}}))
    (run / "label.run.json").write_text(json.dumps({"recipe": {"teacher": {"model": "t", "lam": 0.3}}}))
    return run


def test_push_folder_mirrors_the_folder_and_recognises_a_repeat(hub, tmp_path, capsys):  # noqa: F811
    folder = tmp_path / "selector"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 8)
    (folder / "README.md").write_text("---\nbase_model: org/base\nlicense: apache-2.0\ndatasets:\n- a/b\n---\n# x\n")
    record = tmp_path / "export.push.json"
    first = push_folder(folder, "me/sel", record=record, private=True)
    files = hub.files("model", "me/sel")
    assert {p: b for p, b in files.items() if p != ".gitattributes"} == {
        p.name: p.read_bytes() for p in folder.iterdir()}
    readme = tmp_path / "pushed.md"
    readme.write_bytes(files["README.md"])
    meta = read_card_metadata(readme)
    assert (meta["base_model"], meta["license"], meta["datasets"]) == ("org/base", "apache-2.0", ["a/b"])
    assert first["already_pushed"] is False and first["commit"] == hub.commits[-1]["sha"]
    assert first["url"] == f"{hub.endpoint}/me/sel" and hub.repos[("model", "me/sel")]["private"]
    n = len(hub.commits)
    again = push_folder(folder, "me/sel", record=record)
    assert again["already_pushed"] is True and len(hub.commits) == n  # nothing sent
    (folder / "model.safetensors").unlink()  # a changed export: pushed again, stale remote file removed
    (folder / "adapter.safetensors").write_bytes(b"new")
    third = push_folder(folder, "me/sel", record=record, revision="v2")
    assert third["already_pushed"] is False and len(hub.commits) == n + 1
    assert set(hub.files("model", "me/sel", "v2")) == {".gitattributes", "README.md", "adapter.safetensors"}
    assert third["url"].endswith("/me/sel/tree/v2")
    out = capsys.readouterr()
    assert TOKEN not in record.read_text() + out.out + out.err


def test_publish_labels_to_disk_and_to_the_hub(hub, tmp_path, capsys):  # noqa: F811
    import datasets
    import pyarrow.parquet as pq

    run = _run(tmp_path)
    assert main(["publish", str(run), "--what", "labels", "--to-disk", str(tmp_path / "ds")]) == 0
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds.num_rows == 2 and ds[0]["W"] == [[0.2, None], [0.8, 0.1]] and ds[0]["ratings"] is None
    assert ds[1]["teacher"] == {"model": "t", "lam": 0.3} and ds[1]["ratings"] == [[3, 5]]
    assert read_card_metadata(tmp_path / "ds" / "README.md")["license"] == "cc-by-sa-4.0"

    assert main(["publish", str(run), "--what", "labels", "--push-to-hub", "me/labels"]) == 0
    files = hub.files("dataset", "me/labels")
    parquet = tmp_path / "pushed.parquet"
    parquet.write_bytes(files["data/train-00000-of-00001.parquet"])
    table = pq.read_table(parquet)
    assert table.column("qid").to_pylist() == ["q1", "q2"] and table.column("W").to_pylist()[0] == [[0.2, None],
                                                                                                   [0.8, 0.1]]
    card = tmp_path / "card.md"
    card.write_bytes(files["README.md"])
    meta = read_card_metadata(card)
    assert meta["license"] == "cc-by-sa-4.0" and meta["source_datasets"] == ["hotpotqa/hotpot_qa"]
    assert "`W` (" in card.read_text() and "lam: 0.3" in card.read_text()
    n = len(hub.commits)
    assert main(["publish", str(run), "--what", "labels", "--push-to-hub", "me/labels"]) == 0
    assert len(hub.commits) == n and "already pushed: 2 labels rows" in capsys.readouterr().out


def test_bad_records_name_the_file_and_field(tmp_path):
    bad = tmp_path / "labels.jsonl"
    bad.write_text(json.dumps({"qid": "a", "answer": "x"}) + "\n" + json.dumps({"qid": "b", "answer": [1]}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl: field 'answer'"):
        build_dataset(bad)


def test_export_has_push_arguments_and_other_stages_do_not():
    parser = build_parser()
    args = parser.parse_args(["export", "r.yaml", "--push-to-hub", "me/sel", "--private", "--revision", "b",
                              "--commit-message", "m"])
    assert (args.push_to_hub, args.private, args.revision, args.commit_message) == ("me/sel", True, "b", "m")
    with pytest.raises(SystemExit):
        parser.parse_args(["select", "r.yaml", "--push-to-hub", "me/sel"])


def test_export_push_to_hub_end_to_end(hub, tmp_path, tmp_path_factory, sample_dir, capsys):  # noqa: F811
    """`purecover export RECIPE --push-to-hub REPO` on a real trained tiny run: the export stage is complete
    (skipped), the card is refreshed with the QA metrics written since, the pushed files equal
    run_dir/selector byte for byte, and a second command pushes nothing."""
    import dataclasses
    import shutil

    from purecover.config import dump_recipe_yaml
    from tests.models.conftest import exported_run

    source = exported_run(tmp_path_factory, sample_dir)
    run = tmp_path / "run"
    shutil.copytree(source.run_path, run)
    (run / "eval").mkdir(exist_ok=True)
    cp = {"coverage": None, "purity": None, "n_coverage": 0, "n_purity": 0}
    (run / "eval" / "metrics.json").write_text(json.dumps({  # a metrics.json as the evaluate stage writes it
        "dataset": "hotpotqa", "run_dir": str(run), "questions": 3, "question_source": "test set",
        "generator": "tiny", "backend": "hf", "max_new_tokens": 8, "budgets": [5], "table_budget": 5,
        "methods": {"student": "student"}, "fallbacks": {"student": 0},
        "results": {"student": {"5": {"n": 3, "em": 0.25, "f1": 0.5, "acc": 0.75, "mean_k": 2.0, "answer": cp,
                                      "supporting": cp, "prompt_tokens": 50.0, "completion_tokens": 2.0}}},
        "versions": {"python": "3"}, "recipe": {}}))
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(dump_recipe_yaml(dataclasses.replace(source, run_dir=str(run))))
    before = (run / "selector" / "README.md").read_text()
    assert main(["export", str(recipe_file), "--push-to-hub", "me/selector"]) == 0
    out = capsys.readouterr().out
    assert f"pushed: {hub.endpoint}/me/selector" in out
    card = (run / "selector" / "README.md").read_text()
    assert card != before and "| student | 25.00 | 50.00 | 75.00 |" in card  # refreshed with the QA table
    files = hub.files("model", "me/selector")
    local = {p.name: p.read_bytes() for p in (run / "selector").iterdir() if p.is_file()}
    assert {p: b for p, b in files.items() if p != ".gitattributes"} == local
    meta = read_card_metadata(run / "selector" / "README.md")
    assert meta["base_model"] == json.loads(local["selector_config.json"])["base_model"]
    record = json.loads((run / "export.push.json").read_text())
    assert record["repo_id"] == "me/selector" and TOKEN not in json.dumps(record)
    n = len(hub.commits)
    assert main(["export", str(recipe_file), "--push-to-hub", "me/selector"]) == 0
    assert "already pushed" in capsys.readouterr().out and len(hub.commits) == n


# --------------------------------------------------------------------------- --to-disk DIR: what may be replaced


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in folder.rglob("*")}


def _publish_to(run: Path, what: str, target: Path) -> int:
    return main(["publish", str(run), "--what", what, "--to-disk", str(target)])


def test_another_run_directory_is_refused_and_left_byte_identical(tmp_path, capsys):
    run = _run(tmp_path)
    other = tmp_path / "other_run"
    (other / "checkpoints" / "final").mkdir(parents=True)
    (other / "checkpoints" / "final" / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (other / "selector").mkdir()
    (other / "selector" / "selector_config.json").write_text('{"k1": 6}')
    (other / "labels.jsonl").write_text(json.dumps(LABELS[0]) + "\n")
    before = _snapshot(other)
    assert _publish_to(run, "labels", other) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--to-disk {other} is not empty and not a purecover publish output" in err
    assert "checkpoints/" in err and "selector/" in err
    assert _snapshot(other) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other_run", "run"]  # nothing written beside it either


def test_a_folder_with_a_user_file_is_refused(tmp_path, capsys):
    run = _run(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.txt").write_text("chapter 1")
    assert _publish_to(run, "labels", folder) == 1
    assert "thesis.txt" in capsys.readouterr().err
    assert _snapshot(folder) == {"thesis.txt": b"chapter 1"}
    # A user's file added to an earlier publish output makes it the user's folder too.
    ds = tmp_path / "ds"
    assert _publish_to(run, "labels", ds) == 0
    (ds / "notes.txt").write_text("mine")
    assert _publish_to(run, "labels", ds) == 1
    assert "files purecover did not write" in capsys.readouterr().err and (ds / "notes.txt").read_text() == "mine"


def test_republishing_the_same_kind_replaces_the_earlier_publish(tmp_path):
    import datasets

    from purecover.publish import PUBLISH_MARKER

    run = _run(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _publish_to(run, "labels", empty) == 0  # an empty folder may be used
    assert datasets.load_from_disk(str(empty)).num_rows == 2
    ds = tmp_path / "ds"
    assert _publish_to(run, "labels", ds) == 0
    marker = json.loads((ds / PUBLISH_MARKER).read_text())
    assert marker["what"] == "labels" and marker["run_dir"] == str(run.resolve()) and marker["rows"] == 2
    with (run / "labels.jsonl").open("a") as fh:
        fh.write(json.dumps({"qid": "q3", "selected": [0], "status": "ok"}) + "\n")
    assert _publish_to(run, "labels", ds) == 0
    assert datasets.load_from_disk(str(ds))["qid"] == ["q1", "q2", "q3"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary or old copy left


def test_publishing_another_kind_onto_an_earlier_publish_is_refused(tmp_path, capsys):
    run = _run(tmp_path)
    (run / "candidates.jsonl").write_text(json.dumps({"qid": "q1", "question": "?", "docs": []}) + "\n")
    ds = tmp_path / "ds"
    assert _publish_to(run, "labels", ds) == 0
    before = _snapshot(ds)
    capsys.readouterr()
    assert _publish_to(run, "candidates", ds) == 1
    err = capsys.readouterr().err
    assert f"--to-disk {ds} holds the published labels of {run.resolve()}, not candidates" in err
    assert _snapshot(ds) == before


def test_a_file_or_a_link_as_target_is_refused(tmp_path, capsys):
    run = _run(tmp_path)
    file = tmp_path / "report.txt"
    file.write_text("keep")
    assert _publish_to(run, "labels", file) == 1
    assert "is a file, not a folder" in capsys.readouterr().err and file.read_text() == "keep"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    assert _publish_to(run, "labels", link) == 1
    assert "symbolic link" in capsys.readouterr().err and not any(elsewhere.iterdir()) and link.is_symlink()
