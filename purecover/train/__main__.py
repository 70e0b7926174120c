"""``python -m purecover.train RECIPE [--set k=v ...]``: the train stage, for `accelerate launch`."""

from __future__ import annotations

import argparse
import logging
import sys

from ..config import load_recipe
from .run import run_train_stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m purecover.train", description=__doc__)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = run_train_stage(load_recipe(args.recipe, args.overrides), show_progress=not args.quiet)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
