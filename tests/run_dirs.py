"""Run directories a test assembles by hand (copied candidates, labels): marked as a user opts in."""

from __future__ import annotations

from pathlib import Path

from purecover.utils.rundir_claim import mark_run_dir


def new_run_dir(path: Path) -> Path:
    """Create `path` (and its parents) and mark it as a run directory (`mark_run_dir`, the opt-in the run-directory
    rule documents for a folder assembled by hand); returns `path`."""
    return mark_run_dir(path)
