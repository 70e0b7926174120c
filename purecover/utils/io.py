"""Crash-safe files: atomic whole-file writes and resumable, append-only JSONL.

A JSONL output is appended one record per line and flushed (and fsync'ed) after each record,
so a killed job loses at most the record in flight. On restart, `ResumableJsonl` reads what is
there, drops a truncated or corrupt last line (left by a crash), and reports the keys already
done so the job can skip them.

A full disk (ENOSPC, or EDQUOT for a quota) while writing raises `DiskFullError`, whose message
names the file and says what is kept: an atomic write leaves the previous file as it was, a
`ResumableJsonl` cuts the half-written record so the file holds only complete lines.

Nothing is written through a symbolic link. An atomic write renames its temporary file over the
path, which replaces a link there rather than following it; a file updated in place (a
`ResumableJsonl`, the run-directory lock) is opened with `open_in_place`, which refuses a link
at the path (`SymlinkError`), also one that appears between a check and the open.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import stat
import tempfile
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import JsonValue

log = logging.getLogger(__name__)

__all__ = ["DiskFullError", "JsonlLineError", "ResumableJsonl", "SymlinkError", "atomic_write_bytes",
           "atomic_write_json", "atomic_write_text", "disk_full_is_explained", "ensure_output_dir", "iter_json_lines",
           "open_in_place", "read_jsonl", "strict_json", "write_jsonl_atomic"]


class DiskFullError(OSError):
    """No space (ENOSPC) or quota (EDQUOT) left while writing an output; the message names the file."""

    def __str__(self) -> str:
        return str(self.strerror)


@contextlib.contextmanager
def disk_full_is_explained(path: Path, kept: str) -> Iterator[None]:
    """Re-raise ENOSPC/EDQUOT from the block as a `DiskFullError` naming `path` and what is `kept`."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"
        message = f"{what} while writing {path}: free some space and rerun the stage; {kept}"
        raise DiskFullError(exc.errno, message, str(path)) from exc


class SymlinkError(OSError):
    """A file to be written in place is a symbolic link; the message names it and says what to do."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.ELOOP, f"{path} is a symbolic link; purecover never writes through links: "
                                      "replace it with a regular file or remove it", str(path))

    def __str__(self) -> str:
        return str(self.strerror)


def open_in_place(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """`os.open` of a regular file to be written in place, never through a symbolic link.

    A link at `path` (dangling or not) raises `SymlinkError`; ``O_NOFOLLOW`` makes the refusal hold
    even when the link appears after any earlier check. Anything else that is not a regular file
    (a device, a FIFO) is refused with an OSError naming `path`. Returns the descriptor (close-on-exec).
    """
    path = Path(path)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not nofollow and path.is_symlink():  # no O_NOFOLLOW on this platform: the check is all there is
        raise SymlinkError(path)
    try:
        fd = os.open(path, flags | nofollow | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        # Linux says ELOOP for a link under O_NOFOLLOW, FreeBSD EMLINK, NetBSD EFTYPE.
        if exc.errno in (errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP)) and path.is_symlink():
            raise SymlinkError(path) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{str(path)!r} exists but is not a regular file: remove it or choose another path")
    return fd


def current_umask() -> int:
    """The process's umask (from /proc on Linux, where reading it changes nothing; else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | Path) -> None:
    """Give `path` (and, for a directory, everything under it) the permissions a plain create would have under the
    umask: files 0666 & ~umask, directories 0777 & ~umask. For what was made 0600/0700 by a temporary-file
    helper (``mkstemp``, ``mkdtemp``, libraries writing atomically) before it was renamed into place. Links are
    never followed."""
    mask = current_umask()
    path = Path(path)
    paths = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    for p in paths:
        if p.is_symlink():
            continue
        if p.is_dir():
            p.chmod(0o777 & ~mask)
        elif p.is_file():
            p.chmod(0o666 & ~mask)


def _write_all(fd: int, data: bytes) -> None:
    """`os.write` until all of `data` is out (a regular file can take a short write just before ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def ensure_output_dir(directory: Path) -> None:
    """Create `directory` if needed; errors name it and why it cannot be written (also for root)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
        why = f"{str(blocker)!r} is a file, not a directory" if blocker is not None else exc.strerror
        raise OSError(f"cannot create output directory {str(directory)!r}: {why}") from exc
    if not os.access(directory, os.W_OK):
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        why = "it is on a read-only file system" if read_only else "no write permission"
        raise PermissionError(f"output directory {str(directory)!r} is not writable: {why}")


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: readers see old or new, never half.

    A symbolic link at `path` is replaced by the new file; the file it pointed to is left as it was.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """`atomic_write_text` of raw bytes."""
    path = Path(path)
    ensure_output_dir(path.parent)
    with disk_full_is_explained(path, "the previous version of the file is unchanged"):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            try:
                os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600: honour the umask like a plain create
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _first_non_finite(value: Any, where: str = "") -> str | None:
    """Where in `value` (``logits[2]``, ``summary.f1``) the first NaN or infinity sits, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) \
        else ()
    for key, item in items:
        found = _first_non_finite(item, f"{where}[{key}]" if isinstance(key, int) else
                                  f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def strict_json(obj: Any, where: str | Path, indent: int | None = None) -> str:
    """`obj` as JSON text (UTF-8, not ASCII-escaped). NaN and infinities are refused, since strict JSON has
    neither and other readers reject them: a ValueError naming `where` (the file) and the field."""
    try:
        return json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError as exc:
        field = _first_non_finite(obj)
        if field is None:
            raise
        raise ValueError(f"{where}: refusing to write a non-finite number (NaN or infinity) at {field}: JSON has "
                         "none; nothing was written") from exc


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """`atomic_write_text` of `obj` as strict JSON (`strict_json`: NaN and infinities refused)."""
    atomic_write_text(path, strict_json(obj, path, indent) + "\n")


def write_jsonl_atomic(path: str | Path, records: Iterable[dict[str, JsonValue]]) -> int:
    """Write all `records` (JSON objects: a record's ``to_json_dict()``) as JSONL atomically (strict JSON, see
    `strict_json`); returns the count."""
    lines = [strict_json(r, f"{path}:{i}") for i, r in enumerate(records, start=1)]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


class JsonlLineError(ValueError):
    """A JSONL line that does not parse; carries the file and 1-based line number."""

    def __init__(self, path: Path, lineno: int, problem: str) -> None:
        self.path, self.lineno, self.problem = path, lineno, problem
        super().__init__(f"{path}:{lineno}: {problem}")


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, value) for each non-blank line; bad JSON raises JsonlLineError."""
    path = Path(path)
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlLineError(path, lineno, f"invalid JSON ({exc.msg} at column {exc.colno})") from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, JsonValue]]]:
    """Yield (line number, object as parsed) of a JSONL file of objects; errors name file and line. Validate
    each into its record (`purecover.records.validate_line`) before use."""
    for lineno, record in iter_json_lines(path):
        if not isinstance(record, dict):
            raise JsonlLineError(Path(path), lineno, f"expected a JSON object, got {type(record).__name__}")
        yield lineno, record


class ResumableJsonl:
    """Append-only JSONL output keyed by a field (default ``qid``), safe to kill and rerun.

    Opening scans the existing file: complete records are kept and their keys collected in
    `done`; a last line without a newline or that does not parse (a crash mid-write) is cut
    off and counted in `repaired`. A corrupt line that is *not* the last one is an error, since
    something other than a crash damaged the file. A write that fails (e.g. a full disk) cuts
    its partial record off again, so the file always ends with a complete line.

    `keep` (optional): the keys this run writes. Complete records whose key is outside it (left by a run over
    another set of questions under the same inputs) are dropped, counted in `dropped`, and the file is rewritten
    atomically with the others in their order before any append.
    """

    def __init__(self, path: str | Path, key: str = "qid", fsync: bool = True,
                 keep: Collection[str] | None = None) -> None:
        self.path = Path(path)
        self.key = key
        self.fsync = fsync
        self.done: set[str] = set()
        self.repaired = 0
        self.dropped = 0
        self._keep = keep
        ensure_output_dir(self.path.parent)
        if self.path.exists() and not self.path.is_file():
            raise OSError(f"output {str(self.path)!r} exists but is not a regular file")
        # One descriptor, opened without following a link, serves the scan, the repair and the appends.
        fd = open_in_place(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            kept = self._scan(fd)
            if kept is not None:  # records outside `keep` were dropped: the rest replace the file atomically
                os.close(fd)
                atomic_write_bytes(self.path, kept)
                fd = open_in_place(self.path, os.O_RDWR | os.O_APPEND)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fh = os.fdopen(fd, "ab", buffering=0)
        self._size = os.fstat(fd).st_size  # end of the last complete record

    def _scan(self, fd: int) -> bytes | None:
        """Collect `done`, cut a crash-damaged end; the bytes of the kept records when some were dropped."""
        good_bytes = 0
        kept: list[bytes] = []
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        lines = data.split(b"\n")
        # After the last "\n" comes either b"" (clean end) or a partial line.
        for i, raw in enumerate(lines):
            is_last = i == len(lines) - 1
            if is_last:
                if raw.strip():
                    self.repaired += 1
                    log.warning("%s: dropping a truncated last line (%d bytes) left by an interrupted run",
                                self.path, len(raw))
                break
            try:
                record = json.loads(raw.decode("utf-8"))
                value = record[self.key]
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
                if i == len(lines) - 2 and not lines[-1]:
                    # Corrupt final complete line: treat as crash damage too.
                    self.repaired += 1
                    log.warning("%s:%d: dropping a corrupt last line left by an interrupted run", self.path, i + 1)
                    break
                raise ValueError(f"{self.path}:{i + 1}: corrupt record in the middle of the file ({exc})") from None
            good_bytes += len(raw) + 1
            if self._keep is not None and value not in self._keep:
                self.dropped += 1
                continue
            kept.append(raw + b"\n")
            if value in self.done:
                raise ValueError(f"{self.path}:{i + 1}: duplicate {self.key} {value!r} (two writers, or an edit): "
                                 f"delete the duplicate line to keep the rest, or delete {self.path.name} to "
                                 "write it again")
            self.done.add(value)
        if self.dropped:
            log.warning("%s: dropping %d record(s) outside this run's %d keys (left by a run over other "
                        "questions with the same inputs); the %d others are kept", self.path, self.dropped,
                        len(self._keep or ()), len(self.done))
            return b"".join(kept)
        if good_bytes != len(data):
            os.ftruncate(fd, good_bytes)
        return None

    def write(self, record: dict[str, JsonValue]) -> None:
        """Append one record (a JSON object, e.g. a record's ``to_json_dict()``; it must carry the key and not be
        done yet) and make it durable."""
        value = record[self.key]
        if value in self.done:
            raise ValueError(f"{self.path}: {self.key} {value!r} written twice")
        data = (strict_json(record, f"{self.path} (record {self.key} {value!r})") + "\n").encode("utf-8")
        fd = self._fh.fileno()
        kept = "the records written so far are kept and a rerun continues after them"
        with disk_full_is_explained(self.path, kept):
            try:
                _write_all(fd, data)
                if self.fsync:
                    os.fsync(fd)
            except BaseException:
                with contextlib.suppress(OSError):  # drop the partial record; a rerun would cut it anyway
                    os.ftruncate(fd, self._size)
                raise
        self._size += len(data)
        self.done.add(value)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResumableJsonl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
