"""Shared command-line entry for stage modules run with ``python -m`` (e.g. under accelerate launch)."""

from __future__ import annotations

import argparse
import logging
import sys


def stage_main(stage: str, prog: str, description: str | None, argv: list[str] | None = None) -> int:
    """Parse ``RECIPE [--set k=v ...] [-q]``, validate the whole recipe, run registered `stage`
    (`purecover.stages.run_stage`) and print its summary.

    A recipe error is one line on stderr and exit code 2, before the stage starts (like `purecover`).
    """
    from ..config import ConfigError
    from ..stages import run_stage
    from ..validate import load_validated_recipe

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        recipe = load_validated_recipe(args.recipe, args.overrides)
    except ConfigError as exc:
        print(f"{prog}: recipe error: {exc}", file=sys.stderr)
        return 2
    print(run_stage(stage, recipe, show_progress=not args.quiet))
    return 0
