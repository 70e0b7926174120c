"""A blocking, per-key lock for building shared artefacts (corpus stores, retrieval indexes) once.

Indexes live in a directory shared by runs (``data.index_dir``): two runs that need the same missing
index must not both build it. `key_lock(path, what)` holds ``fcntl.flock`` on `path` (created if
needed, never followed through a symbolic link); a second process logs that it is waiting for the
first and proceeds when the first is done, so it should check again whether the artefact now exists.
The kernel releases the lock when its holder dies, so a killed build never leaves a stale lock.
On systems without ``fcntl`` the lock is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["key_lock"]


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
    if path.is_symlink():
        raise OSError(f"lock file {path} is a symbolic link: remove it (purecover never writes through links)")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building %s (lock %s)", what, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock
