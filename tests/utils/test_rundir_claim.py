"""A run directory is new, empty or one purecover made: a folder of the user's is never written into."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.utils.rundir_claim import MARKER, RunDirRefusedError, claim_run_dir, protected_folders
from purecover.utils.rundir_lock import LOCK_FILE, run_dir_lock

REPO = Path(__file__).resolve().parents[2]


def test_a_new_folder_is_created_and_marked(tmp_path):
    run = tmp_path / "a" / "run"
    with run_dir_lock(run, "data"):
        pass
    assert (run / MARKER).is_file() and (run / LOCK_FILE).is_file()
    claim_run_dir(run)  # ours now: claimed again without a word


def test_an_empty_folder_is_marked(tmp_path):
    claim_run_dir(tmp_path)
    assert (tmp_path / MARKER).is_file()


def test_a_folder_of_the_users_is_refused_before_any_write(tmp_path):
    theirs = tmp_path / "candidates.jsonl"
    theirs.write_text("my own file\n")
    with pytest.raises(RunDirRefusedError) as err, run_dir_lock(tmp_path, "data"):
        pass
    message = str(err.value)
    assert str(tmp_path) in message and "'candidates.jsonl'" in message and f"touch '{tmp_path / MARKER}'" in message
    assert sorted(os.listdir(tmp_path)) == ["candidates.jsonl"] and theirs.read_text() == "my own file\n"


def test_the_marker_is_the_users_opt_in(tmp_path):
    (tmp_path / "candidates.jsonl").write_text("assembled by hand\n")
    (tmp_path / MARKER).touch()
    with run_dir_lock(tmp_path, "data"):
        pass


def test_a_run_directory_from_before_the_marker_is_still_ours(tmp_path):
    (tmp_path / "labels.jsonl").write_text("{}\n")
    (tmp_path / LOCK_FILE).write_text("")
    claim_run_dir(tmp_path)
    assert (tmp_path / MARKER).is_file()


def test_a_linked_marker_is_not_trusted(tmp_path):
    (tmp_path / "candidates.jsonl").write_text("mine\n")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.write_text("")
    (tmp_path / MARKER).symlink_to(elsewhere)
    with pytest.raises(RunDirRefusedError, match="not a regular file"):
        claim_run_dir(tmp_path)


def test_root_home_and_working_directory_are_never_run_directories(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for folder, what in (("/", "the file system root"), (str(tmp_path / "home"), "the home directory"),
                         (".", "the working directory"), (str(tmp_path), "a folder above")):
        with pytest.raises(RunDirRefusedError, match=what):
            claim_run_dir(folder)
    assert not any(p.name in (MARKER, LOCK_FILE) for p in work.iterdir())  # empty, and still not marked
    assert Path("/").resolve() in protected_folders()


def test_the_data_stage_refuses_root_and_a_users_folder(tmp_path):
    """The issue's repro: ``purecover data ... --set run_dir=/`` wrote /candidates.jsonl and exited 0."""
    theirs = tmp_path / "mine"
    theirs.mkdir()
    (theirs / "candidates.jsonl").write_text("mine\n")
    for run_dir in ("/", str(theirs)):
        before = sorted(os.listdir(run_dir))
        done = subprocess.run([sys.executable, "-m", "purecover", "data", "configs/recipes/demo_cpu.yaml", "--set",
                               f"run_dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stderr
        assert f"run_dir '{run_dir}'" in done.stderr and "error" in done.stderr
        assert sorted(os.listdir(run_dir)) == before
    assert (theirs / "candidates.jsonl").read_text() == "mine\n"


def test_a_script_marks_the_folder_it_assembles(tmp_path):
    from purecover.utils.rundir_claim import mark_run_dir

    run = mark_run_dir(tmp_path / "assembled")
    (run / "candidates.jsonl").write_text("made by a script\n")
    with run_dir_lock(run, "label"):
        pass
    assert (run / "candidates.jsonl").read_text() == "made by a script\n"
    with pytest.raises(RunDirRefusedError, match="the file system root"):
        mark_run_dir("/")
