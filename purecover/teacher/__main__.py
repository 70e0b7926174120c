"""``python -m purecover.teacher RECIPE [--set k=v ...]``: the label stage, for `accelerate launch` / `torchrun`.

Every process labels its shard (rank r of w takes questions r, r+w, ...); rank 0 merges.
"""

from __future__ import annotations

import sys

from ..entry import stage_main

if __name__ == "__main__":
    sys.exit(stage_main("label", "python -m purecover.teacher", __doc__))
