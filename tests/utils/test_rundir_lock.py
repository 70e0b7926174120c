"""One writer per run directory: the lock refuses a second process, survives a killed holder, and lets the
ranks of one launch through."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from purecover.utils import rundir_lock
from purecover.utils.rundir_lock import LOCK_FILE, RunDirBusyError, run_dir_lock
from tests.process_helpers import purecover_holding_the_lock

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from purecover.utils.rundir_lock import run_dir_lock
with run_dir_lock(sys.argv[1], "label"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def hold_in_child(run_dir: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_process_is_refused_with_the_holder_named(tmp_path):
    child = hold_in_child(tmp_path)
    try:
        with pytest.raises(RunDirBusyError) as err, run_dir_lock(tmp_path, "train"):
            pass
        message = str(err.value)
        assert f"pid {child.pid} on {socket.gethostname()}" in message and "`purecover label`" in message
        assert str(tmp_path) in message and "another run_dir" in message
    finally:
        child.communicate("\n", timeout=30)
    with run_dir_lock(tmp_path, "train"):  # released when the holder finished
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    child = hold_in_child(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == child.pid  # the record stays behind
    with run_dir_lock(tmp_path, "data"):
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["stage"] == "data"


def test_reentrant_within_a_process(tmp_path):
    with run_dir_lock(tmp_path, "pipeline"), run_dir_lock(tmp_path / ".", "label"):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["stage"] == "pipeline"
    child = hold_in_child(tmp_path)  # fully released afterwards
    child.communicate("\n", timeout=30)


def test_non_zero_ranks_wait_for_their_own_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-a")
    monkeypatch.setattr(rundir_lock, "RANK_WAIT_SECONDS", 0.5)
    holder = {"pid": 1, "host": "h", "stage": "label", "launch": None, "started": "2024-01-01T00:00:00+00:00"}
    (tmp_path / LOCK_FILE).write_text(json.dumps({**holder, "launch": "launch-b"}))
    with pytest.raises(RunDirBusyError, match="rank 0 of this launch did not take"), run_dir_lock(tmp_path, "label"):
        pass
    (tmp_path / LOCK_FILE).write_text(json.dumps({**holder, "launch": "launch-a"}))
    with run_dir_lock(tmp_path, "label"):
        pass  # rank 0 of this launch holds it: go ahead without locking


@pytest.mark.slow
def test_two_label_processes_on_one_run_dir(tmp_path):
    from purecover.config import load_recipe
    from purecover.data.data_stage import run_data_stage

    # oracle steps + the embedding estimator: no teacher model is loaded
    args = [f"run_dir={tmp_path}", "data.path=demo", "data.k1=5", "teacher.model=unused",
            "teacher.steps=oracle", "teacher.estimator=embedding", "teacher.batch_size=2"]
    run_data_stage(load_recipe(None, args), show_progress=False)
    cmd = [sys.executable, "-m", "purecover", "label", "-q", *(x for a in args for x in ("--set", a))]
    env, release = {**os.environ, "HF_HUB_OFFLINE": "1"}, tmp_path.parent / f"{tmp_path.name}.release"
    first = subprocess.Popen(purecover_holding_the_lock(cmd[3:], release), cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lock = tmp_path / LOCK_FILE
        while not (lock.is_file() and lock.read_text() and json.loads(lock.read_text()).get("pid") == first.pid):
            assert time.monotonic() < deadline and first.poll() is None, "the first never locked"
            time.sleep(0.05)  # the first holds the lock until released
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        release.touch()
        _out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert second.returncode == 1
    assert f"is in use by `purecover label` (pid {first.pid}" in second.stderr
    lines = (tmp_path / "labels.jsonl").read_text().splitlines()
    assert len(lines) == 36 and len({json.loads(line)["qid"] for line in lines}) == 36


ENTER = """
import sys
from purecover.utils.rundir_lock import RunDirBusyError, run_dir_lock
try:
    with run_dir_lock(sys.argv[1], "train"), run_dir_lock(sys.argv[1], "train"):
        print("entered", flush=True)
except RunDirBusyError as exc:
    print("refused:", exc, flush=True)
"""


def enter_in_child(run_dir: Path, env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PURECOVER_LOCK_")}
    proc = subprocess.run([sys.executable, "-c", ENTER, str(run_dir)], cwd=REPO, env={**base, **env},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_handover_lets_the_launched_child_in_and_no_one_else(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    run = tmp_path / "run"
    with run_dir_lock(run, "pipeline"):
        with rundir_lock.handover(run) as env:
            assert set(env) == {rundir_lock.HANDOVER_FILE_ENV, rundir_lock.HANDOVER_TOKEN_ENV}
            record = json.loads((run / LOCK_FILE).read_text())
            assert record["pid"] == os.getpid() and record["stage"] == "pipeline" and list(record)[-1] == "handover"
            assert env[rundir_lock.HANDOVER_TOKEN_ENV] not in (run / LOCK_FILE).read_text()  # only its hash
            assert enter_in_child(run, env) == "entered"  # the child of the holder (re-entrant there too)
            assert enter_in_child(run, {}).startswith("refused:")  # an unrelated process, meanwhile
            forged = {**env, rundir_lock.HANDOVER_TOKEN_ENV: "0" * 64}
            assert enter_in_child(run, forged).startswith("refused:")
            assert enter_in_child(run, {**env, rundir_lock.HANDOVER_FILE_ENV: str(other / LOCK_FILE)}) \
                .startswith("refused:")  # a token for another run directory
        after = (run / LOCK_FILE).read_text()
        assert list(json.loads(after)) == ["pid", "host", "stage", "launch", "started"]  # as before the hand-over
        assert after == json.dumps(json.loads(after))  # one line, json.dumps' separators
        assert enter_in_child(run, env).startswith("refused:")  # the token dies with the hand-over
    with pytest.raises(RuntimeError, match="needs the run-directory lock"), rundir_lock.handover(run):
        pass
