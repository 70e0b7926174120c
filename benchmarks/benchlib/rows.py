"""The one row format every benchmark writes, and the helpers that build it.

Each benchmark script stores, beside its own measurements, a list ``rows`` in its results JSON: one
object per figure it reports, in the same shape for every benchmark, so that
``benchmarks/summarize.py`` can tabulate them without knowing any benchmark.

A row holds, in this order:

``figure``   a stable id, ``<benchmark>.<what is measured>`` (``solver.greedy_over_exact_mean_ratio``);
             the same id across runs and machines, so figures can be compared over time
``variant``  (optional) which instance of the figure: a task, a size, a distribution (``|S|=5``)
``seed``     (optional) the random seed the figure was measured at, when the benchmark takes seeds; run
             at several seeds, a benchmark adds per figure ``<figure>_mean`` and ``<figure>_worst``
             rows over the seeds (without ``seed``; the worst carries the figure's target)
``value``    the number (``null`` when not measured)
``unit``     ``s``, ``ms``, ``MB``, ``x`` (a ratio of two measurements), ``F1``, ``questions/s``, ...
``target``   the claim as ``"<op> <number>"`` with op one of ``>=``, ``<=``, ``>``, ``<``
             (``">= 0.98"``), or ``null`` for a figure reported without a claim
``met``      whether ``value <op> number`` holds (`check`); ``null`` without a target or a value
``note``     (optional) context for a reader: the two timings behind a ratio, instance counts
``machine``  where it ran, in a few words (`describe`): cores, processor or CPU model, GPU

Each script states its figures and targets in one function, ``rows(result) -> list[dict]``, which
derives the rows from the script's own result dict (`Rows` builds them). The script calls it before
writing its JSON (`with_rows`), and ``python benchmarks/<name>.py --rows-only --out FILE`` (`rewrite`)
calls it on a stored results file, so stored results get the rows a fresh run would write without
rerunning the measurement. Every script also records ``date`` (`now`) and ``machine`` (`machine_info`).
"""

from __future__ import annotations

import datetime as dt
import json
import operator
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, ">": operator.gt,
                                                   "<": operator.lt}
FIELDS = ("figure", "variant", "seed", "value", "unit", "target", "met", "note", "machine")
REQUIRED = ("figure", "value", "unit", "target", "met", "machine")


def at_least(bound: float) -> str:
    return f">= {bound:g}"


def at_most(bound: float) -> str:
    return f"<= {bound:g}"


def above(bound: float) -> str:
    return f"> {bound:g}"


def below(bound: float) -> str:
    return f"< {bound:g}"


def parse_target(target: str) -> tuple[str, float]:
    """``">= 0.98"`` -> (">=", 0.98); ValueError for anything else."""
    op, _, number = str(target).strip().partition(" ")
    if op not in OPS:
        raise ValueError(f"target {target!r}: expected '<op> <number>' with op one of {', '.join(OPS)}")
    try:
        return op, float(number)
    except ValueError:
        raise ValueError(f"target {target!r}: {number.strip()!r} is not a number") from None


def check(value: float | None, target: str | None) -> bool | None:
    """Whether `value` meets `target` (None when either is missing)."""
    if value is None or target is None:
        return None
    op, bound = parse_target(target)
    return bool(OPS[op](value, bound))


def machine_info() -> dict[str, Any]:
    """Where this process runs: architecture, CPU model, logical cores, GPU (when torch is already loaded)."""
    info: dict[str, Any] = {"processor": platform.machine() or platform.processor(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = " ".join(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    torch = sys.modules.get("torch")  # never imported here: it takes seconds
    if torch is not None and torch.cuda.is_available():
        info["gpu"] = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    return info


def describe(machine: dict[str, Any] | None) -> str:
    """A result's ``machine`` dict in a few words: ``2 cores, x86_64`` / ``16 cores, AMD EPYC 9654, 1x H200``."""
    machine = machine or {}
    cpu = machine.get("cpu_model") or machine.get("processor") or "processor not recorded"
    text = f"{machine['cpus']} cores, {cpu}" if machine.get("cpus") else f"{cpu}, cores not recorded"
    return f"{text}, {machine['gpu']}" if machine.get("gpu") else text


def now() -> str:
    """The time a result is written, UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Rows:
    """Rows of one result: ``table = Rows(result); table.add(...); return table.rows``."""

    def __init__(self, result: dict[str, Any]):
        self.machine = describe(result.get("machine"))
        self.rows: list[dict[str, Any]] = []

    def add(self, figure: str, value: float | None, unit: str, target: str | None = None, *,
            variant: str | None = None, seed: int | None = None, note: str | None = None) -> dict[str, Any]:
        if target is not None:
            parse_target(target)  # a malformed claim fails where it is written
        values = {"figure": figure, "variant": variant, "seed": seed,
                  "value": None if value is None else float(value), "unit": unit, "target": target,
                  "met": check(value, target), "note": note, "machine": self.machine}
        row = {k: values[k] for k in FIELDS if k in REQUIRED or values[k] is not None}
        self.rows.append(row)
        return row


def with_rows(result: dict[str, Any], rows: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> dict[str, Any]:
    """`result` with its ``rows`` (re)computed, placed last (before ``versions``, which stays at the end)."""
    out = {k: v for k, v in result.items() if k not in ("rows", "versions")}
    out["rows"] = rows(result)
    if "versions" in result:
        out["versions"] = result["versions"]
    return out


ROWS_ONLY_HELP = "recompute the rows of the results file --out from its stored measurements; run nothing"


MAX_RESULTS_BYTES = 64 << 20  # a results file larger than this is refused before it is read


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is out of range (a results file holds finite numbers)")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number (a results file holds finite numbers)")


def read_results(path: str | Path) -> dict[str, Any]:
    """A stored results file, read within bounds: a regular file of at most `MAX_RESULTS_BYTES`, UTF-8 JSON
    holding an object of finite numbers (``1e400``, ``NaN`` and ``Infinity`` refused). Anything else is a
    `SystemExit` with one line naming the file (no traceback)."""
    import stat

    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise SystemExit(f"{path}: cannot read the results file ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise SystemExit(f"{path}: not a regular file, so not a results file")
    with open(path, "rb") as fh:
        data = fh.read(MAX_RESULTS_BYTES + 1)  # bounded even where the size lies (/proc)
    if len(data) > MAX_RESULTS_BYTES:
        raise SystemExit(f"{path}: larger than {MAX_RESULTS_BYTES >> 20} MiB, too large for a results file")
    try:
        result = json.loads(data.decode("utf-8"), parse_float=_finite, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise SystemExit(f"{path}: not UTF-8 text (byte {exc.start}), so not a results file") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:
        raise SystemExit(f"{path}: {exc}") from None
    if not isinstance(result, dict):
        raise SystemExit(f"{path}: a results file holds a JSON object, this one a {type(result).__name__}")
    return result


def rewrite(path: str | Path, rows: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> int:
    """Recompute the rows of the stored results file `path` in place (a script's ``--rows-only``); exit status."""
    from purecover.utils.io import atomic_write_json

    path = Path(path)
    result = with_rows(read_results(path), rows)
    atomic_write_json(path, result)
    print(f"{path}: {len(result['rows'])} rows")
    return 0
