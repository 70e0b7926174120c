"""Crash drills: start a command, SIGKILL it once it has done some work."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest


def run_and_kill_when(args: Sequence[str], ready: Callable[[], bool], *, what: str, timeout: float = 120,
                      cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
                      poll: float = 0.01) -> None:
    """Run `args`, SIGKILL it as soon as `ready()` is true; fail the test (with the tail of its stderr)
    if it exits first or `ready` stays false for `timeout` seconds."""
    proc = subprocess.Popen(list(args), cwd=cwd, env=dict(env) if env is not None else None,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"{what} ended (rc={proc.returncode}) before it could be killed:\n"
                            f"{proc.stderr.read()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not ready to be killed after {timeout:.0f} s")
            time.sleep(poll)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"{what} exited with {proc.returncode}, not by SIGKILL"


_HOLD_LOCK = """
import runpy, sys, time
from pathlib import Path
from purecover.utils import rundir_lock

release = Path(sys.argv.pop(1))
write_holder = rundir_lock._rewrite
held = []


def write_then_hold(handle, holder):
    write_holder(handle, holder)
    if not held:  # the first write is the acquisition: keep the lock until the test says go
        held.append(True)
        deadline = time.monotonic() + 600
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


rundir_lock._rewrite = write_then_hold
sys.argv[0] = "purecover"
runpy.run_module("purecover", run_name="__main__", alter_sys=True)
"""


def purecover_holding_the_lock(args: Sequence[str], release: Path) -> list[str]:
    """The command line that runs ``python -m purecover *args`` but, once it has taken the run-directory
    lock and written its name into the lock file, waits until the file `release` exists: a second
    process is then sure to meet a held lock, however fast the first one's work is."""
    import sys

    return [sys.executable, "-c", _HOLD_LOCK, str(release), *args]
