"""``python -m purecover.select RECIPE [--set k=v ...]``: the select stage."""

from __future__ import annotations

import sys

from ..utils.entry import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("select", "python -m purecover.select", __doc__))
