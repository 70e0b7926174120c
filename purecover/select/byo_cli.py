"""Command-line options of ``purecover select --selector DIR --input FILE --out FILE`` (light: no torch).

`add_byo_arguments` adds them to the ``select`` subcommand (and ``python -m purecover.select``);
`byo_usage_error` says what is wrong when they are mixed with a recipe or incomplete; `run_byo`
runs `purecover.select.byo.run_byo_select` (imported only then).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..records import ByoSelectSummary

__all__ = ["BYO_FLAGS", "add_byo_arguments", "byo_requested", "byo_usage_error", "run_byo", "select_command"]

_TRIPLE = ("selector", "input", "out")
_EXTRAS = ("trec", "trec_all", "run_name", "batch_size", "backend", "device", "dtype")
BYO_FLAGS = tuple("--" + name.replace("_", "-") for name in (*_TRIPLE, *_EXTRAS))


def select_command(p: argparse.ArgumentParser) -> Callable[..., int]:
    """The select stage's `purecover.stages.Stage.command` hook: add the bring-your-own options; the handler
    runs the registered stage for RECIPE, or bring-your-own selection for --selector/--input/--out."""
    add_byo_arguments(p)
    return _select_or_byo


def _select_or_byo(args: argparse.Namespace, default: Callable[[argparse.Namespace], int]) -> int:
    import sys

    if not byo_requested(args):
        return default(args)
    problem = byo_usage_error(args)
    if problem:
        print(f"usage: purecover select RECIPE [--set ...] | purecover select --selector DIR --input FILE --out FILE "
              f"[--trec FILE] ...\npurecover select: error: {problem}", file=sys.stderr)
        return 2
    from ..utils.entry import print_summary

    print_summary("select", run_byo(args))
    return 0


def add_byo_arguments(p: argparse.ArgumentParser) -> None:
    """The bring-your-own options (all default to None, so a given one is recognisable)."""
    g = p.add_argument_group(
        "bring your own data (instead of RECIPE)",
        "select with an exported selector for any {qid, question, docs: [{doc_id?, title?, text}]} JSONL; "
        "--selector, --input and --out together, without RECIPE or --set")
    g.add_argument("--selector", metavar="DIR", help="an exported selector directory (purecover export)")
    g.add_argument("--input", metavar="FILE", help="questions with their candidates, one JSON object a line")
    g.add_argument("--out", metavar="FILE", help="selections JSONL to write (resumable: rerun to continue)")
    g.add_argument("--trec", metavar="FILE", help="also write a TREC run file of the selected docs")
    g.add_argument("--trec-all", action="store_true", default=None,
                   help="with --trec: rank every candidate (the selected first), not only the selected")
    g.add_argument("--run-name", metavar="NAME", help="the TREC run name column (default: purecover)")
    g.add_argument("--batch-size", type=int, metavar="N", help="questions per batch (default 8)")
    g.add_argument("--backend", choices=["hf", "vllm"], help="selector backend (default hf)")
    g.add_argument("--device", metavar="DEVICE", help="hf backend: auto | cpu | cuda[:N] (default auto)")
    g.add_argument("--dtype", metavar="DTYPE", help="auto | float32 | bfloat16 | float16 (default auto)")


def byo_requested(args: argparse.Namespace) -> bool:
    """Whether any bring-your-own option was given."""
    return any(getattr(args, name, None) is not None for name in (*_TRIPLE, *_EXTRAS))


def byo_usage_error(args: argparse.Namespace) -> str | None:
    """Why the options cannot run (mixed with RECIPE/--set, or an incomplete triple), else None."""
    given = [name for name in (*_TRIPLE, *_EXTRAS) if getattr(args, name, None) is not None]
    flags = ", ".join("--" + n.replace("_", "-") for n in given)
    if getattr(args, "recipe", None) is not None or getattr(args, "overrides", None):
        return (f"{flags} select with your own data and take no RECIPE or --set; run either "
                "`purecover select RECIPE [--set ...]` or `purecover select --selector DIR --input FILE --out FILE`")
    missing = ["--" + n for n in _TRIPLE if getattr(args, n, None) is None]
    if missing:
        return (f"{' and '.join(missing)} missing: bring-your-own selection needs --selector DIR, --input FILE "
                f"and --out FILE (given: {flags})")
    if args.trec_all and args.trec is None:
        return "--trec-all needs --trec FILE"
    if args.batch_size is not None and args.batch_size < 1:
        return f"--batch-size must be >= 1, got {args.batch_size}"
    if args.backend == "vllm" and args.device is not None:
        return "--device is for the hf backend (vllm places the model itself)"
    return None


def run_byo(args: argparse.Namespace) -> ByoSelectSummary:
    """Run bring-your-own selection from parsed options (checked with `byo_usage_error` first)."""
    from .byo import run_byo_select
    from .select_stage import BATCH_SIZE

    return run_byo_select(args.selector, args.input, args.out, trec_path=args.trec, trec_all=bool(args.trec_all),
                          run_name=args.run_name, batch_size=args.batch_size or BATCH_SIZE,
                          backend=args.backend or "hf", device=args.device or "auto", dtype=args.dtype or "auto",
                          show_progress=not getattr(args, "quiet", False))
