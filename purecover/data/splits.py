"""The question split by qid hash, shared by training (which questions it learns from) and evaluation
(which questions the student is scored on), so the two can never disagree."""

from __future__ import annotations

import hashlib

__all__ = ["in_heldout", "split_unit"]


def split_unit(qid: str, seed: int = 0) -> float:
    """A number in [0, 1) fixed by (seed, qid): the first 48 bits of sha256("seed:qid")."""
    return int(hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest()[:12], 16) / float(1 << 48)


def in_heldout(qid: str, eval_fraction: float, seed: int = 0) -> bool:
    """Whether question `qid` belongs to the held-out split (its `split_unit` is below `eval_fraction`)."""
    return split_unit(qid, seed) < eval_fraction
