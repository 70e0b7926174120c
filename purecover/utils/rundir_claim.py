"""Which folders may be run directories: new ones, empty ones, and ones purecover made.

A stage writes fixed file names (``candidates.jsonl``, ``labels.jsonl``, ``selector/``, ...) into its
``run_dir``. Pointed at a folder of the user's, it would overwrite their files of the same name
without a word. So before any stage writes anything, `claim_run_dir` checks the folder:

* it does not exist yet: it is created and marked;
* it exists and is empty: it is marked;
* it holds the marker `MARKER` (a regular file, never a link): purecover made it; go on;
* it holds ``.purecover.lock`` (a regular file) but no marker: a run directory made before the
  marker existed (the lock file is written by purecover only); it is marked and used;
* anything else is refused (`RunDirRefusedError`) before any write, naming the folder, a few of the
  files that are not ours, and what to do.

The file system root, the home directory, the working directory and any folder above the home or
working directory are never run directories, whatever they hold.

The marker is a small JSON file (``made_by``, ``version``, ``created``) written atomically with the
umask honoured. A user who assembled a run directory by hand (their own ``candidates.jsonl``) opts
in by creating the marker themselves: ``touch DIR/.purecover-run``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
from pathlib import Path

from .io import atomic_write_text

__all__ = ["LEGACY_LOCK", "MARKER", "RunDirRefusedError", "claim_run_dir", "mark_run_dir", "protected_folders"]

MARKER = ".purecover-run"
LEGACY_LOCK = ".purecover.lock"  # `purecover.utils.rundir_lock.LOCK_FILE` (not imported: that module imports us)
SHOWN = 3  # foreign entries named in the message


class RunDirRefusedError(PermissionError):
    """The run directory is a folder purecover must not write into (see the module docstring)."""


def protected_folders() -> dict[Path, str]:
    """Resolved folders that are never run directories -> what they are (root, home, working directory)."""
    out: dict[Path, str] = {}
    for base, what in ((Path.cwd(), "the working directory"), (Path.home(), "the home directory")):
        base = base.resolve()
        out.setdefault(base, what)
        for parent in base.parents:
            out.setdefault(parent, f"a folder above {what}")
    out[Path(Path.cwd().anchor or "/").resolve()] = "the file system root"
    return out


def _regular(path: Path) -> bool:
    """Whether `path` is a regular file itself (not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _mark(run_dir: Path) -> None:
    from .. import __version__

    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    atomic_write_text(run_dir / MARKER, json.dumps({"made_by": "purecover", "version": __version__,
                                                     "created": created}) + "\n")


def mark_run_dir(run_dir: str | Path) -> Path:
    """Create `run_dir` if needed and mark it as a run directory: the opt-in for a folder assembled by hand or by a
    script (its own candidates.jsonl and labels.jsonl) before a stage runs there. Refuses the protected folders
    (the root, the home and working directories and the folders above them); returns the folder."""
    run_dir = Path(run_dir)
    what = protected_folders().get(run_dir.resolve())
    if what is not None:
        raise RunDirRefusedError(f"run_dir {str(run_dir)!r} is {what}: a run directory must be a folder of its own")
    from .io import ensure_output_dir

    ensure_output_dir(run_dir)
    if not _regular(run_dir / MARKER):
        _mark(run_dir)
    return run_dir


def claim_run_dir(run_dir: str | Path) -> None:
    """Make sure `run_dir` is a folder purecover may write into, creating and marking it when it is new or
    empty; raise `RunDirRefusedError` (nothing written) otherwise. See the module docstring for the rule."""
    run_dir = Path(run_dir)
    resolved = run_dir.resolve()
    what = protected_folders().get(resolved)
    if what is not None:
        raise RunDirRefusedError(f"run_dir {str(run_dir)!r} is {what} ({resolved}): a run directory must be a "
                                 "folder of its own; set run_dir to a new folder, e.g. runs/my-run")
    if run_dir.is_symlink() and not run_dir.exists():
        raise RunDirRefusedError(f"run_dir {str(run_dir)!r} is a link to a missing folder; set run_dir to a new "
                                 "folder")
    marker = run_dir / MARKER
    if os.path.lexists(marker):
        if _regular(marker):
            return
        raise RunDirRefusedError(f"run_dir {str(run_dir)!r}: {MARKER} is not a regular file (a link or a "
                                 "folder); purecover does not write into this folder")
    if not run_dir.exists():
        from .io import ensure_output_dir

        ensure_output_dir(run_dir)
        _mark(run_dir)
        return
    if not run_dir.is_dir():
        raise NotADirectoryError(f"run_dir {str(run_dir)!r} is a file, not a folder; set run_dir to a new folder")
    # A marker being written by another process that is claiming the same new folder: its temporary file.
    entries = sorted(e for e in os.listdir(run_dir) if not e.startswith(f".{MARKER}."))
    if not entries or _regular(run_dir / LEGACY_LOCK):
        _mark(run_dir)
        return
    shown = ", ".join(repr(e) for e in entries[:SHOWN]) + (f" and {len(entries) - SHOWN} more"
                                                            if len(entries) > SHOWN else "")
    raise RunDirRefusedError(
        f"run_dir {str(run_dir)!r} is a folder purecover did not make and it is not empty ({shown}); "
        "purecover writes fixed file names there and would overwrite yours. Set run_dir to a new or empty "
        f"folder; if you assembled this folder as a run directory yourself, create the marker first: "
        f"touch {str(run_dir / MARKER)!r}")
