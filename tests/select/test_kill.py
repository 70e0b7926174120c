"""SIGKILL drills for the select stage: a killed `purecover select`, rerun, ends with the file of an
uninterrupted run, byte for byte, with every qid once.

Each run is the command a user types (``python -m purecover select --set run_dir=...``) in its own
run_dir holding the shared tiny selector (a symlink) and a candidates.jsonl of `N_QUESTIONS`
questions (the demo questions repeated under new qids, so there are many batches to kill in). The
killed run is SIGKILLed as soon as its first batch is on disk; the torn-line drill then appends
half of the next record without a newline, as a crash in the middle of a write would leave it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.select.select_stage import BATCH_SIZE, SELECTIONS_FILE
from purecover.utils.io import read_jsonl
from tests.process_helpers import run_and_kill_when
from tests.run_dirs import new_run_dir

REPO = Path(__file__).resolve().parents[2]
COPIES = 8  # × the shared run's 10 questions: 80 questions, 10 batches


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def _command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "purecover", "select", "-q", "--log-level", "WARNING",
            "--set", f"run_dir={run_dir}", "--set", "student.dtype=float32", "--set", "eval.questions=all"]  # every qid: many batches


def _run(run_dir: Path) -> dict:
    """Run the select command to completion; returns the summary of select.run.json."""
    proc = subprocess.run(_command(run_dir), cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"purecover select failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads((run_dir / "select.run.json").read_text(encoding="utf-8"))["summary"]


def _line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def qids(selector_run) -> list[str]:
    rows = [rec for _, rec in read_jsonl(selector_run.run_path / "candidates.jsonl")]
    return [f"{rec['qid']}#{c}" for c in range(COPIES) for rec in rows]


@pytest.fixture(scope="module")
def make_run(selector_run, qids, tmp_path_factory):
    """`make_run(name)`: a fresh run_dir with the repeated candidates and the shared selector."""
    rows = [rec for _, rec in read_jsonl(selector_run.run_path / "candidates.jsonl")]
    text = "".join(json.dumps({**r, "qid": f"{r['qid']}#{c}"}, ensure_ascii=False) + "\n"
                   for c in range(COPIES) for r in rows)
    base = tmp_path_factory.mktemp("select_kill")

    def make(name: str) -> Path:
        run_dir = base / name
        new_run_dir(run_dir)
        (run_dir / "candidates.jsonl").write_text(text, encoding="utf-8")
        (run_dir / "selector").symlink_to(selector_run.run_path / "selector", target_is_directory=True)
        return run_dir

    assert len(qids) > 2 * BATCH_SIZE
    return make


@pytest.fixture(scope="module")
def reference(make_run, qids) -> bytes:
    """selections.jsonl of an uninterrupted run."""
    run_dir = make_run("uninterrupted")
    summary = _run(run_dir)
    assert summary["written"] == summary["questions"] == len(qids) and summary["repaired_lines"] == 0
    return (run_dir / SELECTIONS_FILE).read_bytes()


def _kill_after_first_batch(run_dir: Path, n_questions: int) -> int:
    """Start the select command, SIGKILL it once a whole batch is written; returns the complete lines left."""
    out = run_dir / SELECTIONS_FILE
    run_and_kill_when(_command(run_dir), lambda: _line_count(out) >= BATCH_SIZE, what="the select run",
                      cwd=REPO, env=_env(), poll=0.002)
    left = out.read_bytes()
    # One record is one write() call, which SIGKILL does not split: the file ends with a complete line.
    assert left.endswith(b"\n")
    n_left = left.count(b"\n")
    assert BATCH_SIZE <= n_left < n_questions, f"killed too late: {n_left} of {n_questions} records written"
    manifest = json.loads((run_dir / "select.run.json").read_text(encoding="utf-8"))
    assert manifest["summary"] == {"status": "running"}
    return n_left


def _assert_complete(run_dir: Path, reference: bytes, qids: list[str]) -> None:
    final = (run_dir / SELECTIONS_FILE).read_bytes()
    written = [json.loads(line)["qid"] for line in final.splitlines()]
    assert len(written) == len(set(written)) == len(qids), "records lost or duplicated"
    assert written == qids
    assert final == reference


@pytest.mark.slow
def test_sigkill_then_rerun_equals_uninterrupted(make_run, reference, qids):
    run_dir = make_run("killed")
    n_left = _kill_after_first_batch(run_dir, len(qids))
    assert reference.startswith((run_dir / SELECTIONS_FILE).read_bytes()), "records before the kill differ"

    summary = _run(run_dir)
    assert summary["status"] == "complete" and summary["questions"] == len(qids)
    assert summary["already_done"] == n_left and summary["written"] == len(qids) - n_left
    assert summary["repaired_lines"] == 0
    _assert_complete(run_dir, reference, qids)


@pytest.mark.slow
def test_sigkill_with_torn_last_line_is_repaired(make_run, reference, qids):
    run_dir = make_run("torn")
    n_left = _kill_after_first_batch(run_dir, len(qids))
    following = reference.split(b"\n")[n_left]  # the record the kill interrupted
    with (run_dir / SELECTIONS_FILE).open("ab") as fh:
        fh.write(following[: len(following) // 2])

    summary = _run(run_dir)
    assert summary["repaired_lines"] == 1
    assert summary["already_done"] == n_left and summary["written"] == len(qids) - n_left
    _assert_complete(run_dir, reference, qids)
