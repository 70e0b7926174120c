"""The ``python -m`` command lines of the stages (e.g. under accelerate launch or torchrun): ``python -m
purecover.train``, ``purecover.teacher``, ``purecover.select`` and ``purecover.data.encode``.

Command-line level, like `purecover.cli`: it validates the whole recipe first (`purecover.validate`) and runs a
stage through the contract, so it may import anything, and only command-line code imports it: the packages'
``__main__`` modules and a module's ``if __name__ == "__main__":`` block (docs/development/architecture.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from .records import StageSummary
from .utils.entry import quiet_library_notices

__all__ = ["encode_main", "recipe_main", "stage_main"]


def recipe_main(prog: str, description: str | None, run: Callable[..., Any],
                argv: list[str] | None = None, flags: dict[str, str] | None = None) -> int:
    """Parse ``RECIPE [--set k=v ...] [-q]``, validate the whole recipe, call ``run(recipe, show_progress)``
    and print what it returns. `flags` (``--name`` -> help) are extra switches passed to `run` as keywords.

    A recipe error (from validation or from `run`) is one line on stderr and exit code 2 (like `purecover`).
    """
    from .config import ConfigError
    from .validate import load_validated_recipe

    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    for flag, help_text in (flags or {}).items():
        parser.add_argument(f"--{flag}", action="store_true", help=help_text)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_notices()
    try:
        recipe = load_validated_recipe(args.recipe, args.overrides)
        result = run(recipe, not args.quiet, **{f.replace("-", "_"): getattr(args, f.replace("-", "_"))
                                                for f in (flags or {})})
    except ConfigError as exc:
        print(f"{prog}: recipe error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json_dict()) if isinstance(result, StageSummary) else result)
    return 0


def stage_main(stage: str, prog: str, description: str | None, argv: list[str] | None = None) -> int:
    """`recipe_main` running registered `stage` (`purecover.contract.run_stage`) and printing its summary."""
    from .contract import run_stage

    return recipe_main(prog, description,
                       lambda recipe, progress, rerun: run_stage(stage, recipe, show_progress=progress, force=rerun),
                       argv, flags={"rerun": "run the stage even when it is complete (as `pipeline --from`)"})


def encode_main(argv: list[str] | None = None) -> int:
    """``python -m purecover.data.encode RECIPE [--set k=v ...]``: `purecover.data.encode.encode_recipe_corpus` on
    this process of the launch, its summary printed as JSON."""
    from .data import encode

    return recipe_main("python -m purecover.data.encode", encode.__doc__,
                       lambda recipe, progress: encode.encode_recipe_corpus(recipe, show_progress=progress).to_json(),
                       argv)
