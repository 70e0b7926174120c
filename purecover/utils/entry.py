"""Shared command-line entry for stage modules run with ``python -m`` (e.g. under accelerate launch)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any


def stage_main(run: Callable[..., dict[str, Any]], prog: str, description: str | None,
               argv: list[str] | None = None) -> int:
    """Parse ``RECIPE [--set k=v ...] [-q]``, run the stage and print its summary."""
    from ..config import load_recipe

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(run(load_recipe(args.recipe, args.overrides), show_progress=not args.quiet))
    return 0
