"""Where the real sample files live (for tests and benchmarks): ``$PURECOVER_SAMPLE_DATA`` or ``../shared/data``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SAMPLE_FILES", "sample_data_dir"]

SAMPLE_FILES = {
    "hotpotqa": "hotpotqa_dev_sample.json",
    "2wiki": "2wiki_dev_sample.json",
    "musique": "musique_dev_sample.jsonl",
    "strategyqa": "strategyqa_dev_sample.json",
}


def sample_data_dir() -> Path | None:
    """The sample folder if it exists, else None. Relative default: ``<repo>/../shared/data``."""
    env = os.environ.get("PURECOVER_SAMPLE_DATA")
    candidates = [Path(env)] if env else []
    repo = Path(__file__).resolve().parents[2]
    candidates += [repo.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for c in candidates:
        if c.is_dir() and (c / SAMPLE_FILES["hotpotqa"]).is_file():
            return c
    return None
