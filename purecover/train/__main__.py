"""``python -m purecover.train RECIPE [--set k=v ...]``: the train stage, for `accelerate launch`."""

from __future__ import annotations

import sys

from ..entry import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("train", "python -m purecover.train", __doc__))
