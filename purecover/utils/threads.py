"""How many threads torch computes with, chosen for the cores this process may use and the machine's load.

torch's default, one thread per core, is the fastest on idle cores and the slowest beside other busy processes:
its threads wait for each other whenever a core is taken. Measured on 2 cores (benchmarks/demo_timing.py,
``make demo-real``): 257 s with the default against 461 s on one thread when idle, 1,594 s against 690 s beside two
busy processes. `choose_threads` decides, in this order:

1. ``OMP_NUM_THREADS`` set by the user: left as it is (torch reads it);
2. the recipe's ``threads`` when it is a number;
3. ``threads: auto`` (the default): the cores this process may use (its CPU affinity, capped by a cgroup CPU quota
   when there is one) minus the other processes running now (the runnable count of ``/proc/loadavg``, the median
   of a few samples over about 0.2 s, this process left out), and at least one.

`apply_threads` makes the choice for a stage (the contract calls it before every stage body it runs) and logs it.
The ``OMP_NUM_THREADS`` it sets is inherited by the processes this one starts, and they take it as given (1.). A
program that starts later stages as processes and wants each to choose for the load of its own time passes them
`env_choosing_own_threads`.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["ThreadChoice", "apply_threads", "choose_threads", "env_choosing_own_threads", "other_runnable",
           "usable_cores"]

LOADAVG = Path("/proc/loadavg")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
SAMPLES = 5
SAMPLE_INTERVAL_S = 0.04
_ours: dict[str, str] = {}  # the OMP_NUM_THREADS value this process set itself (not the user's)


@dataclass(frozen=True)
class ThreadChoice:
    """How many torch threads, and why: ``source`` is ``OMP_NUM_THREADS``, ``recipe`` or ``auto``; `cores` and
    `busy` are what ``auto`` counted (None otherwise)."""

    threads: int
    source: str
    cores: int | None = None
    busy: int | None = None

    def describe(self) -> str:
        if self.source == "OMP_NUM_THREADS":
            return f"torch threads: {self.threads} (OMP_NUM_THREADS)"
        if self.source == "recipe":
            return f"torch threads: {self.threads} (the recipe's threads)"
        return (f"torch threads: {self.threads} ({self.cores} usable core{'s' if self.cores != 1 else ''}, "
                f"{self.busy} other running process{'es' if self.busy != 1 else ''}; set threads in the recipe or "
                "OMP_NUM_THREADS to choose)")


def usable_cores(cpu_max: Path | None = None) -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota (`cpu_max`, default
    `CGROUP_CPU_MAX`: ``<quota> <period>``, rounded up) when one is set."""
    cpu_max = CGROUP_CPU_MAX if cpu_max is None else cpu_max
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def other_runnable(loadavg: Path | None = None, samples: int = SAMPLES, interval: float = SAMPLE_INTERVAL_S) -> int:
    """Processes running or ready to run now besides this one: the median over `samples` reads of the runnable
    count in `loadavg` (default `LOADAVG`, ``/proc/loadavg``: its fourth field, ``running/total``, counts the
    reader), minus one. Where there is no such file, the one-minute load average, rounded; 0 when neither can be
    read."""
    loadavg = LOADAVG if loadavg is None else loadavg
    counts = []
    for i in range(samples):
        try:
            counts.append(int(loadavg.read_text().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            break
        if i + 1 < samples:
            time.sleep(interval)
    if counts:
        return max(0, round(statistics.median(counts)))
    try:
        return max(0, round(os.getloadavg()[0]))
    except OSError:
        return 0


def choose_threads(setting: int | str = "auto", env: Mapping[str, str] | None = None) -> ThreadChoice:
    """The thread count for `setting` (the recipe's ``threads``: a number or ``auto``) in the environment `env`
    (default: this process's); see the module docstring for the order."""
    env = os.environ if env is None else env
    given = env.get("OMP_NUM_THREADS", "").strip()
    if given and _ours.get("OMP_NUM_THREADS") != given:
        try:
            return ThreadChoice(max(1, int(given)), "OMP_NUM_THREADS")
        except ValueError:
            log.warning("OMP_NUM_THREADS=%r is not a number; choosing the thread count as for threads: auto", given)
    if isinstance(setting, int) and not isinstance(setting, bool):
        return ThreadChoice(setting, "recipe")
    cores = usable_cores()
    busy = other_runnable()
    return ThreadChoice(max(1, cores - busy), "auto", cores, busy)


def apply_threads(setting: int | str = "auto") -> ThreadChoice:
    """Choose (`choose_threads`) and apply: ``torch.set_num_threads`` when torch is imported, else
    ``OMP_NUM_THREADS`` for it to read when it is (and for the processes this one starts); logged. A user's
    ``OMP_NUM_THREADS`` is left as it is."""
    choice = choose_threads(setting)
    if choice.source != "OMP_NUM_THREADS":
        value = str(choice.threads)
        os.environ["OMP_NUM_THREADS"] = value
        _ours["OMP_NUM_THREADS"] = value
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "set_num_threads"):
            torch.set_num_threads(choice.threads)
    log.info(choice.describe())
    return choice


def env_choosing_own_threads(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of `env` (default: this process's environment) without the ``OMP_NUM_THREADS`` that `apply_threads`
    set in this process, so that a process started with it chooses its own thread count, for the load at its own
    start. A user's ``OMP_NUM_THREADS`` (any other value) is kept."""
    out = dict(os.environ if env is None else env)
    if out.get("OMP_NUM_THREADS") is not None and out.get("OMP_NUM_THREADS") == _ours.get("OMP_NUM_THREADS"):
        del out["OMP_NUM_THREADS"]
    return out
