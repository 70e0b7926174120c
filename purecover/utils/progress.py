"""Progress for a terminal and for a log file.

On a terminal (stderr is a TTY) `tqdm` is tqdm's own bar. Written to a file or a pipe (``nohup``, CI, a
scheduler's log), a bar is a wall of carriage returns, or a line stuck at 0 % when it finishes between two
refreshes; there `tqdm` gives `LogProgress` instead: a log line on ``purecover.progress`` at most every
`LOG_EVERY_S` seconds (``label [0]: 12/54 q (22%), 0.41 q/s, about 1m42s left``) and one when it ends, with
the count, the time and the throughput. A bar that did nothing logs nothing. ``PURECOVER_PROGRESS=bar`` or
``=log`` forces one kind. The stages import `tqdm` from here; the arguments are tqdm's.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["LOG_EVERY_S", "LogProgress", "duration_text", "tqdm", "use_bars"]

log = logging.getLogger("purecover.progress")
LOG_EVERY_S = 30.0


def duration_text(seconds: float) -> str:
    """`seconds` as ``4m07s`` (``1h02m`` from an hour on)."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _count(n: float, unit_scale: bool) -> str:
    if not unit_scale or abs(n) < 1000:
        return f"{n:g}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:g}"


class LogProgress:
    """tqdm's interface (iterate, ``update``, ``set_postfix``, ``close``, ``n``), reported as log lines."""

    def __init__(self, iterable: Iterable[Any] | None = None, *, total: float | None = None, initial: float = 0,
                 desc: str | None = None, unit: str = "it", unit_scale: bool = False, disable: bool = False,
                 every: float | None = None, **_ignored: Any) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.total, self.n, self.initial = total, initial, initial
        self.desc, self.unit, self.unit_scale, self.disable = desc or "progress", unit, unit_scale, disable
        self.every = LOG_EVERY_S if every is None else every
        self.postfix = ""
        self.start = self.last = time.monotonic()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        values = {**(dict(ordered_dict) if ordered_dict else {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def _line(self, final: bool) -> str:
        done = self.n - self.initial
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = done / elapsed
        total = f"/{_count(self.total, self.unit_scale)}" if self.total else ""
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        line = f"{self.desc}: {_count(self.n, self.unit_scale)}{total} {self.unit}{share}"
        if final:
            line += f" in {duration_text(elapsed)} ({_count(rate, self.unit_scale)} {self.unit}/s)"
        else:
            line += f", {_count(rate, self.unit_scale) if rate >= 1 else f'{rate:.2g}'} {self.unit}/s"
            if self.total and rate > 0 and self.total > self.n:
                line += f", about {duration_text((self.total - self.n) / rate)} left"
        return line + (f"; {self.postfix}" if self.postfix else "")

    def update(self, n: float = 1) -> None:
        if self.disable or self.closed:
            return
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            log.info("%s", self._line(final=False))

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.disable and self.n > self.initial:
            log.info("%s", self._line(final=True))


def use_bars() -> bool:
    """Whether progress shows as bars here (a terminal, or PURECOVER_PROGRESS=bar) rather than log lines."""
    forced = os.environ.get("PURECOVER_PROGRESS", "").strip().lower()
    if forced in ("bar", "log"):
        return forced == "bar"
    return sys.stderr.isatty()


def tqdm(iterable: Iterable[Any] | None = None, **kwargs: Any) -> Any:
    """tqdm's bar on a terminal, `LogProgress` elsewhere (module docstring); takes tqdm's arguments."""
    if use_bars():
        from tqdm.auto import tqdm as bar

        return bar(iterable, **kwargs)
    return LogProgress(iterable, **kwargs)
