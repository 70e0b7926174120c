"""Run directories a test assembles by hand (copied candidates, labels): marked as a user opts in."""

from __future__ import annotations

from pathlib import Path

from purecover.utils.rundir_claim import MARKER


def new_run_dir(path: Path) -> Path:
    """Create `path` (and its parents) and mark it as a run directory (``touch path/.purecover-run``, the opt-in the
    run-directory rule documents for a folder assembled by hand); returns `path`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).touch()
    return path
