"""Building shared artefacts (corpus stores, retrieval indexes) once: a per-key lock and an atomic build directory.

Indexes live in a directory shared by runs (``data.index_dir``): two runs that need the same missing
index must not both build it. `key_lock(path, what)` holds ``fcntl.flock`` on `path` (created if
needed, never followed through a symbolic link); a second process logs that it is waiting for the
first and proceeds when the first is done, so it should check again whether the artefact now exists.
The kernel releases the lock when its holder dies, so a killed build never leaves a stale lock.
On systems without ``fcntl`` the lock is a no-op.

`building_directory(final, meta)` (call it under the key lock) yields a temporary sibling of `final`
marked ``.building`` and renames it to `final` when the block succeeds: `final` is only ever a whole
build, a killed build leaves nothing there, and the next build removes the marked leftovers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .io import apply_umask, open_in_place

log = logging.getLogger(__name__)

__all__ = ["BUILDING_MARKER", "building_directory", "key_lock"]

BUILDING_MARKER = ".building"  # in a directory being built by purecover (and in nothing else)


@contextlib.contextmanager
def key_lock(path: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` while building `what` (waits for another holder)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_in_place(path, os.O_RDWR | os.O_CREAT, 0o644)  # a link there is refused, never followed
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s (lock %s)", what, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


@contextlib.contextmanager
def building_directory(final: str | Path, meta: str) -> Iterator[Path]:
    """Build directory `final` atomically; `meta` names the file a complete build of ours holds.

    Removes partial builds of killed processes (siblings ``.<name>.*`` holding `BUILDING_MARKER`), then
    yields a new temporary sibling holding the marker. When the block ends, the marker is removed and
    the directory renamed to `final`, replacing a symbolic link there (never followed) or an earlier
    build of ours (one holding `meta`); anything else at `final` is refused, not deleted. When the block
    raises, the temporary directory is deleted.
    """
    final = Path(final)
    parent = final.parent
    for stale in parent.glob(f".{final.name}.*"):  # the key lock is held: no live build owns these
        if stale.is_dir() and not stale.is_symlink() and (stale / BUILDING_MARKER).is_file():
            log.warning("removing the partial build of a killed process: %s", stale)
            shutil.rmtree(stale, ignore_errors=True)
    if final.is_dir() and not final.is_symlink() and not (final / meta).is_file():
        raise OSError(f"{final} is in the way of a new build and holds no {meta}: it is not a build of purecover's; "
                      "move or delete it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
    try:
        (tmp / BUILDING_MARKER).write_text(f"pid {os.getpid()}\n")
        yield tmp
        (tmp / BUILDING_MARKER).unlink()
        apply_umask(tmp)  # mkdtemp made it 0700: the finished build is as readable as the umask says
        if final.is_symlink():
            final.unlink()
        elif final.exists():  # an earlier build (e.g. of the file's earlier content): moved aside, then deleted
            aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=parent))
            (aside / BUILDING_MARKER).write_text("an earlier build being replaced\n")
            final.rename(aside / "previous")
            shutil.rmtree(aside, ignore_errors=True)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
