"""Peak resident memory of this process, for stage summaries and benchmarks.

Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this process's own address space.
``ru_maxrss`` is not used there because it carries over from the parent: a process started by a large
parent (fork, then exec) reports at least the parent's resident size at the fork.
"""

from __future__ import annotations

import sys

__all__ = ["peak_rss_mb"]


def peak_rss_mb() -> float | None:
    """Peak resident set size of this process so far, in MiB (None where neither source exists)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, ValueError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20) if sys.platform == "darwin" else peak / 1024, 1)  # bytes on macOS, KiB on Linux
