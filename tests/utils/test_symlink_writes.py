"""Nothing is written through a symbolic link: in-place files refuse one, atomic writes replace it."""

from __future__ import annotations

import errno
import json
import os
import re

import pytest

from purecover.utils.io import (
    ResumableJsonl,
    SymlinkError,
    atomic_write_json,
    atomic_write_text,
    open_in_place,
    write_jsonl_atomic,
)
from purecover.utils.rundir_lock import LOCK_FILE, run_dir_lock
from tests.run_dirs import new_run_dir

ADVICE = "is a symbolic link; purecover never writes through links: replace it with a regular file or remove it"


@pytest.fixture
def elsewhere(tmp_path):
    """A directory outside the run directory holding files a link may point at."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.mark.parametrize("content", [b"one line, no newline", b'{"qid": "q1"}\n', b"not json\n"])
def test_symlinked_jsonl_output_is_refused_and_its_target_untouched(tmp_path, elsewhere, content):
    target = elsewhere / "precious.txt"
    target.write_bytes(content)
    run = tmp_path / "run"
    run.mkdir()
    link = run / "candidates.jsonl"
    link.symlink_to(target)
    with pytest.raises(SymlinkError, match=re.escape(f"{link} {ADVICE}")):
        ResumableJsonl(link)
    assert target.read_bytes() == content
    assert link.is_symlink()


def test_dangling_symlinked_jsonl_output_creates_nothing(tmp_path, elsewhere):
    target = elsewhere / "would-be-created.jsonl"
    link = tmp_path / "labels.jsonl"
    link.symlink_to(target)
    with pytest.raises(SymlinkError, match=re.escape(str(link))):
        ResumableJsonl(link)
    assert not target.exists()


def test_open_in_place_refuses_a_link_at_the_open_itself(tmp_path, elsewhere):
    """The refusal comes from O_NOFOLLOW on the open, so a link created after any check is refused too."""
    target = elsewhere / "t"
    target.write_bytes(b"x")
    link = tmp_path / "f"
    link.symlink_to(target)
    with pytest.raises(SymlinkError) as err:
        open_in_place(link, os.O_RDWR | os.O_APPEND)
    if hasattr(os, "O_NOFOLLOW"):
        assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ELOOP
    assert target.read_bytes() == b"x"


def test_open_in_place_opens_a_regular_file(tmp_path):
    path = tmp_path / "f"
    fd = open_in_place(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"ok")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"ok"


def test_symlink_error_is_an_oserror_naming_the_path(tmp_path):
    err = SymlinkError(tmp_path / "x")
    assert isinstance(err, OSError) and err.filename == str(tmp_path / "x")
    assert str(err) == f"{tmp_path / 'x'} {ADVICE}"


def test_resumable_jsonl_still_resumes_a_regular_file(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"qid": "a"}\n{"qid": "b"')
    with ResumableJsonl(path) as out:
        assert out.done == {"a"} and out.repaired == 1
        out.write({"qid": "b"})
    assert path.read_bytes() == b'{"qid": "a"}\n{"qid": "b"}\n'


@pytest.mark.parametrize("content", [b"one line, no newline", b'{"pid": 1}\n'])
def test_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path, elsewhere, content):
    target = elsewhere / "precious.txt"
    target.write_bytes(content)
    run = new_run_dir(tmp_path / "run")  # ours: what is tested is the link at the lock file
    link = run / LOCK_FILE
    link.symlink_to(target)
    with pytest.raises(SymlinkError, match=re.escape(f"{link} {ADVICE}")), run_dir_lock(run, "data"):
        pytest.fail("the lock must not be taken through a link")
    assert target.read_bytes() == content


def test_dangling_symlinked_lock_file_creates_nothing(tmp_path, elsewhere):
    run = new_run_dir(tmp_path / "run")
    target = elsewhere / "created-by-mistake"
    (run / LOCK_FILE).symlink_to(target)
    with pytest.raises(SymlinkError), run_dir_lock(run, "data"):
        pass
    assert not target.exists()


def test_lock_file_is_still_written_in_a_plain_run_dir(tmp_path):
    with run_dir_lock(tmp_path, "label"):
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["stage"] == "label" and holder["pid"] == os.getpid()


@pytest.mark.parametrize("write", [
    lambda p: atomic_write_text(p, "new\n"),
    lambda p: atomic_write_json(p, {"new": 1}),
    lambda p: write_jsonl_atomic(p, [{"qid": "new"}]),
], ids=["text", "json", "jsonl"])
def test_atomic_writes_replace_a_link_and_leave_its_target_alone(tmp_path, elsewhere, write):
    target = elsewhere / "precious.txt"
    target.write_bytes(b"one line, no newline")
    link = tmp_path / "summary.json"
    link.symlink_to(target)
    write(link)
    assert target.read_bytes() == b"one line, no newline"
    assert not link.is_symlink() and link.is_file()
    assert "new" in link.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "summary.json"]  # no temp file left
