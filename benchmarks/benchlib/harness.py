"""The small harness every benchmark script runs on: its shared options, its seed rows, merging, writing.

A script's ``main`` reads, whatever it measures::

    parser = harness.parser(__doc__, out="benchmarks/results/<name>.json")   # --out, --rows-only
    parser.add_argument(...)                                                  # the script's own options
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:                   # --rows-only (and --merge)
        return status
    ...                                                                       # measure: a result dict
    harness.write(args.out, result, rows)                                     # atomic, with its rows

Shared options (`parser`), each only where the script asks for it:

``--out FILE``         the results file (a `Path`; every script)
``--rows-only``        recompute the rows of the results file --out from its stored measurements (every script)
``--merge FILE...``    combine results files into --out, measuring nothing (``merge=HELP``; the script says how
                       its results combine, with `merged`: later files win per key)
``--seeds 0,1,2``      run at each seed (``seeds=[default]``; ``--seed N`` is the same as ``--seeds N``)
``--quick``            the script's short mode, which checks the code rather than measuring (``quick=HELP``;
                       older spellings such as ``--tiny`` stay as aliases)

Rows over seeds: `seed_rows` adds a figure's row at each seed, then ``<figure>_mean`` and ``<figure>_worst``
over the seeds (the worst carries the target; it is the highest value when the target is an upper bound, or,
without a target, when the figure is a cost: ``lower_is_better``; a figure with no better direction, such as a
subset's size, gets ``with_worst=False`` and no worst row);
`over_seeds` adds the mean and worst rows of per-seed rows already in a table. The row format and its helpers
are in `rows`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .rows import ROWS_ONLY_HELP, Rows, describe, parse_target, read_results, rewrite, with_rows

__all__ = ["add_history", "busy", "load", "malformed", "merge_files", "merged", "name_list", "over_seeds", "parse", "parser",
           "positive_seconds", "read_results", "seed_list", "seed_rows", "stored", "worst", "write"]

RowsFn = Callable[[dict[str, Any]], list[dict[str, Any]]]


# ------------------------------------------------------------------------------------------ command line


def parser(doc: str | None, out: str | Path, *, merge: str | None = None, seeds: Sequence[int] | None = None,
           quick: str | None = None, quick_aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    """An argument parser described by the script's docstring, with ``--out`` (default `out`) and
    ``--rows-only``; ``--merge`` when `merge` (its help) is given, ``--seeds``/``--seed`` when `seeds` (the
    default) is, ``--quick`` (and `quick_aliases`) when `quick` (its help) is."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(out), help="the results file (default: %(default)s)")
    p.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    if merge is not None:
        p.add_argument("--merge", type=Path, nargs="+", default=None, metavar="FILE", help=merge)
    if seeds is not None:
        p.add_argument("--seeds", type=seed_list, default=list(seeds),
                       help="comma-separated seeds, the benchmark runs at each (default: %(default)s)")
        p.add_argument("--seed", type=int, default=None, help="one seed (the same as --seeds N)")
    if quick is not None:
        p.add_argument("--quick", *quick_aliases, dest="quick", action="store_true", help=quick)
    return p


def parse(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line; ``--seed N`` becomes ``seeds == [N]``. An ``--out`` that is a folder (or any other
    non-file) is a usage error."""
    args = p.parse_args(argv)
    if getattr(args, "seed", None) is not None and hasattr(args, "seeds"):
        args.seeds = [args.seed]
    out = Path(args.out)
    if out.exists() and not out.is_file():
        p.error(f"--out {out} is {'a folder' if out.is_dir() else 'not a regular file'}: name a results file")
    progress_lines()
    return args


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler on whatever ``sys.stderr`` is at each line (a stderr redirected later is followed)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def progress_lines() -> logging.Handler:
    """The handler that writes the stages' progress (``purecover.progress``, INFO: questions done, questions a
    second, time left) to stderr, stamped like `log`: without one a benchmark that runs a stage in its own
    process shows no progress, since nothing configures logging there. Added once per process; the handler."""
    logger = logging.getLogger("purecover.progress")
    for handler in logger.handlers:
        if getattr(handler, "benchmark_progress", False):
            return handler
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    handler.benchmark_progress = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (``nan``, ``inf``, 0 and negatives refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds above 0, got {text!r}")
    return value


def name_list(text: str, choices: Sequence[str], what: str) -> list[str]:
    """``"a,b"`` -> ["a", "b"], each one of `choices`, at least one; ArgumentTypeError naming `what` otherwise."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"no {what} given in {text!r}; expected some of {', '.join(choices)}")
    unknown = sorted(set(names) - set(choices))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; expected {', '.join(choices)}")
    return names


@contextlib.contextmanager
def malformed(paths: Sequence[str | Path]) -> Iterator[None]:
    """Stored results that parse but lack what a script reads (a missing key, a string for a number, a list for
    an object): one line naming the files, no traceback (`SystemExit`)."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        shown = ", ".join(str(p) for p in paths)
        raise SystemExit(f"{shown}: malformed results ({type(exc).__name__}: {exc})") from None


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2] (distinct, in the order given)."""
    seeds = [int(x) for x in text.split(",") if x.strip()]
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated integers, got {text!r}")
    return seeds


def stored(args: argparse.Namespace, rows: RowsFn,
           merge: Callable[[argparse.Namespace], int] | None = None) -> int | None:
    """What ``--rows-only`` or ``--merge`` asks for, done on stored results (nothing is measured): the exit
    status; None when the script is to measure."""
    if args.rows_only:
        with malformed([args.out]):
            return rewrite(args.out, rows)
    if merge is not None and getattr(args, "merge", None):
        with malformed(args.merge):
            return merge(args)
    return None


# ------------------------------------------------------------------------------------------ results


def load(path: str | Path) -> dict[str, Any] | None:
    """A stored results file (`read_results`: bounded and checked), or None when there is none."""
    path = Path(path)
    return read_results(path) if path.exists() or path.is_symlink() else None


def merged(results: Iterable[dict[str, Any]], depth: int = 1) -> dict[str, Any]:
    """`results` combined, later ones winning per key: the top `depth` levels of keys are merged (a key's
    dicts combined key by key), deeper values are replaced whole. ``depth=1`` is ``{**a, **b, ...}``."""
    out: dict[str, Any] = {}
    for result in results:
        _merge_into(out, result, depth)
    return out


def add_history(out: dict[str, Any], part: dict[str, Any], path: str | Path) -> None:
    """Record in `out` (a merged result) where `part`, read from `path`, came from: its ``merged_from`` (or
    `path` itself) and its ``commands`` (or its own ``command``), each kept once, in order, so a merged file
    merged again keeps every run's file and command."""
    out.setdefault("merged_from", [])
    out.setdefault("commands", [])
    out["merged_from"] += [m for m in part.get("merged_from", [str(path)]) if m not in out["merged_from"]]
    commands = part.get("commands") or ([part["command"]] if part.get("command") else [])
    out["commands"] += [c for c in commands if c not in out["commands"]]


def merge_files(paths: Sequence[str | Path], combine: Callable[[dict[str, Any], dict[str, Any]], None],
                keep: Sequence[str] = ("date", "machine", "versions", "settings")) -> dict[str, Any]:
    """Results files as one: each file's history (`add_history`) and its `keep` keys (later files win), and its
    measurements folded in by ``combine(out, data)`` (the script's own rule for what a later file replaces)."""
    out: dict[str, Any] = {"merged_from": [], "commands": [], "datasets": {}}
    for p in paths:
        data = read_results(p)
        add_history(out, data, p)
        for k in keep:
            out[k] = data.get(k, out.get(k))
        combine(out, data)
    return out


def _merge_into(out: dict[str, Any], new: dict[str, Any], depth: int) -> None:
    for key, value in new.items():
        if depth > 1 and isinstance(value, dict) and isinstance(out.get(key), dict):
            _merge_into(out[key], value, depth - 1)
        else:
            out[key] = _copy(value, depth - 1)


def _copy(value: Any, depth: int) -> Any:
    """`value` with its top `depth` levels of dicts copied, so later merges do not change the inputs."""
    if depth > 0 and isinstance(value, dict):
        return {k: _copy(v, depth - 1) for k, v in value.items()}
    return value


def write(path: str | Path, result: dict[str, Any], rows: RowsFn) -> dict[str, Any]:
    """Write `result` with its rows (`with_rows`) to `path` atomically (readers see the old file or the new
    one, never half); the written dict."""
    from purecover.utils.io import atomic_write_json

    result = with_rows(result, rows)
    atomic_write_json(path, result)
    return result


# ------------------------------------------------------------------------------------------ rows over seeds


def worst(values: Sequence[float], target: str | None, lower_is_better: bool = False) -> float:
    """The worst of `values` against `target`: the highest for an upper bound (``<=``, ``<``), else the lowest;
    without a target, the highest when `lower_is_better` (a cost: seconds, memory), else the lowest."""
    if target is not None:
        lower_is_better = parse_target(target)[0].startswith("<")
    return max(values) if lower_is_better else min(values)


def seed_rows(table: Rows, figure: str, values: dict[int, float | None], unit: str, target: str | None = None,
              *, variant: str | None = None, note: str | None = None, lower_is_better: bool = False,
              with_worst: bool = True) -> None:
    """The figure at each seed (`values`: seed -> value, None when not measured), then, measured at several
    seeds, ``<figure>_mean`` (no target) and ``<figure>_worst`` (the target; see `worst` for
    `lower_is_better`; none when not `with_worst`) over the measured ones."""
    for seed, value in sorted(values.items()):
        table.add(figure, value, unit, target, variant=variant, seed=seed, note=note)
    have = [v for v in values.values() if v is not None]
    if len(values) > 1 and have:
        table.add(f"{figure}_mean", statistics.mean(have), unit, None, variant=variant, note=note)
        if with_worst:
            table.add(f"{figure}_worst", worst(have, target, lower_is_better), unit, target, variant=variant,
                      note=note)


def stamp_machines(table: Rows, start: int, machines: dict[int | None, Any], result: dict[str, Any]) -> None:
    """Give the rows of `table` added since `start` the machine their seed (or draw) was measured on: `machines`
    maps a seed to its entry's ``machine`` dict (None: the part's own; a missing dict: `result`'s). A row over
    seeds (``_mean``, ``_worst``) or without one of them names every distinct machine. Runs merged from sessions
    on different CPUs keep each entry's machine this way, not the last file's."""
    said = {k: describe(m or result.get("machine")) for k, m in machines.items()}
    for row in table.rows[start:]:
        over = row["figure"].endswith(("_mean", "_worst")) or row.get("seed") not in said
        row["machine"] = "; ".join(sorted(set(said.values()) if over else {said[row.get("seed")]}))


def over_seeds(table: Rows, per_seed: Sequence[dict[str, Any]], digits: int = 4) -> None:
    """``<figure>_mean`` and ``<figure>_worst`` of each (figure, variant) of the rows `per_seed` (each with
    its ``seed``), in their order: the mean rounded to `digits`, noted with the seeds; the worst with the
    target, noted with its seed."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in per_seed:
        groups.setdefault((r["figure"], r.get("variant")), []).append(r)
    for (figure, variant), group in groups.items():
        measured = [r for r in group if r["value"] is not None]
        if not measured:
            continue
        target = group[0].get("target")
        low = worst([r["value"] for r in measured], target)
        bad = next(r for r in measured if r["value"] == low)
        seeds = ", ".join(str(r["seed"]) for r in measured)
        table.add(f"{figure}_mean", round(sum(r["value"] for r in measured) / len(measured), digits),
                  group[0]["unit"], variant=variant, note=f"seeds {seeds}")
        table.add(f"{figure}_worst", bad["value"], group[0]["unit"], target, variant=variant,
                  note=f"seed {bad['seed']} of {seeds}")


@contextlib.contextmanager
def busy(n: int) -> Iterator[list[int]]:
    """`n` processes spinning on the CPU for the duration (the load of ``make test`` beside a run is about 2); yields
    their process ids."""
    import subprocess
    import sys

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield [p.pid for p in spinners]
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def log(msg: str) -> None:
    """A progress line on stdout, stamped with the wall-clock time (HH:MM:SS)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
