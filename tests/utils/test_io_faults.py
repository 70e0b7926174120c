"""Fault drills for the output files: unwritable output directories and full disks, also as root.

Root can write into any directory whatever its mode, so unwritable locations are made in ways
permissions do not enter: a run_dir path going through a regular file (always) and a read-only
tmpfs mount (when this process may mount). A full disk is made three ways: a fake low-level write
that fails with ENOSPC half-way through a record (always), a real ENOSPC from /dev/full (always),
and a real 64 KiB tmpfs filled by the data stage (when mounting is permitted).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.utils import io
from purecover.utils.io import DiskFullError, ResumableJsonl, atomic_write_json, atomic_write_text

DEMO = str(Path(__file__).resolve().parents[2] / "configs" / "recipes" / "demo_cpu.yaml")
# The data stage on the demo set without a retrieval index: only data.run.json and candidates.jsonl.
DATA_SETS = ["data.corpus=per_question"]  # all 36 questions: ~160 KB of candidates


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _cli_error(capsys: pytest.CaptureFixture[str], argv: list[str], stage: str) -> str:
    """Run the CLI, expect exit code 1 and a single `purecover STAGE: error: ...` line; return that line."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"purecover {stage}: error: "), err
    return lines[0]


def _data_argv(run_dir: Path) -> list[str]:
    return ["data", DEMO, "-q", "--log-level", "ERROR", "--set", f"run_dir={run_dir}",
            *(x for s in DATA_SETS for x in ("--set", s))]


# --- mounts (skipped where this process may not mount) ---------------------------------------------

@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """`tmpfs(name, "size=64k", ...)` mounts a fresh tmpfs at tmp_path/name; unmounted at teardown."""
    mounted: list[Path] = []

    def mount(name: str, *options: str) -> Path:
        if shutil.which("mount") is None:
            pytest.skip("no `mount` command")
        where = tmp_path / name
        where.mkdir()
        opts = ",".join(("mode=0755", *options))
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root outside a locked-down container): "
                        f"{(proc.stderr.strip() or str(proc.returncode)).splitlines()[0]}")
        mounted.append(where)
        return where

    def remount(where: Path, *options: str) -> None:
        subprocess.run(["mount", "-o", ",".join(("remount", *options)), str(where)], check=True)

    mount.remount = remount  # type: ignore[attr-defined]
    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


# --- unwritable output directory ------------------------------------------------------------------

def test_output_path_through_a_file_names_the_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "sub"
    message = f"cannot create output directory '{target}': '{blocker}' is a file, not a directory"
    with pytest.raises(OSError) as err:
        atomic_write_text(target / "f.json", "x")
    assert str(err.value) == message
    with pytest.raises(OSError) as err:
        ResumableJsonl(target / "deeper" / "out.jsonl")
    assert f"'{blocker}' is a file, not a directory" in str(err.value)


def test_cli_unwritable_run_dir_is_one_error_line(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    line = _cli_error(capsys, _data_argv(blocker / "sub"), "data")
    assert str(blocker / "sub") in line
    assert blocker.read_text() == "x"


def test_read_only_file_system_is_not_writable_even_for_root(tmpfs, capsys):
    ro = tmpfs("ro", "ro", "size=64k")
    not_writable = rf"output directory '{re.escape(str(ro))}' is not writable: .*read-only"
    with pytest.raises(PermissionError, match=not_writable):
        atomic_write_json(ro / "f.json", {"a": 1})
    with pytest.raises(PermissionError, match="read-only file system"):
        ResumableJsonl(ro / "out.jsonl")
    line = _cli_error(capsys, _data_argv(ro), "data")
    assert f"output directory '{ro}' is not writable" in line and "read-only" in line


# --- full disk: a fake ENOSPC half-way through a write --------------------------------------------

@pytest.fixture
def disk_full(monkeypatch) -> Callable[[int], None]:
    """`disk_full(code)`: every later low-level write puts out half its bytes, then fails with `code`."""
    real = io._write_all

    def arm(code: int = errno.ENOSPC) -> None:
        def half_then_fail(fd: int, data: bytes) -> None:
            real(fd, data[: len(data) // 2])
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(io, "_write_all", half_then_fail)

    arm.disarm = lambda: monkeypatch.setattr(io, "_write_all", real)  # type: ignore[attr-defined]
    return arm


def test_atomic_write_on_full_disk_keeps_the_old_file(tmp_path, disk_full):
    path = tmp_path / "summary.json"
    atomic_write_json(path, {"old": True})
    before = path.read_bytes()
    disk_full(errno.ENOSPC)
    with pytest.raises(OSError) as err:
        atomic_write_json(path, {"new": "x" * 10_000})
    assert isinstance(err.value, DiskFullError) and err.value.errno == errno.ENOSPC
    assert err.value.filename == str(path)
    assert str(err.value).startswith(f"no space left on device while writing {path}: free some space")
    assert "previous version of the file is unchanged" in str(err.value)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["summary.json"], "temporary file left behind"


def test_resumable_jsonl_on_full_disk_keeps_only_complete_lines(tmp_path, disk_full):
    path = tmp_path / "out.jsonl"
    out = ResumableJsonl(path)
    out.write({"qid": "a", "x": 1})
    out.write({"qid": "b", "x": 2})
    complete = path.read_bytes()
    disk_full(errno.ENOSPC)
    full = rf"no space left on device while writing {re.escape(str(path))}: .*so far"
    with pytest.raises(DiskFullError, match=full):
        out.write({"qid": "c", "x": "y" * 1000})
    assert path.read_bytes() == complete, "half-written record left in the file"
    assert out.done == {"a", "b"}
    out.close()

    disk_full.disarm()  # type: ignore[attr-defined]  # space freed: the rerun resumes cleanly
    with ResumableJsonl(path) as again:
        assert again.done == {"a", "b"} and again.repaired == 0
        again.write({"qid": "c", "x": 3})
    assert [r["qid"] for r in _lines(path)] == ["a", "b", "c"]


def test_quota_and_other_errors(tmp_path, disk_full):
    path = tmp_path / "out.jsonl"
    disk_full(errno.EDQUOT)
    quota = re.escape(f"disk quota exceeded while writing {path}")
    with ResumableJsonl(path) as out, pytest.raises(DiskFullError, match=quota):
        out.write({"qid": "a"})
    assert path.read_bytes() == b""
    disk_full(errno.EIO)  # not a space problem: passed on unchanged
    with pytest.raises(OSError) as err:
        atomic_write_text(tmp_path / "f.txt", "text")
    assert type(err.value) is OSError and err.value.errno == errno.EIO
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]


# --- full disk: real ENOSPC -----------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_real_enospc_from_dev_full(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResumableJsonl(path) as out:
        out.write({"qid": "a"})
        full = os.open("/dev/full", os.O_WRONLY)
        try:
            os.dup2(full, out._fh.fileno())  # the stage's own write path, onto a device that is always full
        finally:
            os.close(full)
        full = re.escape(f"no space left on device while writing {path}:")
        with pytest.raises(DiskFullError, match=full) as err:
            out.write({"qid": "b"})
        assert isinstance(err.value.__cause__, OSError) and err.value.__cause__.errno == errno.ENOSPC
    assert path.read_text() == '{"qid": "a"}\n'

    # An output that is a device rather than a file is refused (reading /dev/full never ends).
    (tmp_path / "dev.jsonl").symlink_to("/dev/full")
    with pytest.raises(OSError, match="exists but is not a regular file"):
        ResumableJsonl(tmp_path / "dev.jsonl")


def test_full_tmpfs_during_data_stage_then_rerun(tmpfs, tmp_path, capsys):
    reference = tmp_path / "reference"
    assert main(_data_argv(reference)) == 0
    expected = (reference / "candidates.jsonl").read_bytes()
    assert len(expected) > 64 * 1024, "the reference output must not fit in the small tmpfs"
    capsys.readouterr()

    small = tmpfs("small", "size=64k")
    run_dir = small / "run"
    line = _cli_error(capsys, _data_argv(run_dir), "data")
    assert f"no space left on device while writing {run_dir / 'candidates.jsonl'}" in line
    partial = (run_dir / "candidates.jsonl").read_bytes()
    assert partial and partial.endswith(b"\n") and expected.startswith(partial), "not only complete records"
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]

    tmpfs.remount(small, "size=2m")  # type: ignore[attr-defined]  # free space, rerun the same command
    assert main(_data_argv(run_dir)) == 0
    assert (run_dir / "candidates.jsonl").read_bytes() == expected
    summary = json.loads((run_dir / "data.run.json").read_text())["summary"]
    assert summary["already_done"] == partial.count(b"\n") > 0 and summary["repaired_lines"] == 0
