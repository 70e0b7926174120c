"""Peak resident memory of this process, for stage summaries and benchmarks."""

from __future__ import annotations

import sys

__all__ = ["peak_rss_mb"]


def peak_rss_mb() -> float | None:
    """Peak resident set size of this process so far, in MiB (None where `resource` is missing)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20) if sys.platform == "darwin" else peak / 1024, 1)  # bytes on macOS, KiB on Linux
