"""Progress in a log file: lines with count, throughput and time left, one at the end; none for idle bars."""

from __future__ import annotations

import logging
import subprocess
import sys

from purecover.utils.progress import LogProgress, tqdm


def test_log_lines_at_intervals_and_at_the_end(caplog):
    with caplog.at_level(logging.INFO, logger="purecover.progress"):
        bar = LogProgress(total=54, desc="label [0]", unit="q", every=0.0)
        bar.update(12)
        bar.set_postfix({"fallback": "0.0%"})
        bar.update(42)
        bar.close()
        bar.close()  # once
        idle = LogProgress(total=10, desc="select retrieval@2", unit="q")
        idle.close()  # did nothing: says nothing (no line stuck at 0 %)
        assert list(LogProgress(range(3), desc="iterate", every=1e9)) == [0, 1, 2]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("label [0]: 12/54 q (22%), ") and "q/s" in lines[0] and "left" in lines[0]
    assert lines[1].startswith("label [0]: 54/54 q (100%), ") and lines[1].endswith("; fallback=0.0%")
    assert lines[2].startswith("label [0]: 54/54 q (100%) in 0m00s (") and lines[2].endswith("q/s); fallback=0.0%")
    assert lines[3].startswith("iterate: 3/3 it (100%) in ") and len(lines) == 4


def test_a_log_file_gets_lines_and_a_terminal_gets_bars(monkeypatch):
    """Written to a pipe, the stages' `tqdm` is `LogProgress` (no carriage returns); forced, a real bar."""
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
            "from purecover.utils.progress import tqdm\n"
            "print(type(tqdm(total=3, desc='x')).__name__)\n"
            "for _ in tqdm(range(3), desc='work', unit='q'): pass\n")
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert piped.stdout.startswith("LogProgress") and "\r" not in piped.stdout + piped.stderr
    assert "work: 3/3 q (100%) in" in piped.stdout
    monkeypatch.setenv("PURECOVER_PROGRESS", "bar")
    assert not isinstance(tqdm(total=1, disable=True), LogProgress)
