"""One writer per run directory: an exclusive lock on ``run_dir/.purecover.lock``.

Every stage holds it while it runs (`locked_stage`), so two processes can never write one run
directory at once: the second gets one clear line naming the holder (stage, pid, host, start).

* The lock is ``fcntl.flock`` on the lock file: the kernel releases it when the holder exits or is
  killed, so a lock left by a dead process is taken over by the next run without any guessing.
  The file keeps the last holder's description (pid, host, stage, start) for the message.
* Re-entrant within a process: the pipeline holds it across its stages, and each stage it runs
  enters it again.
* Distributed launches (``torchrun`` / ``accelerate launch``, ``WORLD_SIZE`` > 1): rank 0 takes the
  lock and records its launch (``TORCHELASTIC_RUN_ID`` when the launcher sets one, else host, the
  launcher's pid, which is every rank's parent, and ``MASTER_PORT``); the other ranks do not lock
  but wait until the lock file names their own launch, and fail after a while if it never does.
* Hand-over to a child process (`handover`): a holder that starts the work in a subprocess (the
  pipeline running ``accelerate launch -m purecover.train``) records the sha256 of a fresh random
  token in the lock file and passes ``PURECOVER_LOCK_FILE`` (the lock file) and
  ``PURECOVER_LOCK_TOKEN`` (the token) in the child's environment. Every process of that launch whose
  token hashes to the recorded value is let in without taking the flock (which the parent still
  holds); any other process is refused as before. The record is removed when the hand-over ends, so
  a leftover environment cannot reopen the run directory later.
* POSIX only (``fcntl``); on a file system without flock support the lock is a no-op with a warning.
* The lock file is never opened through a symbolic link: a link at ``run_dir/.purecover.lock`` is
  refused (`purecover.utils.io.SymlinkError`) instead of overwriting the file it points to.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..records import LockHolder, validate_record
from .io import ensure_output_dir, open_in_place
from .rundir_claim import claim_run_dir

log = logging.getLogger(__name__)

__all__ = ["HANDOVER_FILE_ENV", "HANDOVER_TOKEN_ENV", "LOCK_FILE", "RunDirBusyError", "handover", "locked_stage",
           "run_dir_lock"]

LOCK_FILE = ".purecover.lock"
HANDOVER_FILE_ENV = "PURECOVER_LOCK_FILE"
HANDOVER_TOKEN_ENV = "PURECOVER_LOCK_TOKEN"
RANK_WAIT_SECONDS = 120.0
_HELD: dict[str, list[Any]] = {}  # resolved run dir -> [open lock file (None: handed over), depth]

F = TypeVar("F", bound=Callable[..., Any])


class RunDirBusyError(RuntimeError):
    """Another process (or another launch) holds the run directory's lock."""


def _launch_id() -> str | None:
    """Identity shared by the ranks of one launch (None for a single process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return run_id
    return f"{socket.gethostname()}:{os.getppid()}:{os.environ.get('MASTER_PORT', '')}"


def _holder(path: Path) -> LockHolder | None:
    """The holder the lock file records (None when there is none, it does not validate, or the path is a link)."""
    try:
        # O_NONBLOCK: a FIFO put there must not hang the reader (no effect on a regular file).
        with os.fdopen(open_in_place(path, os.O_RDONLY | os.O_NONBLOCK), encoding="utf-8") as fh:
            text = fh.read()
        return validate_record(LockHolder, json.loads(text), str(path)) if text else None
    except (OSError, ValueError):  # RecordError and JSONDecodeError are ValueErrors
        return None


def _busy(run_dir: Path, holder: LockHolder | None) -> RunDirBusyError:
    who = (f"`purecover {holder.stage}` (pid {holder.pid} on {holder.host}, since {holder.started})"
           if holder is not None else "another process")
    return RunDirBusyError(f"{run_dir} is in use by {who}: wait for it to finish, or use another run_dir")


def _try_flock(handle: Any) -> bool:
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _wait_for_own_launch(run_dir: Path, path: Path, launch: str) -> None:
    """Non-zero ranks: wait until the lock file names this launch (rank 0 took the lock). They never
    touch the lock itself, so they cannot race rank 0 for it."""
    deadline = time.monotonic() + RANK_WAIT_SECONDS
    while getattr(_holder(path), "launch", None) != launch:
        if time.monotonic() > deadline:
            raise RunDirBusyError(f"{run_dir}: rank 0 of this launch did not take the run-directory lock within "
                                  f"{RANK_WAIT_SECONDS:.0f} s; {_busy(run_dir, _holder(path))}")
        time.sleep(0.2)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _handed_over(path: Path) -> bool:
    """Whether this process's environment carries the hand-over token the lock file `path` records."""
    token = os.environ.get(HANDOVER_TOKEN_ENV)
    named = os.environ.get(HANDOVER_FILE_ENV)
    if not token or not named:
        return False
    try:
        if Path(named).resolve() != path.resolve():
            return False
    except OSError:
        return False
    holder = _holder(path)
    recorded = holder.handover if holder is not None else None
    return recorded is not None and secrets.compare_digest(recorded, _token_hash(token))


def _rewrite(handle: Any, holder: LockHolder) -> None:
    """Replace the lock file's content with `holder` (one line of JSON)."""
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(holder.to_json_dict()))
    handle.flush()


def _without_handover(holder: LockHolder) -> LockHolder:
    """`holder` with no hand-over recorded (the key left out of the file again)."""
    return LockHolder.model_validate(holder.model_dump(exclude={"handover"}))


@contextlib.contextmanager
def handover(run_dir: str | Path) -> Iterator[dict[str, str]]:
    """Let a child process in while this process holds `run_dir`'s lock; yields the environment
    variables to add to the child's environment (see module docstring). The caller must hold the lock
    (`run_dir_lock`); the hand-over ends, and the token stops working, when the block exits."""
    key = str(Path(run_dir).resolve())
    held = _HELD.get(key)
    if held is None or held[0] is None:
        raise RuntimeError(f"{run_dir}: a hand-over needs the run-directory lock held by this process")
    handle, path = held[0], Path(run_dir) / LOCK_FILE
    token = secrets.token_hex(32)
    holder = _holder(path)
    if holder is None:  # we hold the lock, so we wrote the file: only a foreign hand could have spoiled it
        raise RuntimeError(f"{path}: the lock file does not name its holder; cannot hand the lock over")
    _rewrite(handle, holder.model_copy(update={"handover": _token_hash(token)}))
    try:
        yield {HANDOVER_FILE_ENV: str(path.resolve()), HANDOVER_TOKEN_ENV: token}
    finally:
        _rewrite(handle, _without_handover(_holder(path) or holder))


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path, stage: str) -> Iterator[None]:
    """Hold `run_dir`'s exclusive lock while the block runs (see module docstring); creates `run_dir`."""
    run_dir = Path(run_dir)
    key = str(run_dir.resolve())
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    path = run_dir / LOCK_FILE
    if _handed_over(path):  # a child of the lock holder (every rank of its launch): the parent keeps the flock
        _HELD[key] = [None, 1]
        try:
            yield
        finally:
            del _HELD[key]
        return
    launch = _launch_id()
    if launch is not None and int(os.environ.get("RANK", "0")) != 0:
        _wait_for_own_launch(run_dir, path, launch)
        yield
        return
    # Before any write: a new, empty or purecover-made folder only (never /, home, the working directory).
    claim_run_dir(run_dir)
    ensure_output_dir(run_dir)  # a clear error for a run_dir that cannot be written
    # Held open for the lock's lifetime; never through a link (that would overwrite the file it points to).
    handle = os.fdopen(open_in_place(path, os.O_RDWR | os.O_CREAT), "r+", encoding="utf-8")
    try:
        try:
            acquired = _try_flock(handle)
        except OSError as exc:  # e.g. a file system without flock
            log.warning("cannot lock %s (%s): running without the run-directory lock", path, exc)
            acquired = True
        if not acquired:
            raise _busy(run_dir, _holder(path))
        _rewrite(handle, LockHolder(pid=os.getpid(), host=socket.gethostname(), stage=stage, launch=launch,
                                    started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")))
        _HELD[key] = [handle, 1]
        try:
            yield
        finally:
            del _HELD[key]
    finally:
        handle.close()  # closing releases the flock


def locked_stage(stage: str) -> Callable[[F], F]:
    """Decorator for ``run_<stage>_stage(recipe, ...)``: the call holds ``recipe.run_path``'s lock."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(recipe: Any, *args: Any, **kwargs: Any) -> Any:
            with run_dir_lock(recipe.run_path, stage):
                return fn(recipe, *args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap
