"""``python -m purecover.train RECIPE [--set k=v ...]``: the train stage, for `accelerate launch`."""

from __future__ import annotations

import sys

from ..utils.entry import stage_main
from .run import run_train_stage

if __name__ == "__main__":
    sys.exit(stage_main(run_train_stage, "python -m purecover.train", __doc__))
