"""``python -m purecover.select RECIPE [--set k=v ...]``: the select stage; or
``python -m purecover.select --selector DIR --input FILE --out FILE [--trec FILE] ...``: bring your own data."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ..entry import stage_main
from .byo_cli import BYO_FLAGS, add_byo_arguments, byo_usage_error, run_byo

PROG = "python -m purecover.select"


def byo_main(argv: list[str]) -> int:
    """Bring-your-own selection from `argv` (usage errors: exit code 2); prints the summary as JSON."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("recipe", nargs="?")  # only so that mixing it in gets the usage error
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    add_byo_arguments(parser)
    args = parser.parse_args(argv)
    problem = byo_usage_error(args)
    if problem:
        parser.error(problem)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(json.dumps(run_byo(args).to_json_dict(), indent=2))
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    if any(a.split("=", 1)[0] in BYO_FLAGS for a in argv):
        sys.exit(byo_main(argv))
    sys.exit(stage_main("select", PROG, __doc__))
