"""The question split by qid hash, shared by training (which questions it learns from) and evaluation
(which questions the student is scored on), so the two can never disagree; and the seeded random
sample of questions (``data.sample`` before retrieval, ``eval.sample`` of the evaluation questions)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["SPLITS", "in_heldout", "question_split", "sample_questions", "sample_unit", "split_unit"]

SPLITS = ("train", "calib", "test")

T = TypeVar("T")


def split_unit(qid: str, seed: int = 0) -> float:
    """A number in [0, 1) fixed by (seed, qid): the first 48 bits of sha256("seed:qid")."""
    return int(hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest()[:12], 16) / float(1 << 48)


def in_heldout(qid: str, eval_fraction: float, seed: int = 0) -> bool:
    """Whether question `qid` belongs to the held-out split (its `split_unit` is below `eval_fraction`)."""
    return split_unit(qid, seed) < eval_fraction


def question_split(qid: str, eval_fraction: float, calibration_share: float = 0.5, seed: int = 0) -> str:
    """``train``, ``calib`` or ``test`` for question `qid`.

    The held-out questions (`in_heldout`: ``student.eval_fraction``) are never trained on; a second,
    independent hash splits them into ``calib`` (share `calibration_share`: τ3 and the eval loss) and
    ``test`` (every student figure the project reports). Changing `calibration_share` never moves a
    question between training and held-out.
    """
    if not in_heldout(qid, eval_fraction, seed):
        return "train"
    unit = int(hashlib.sha256(f"calib:{seed}:{qid}".encode()).hexdigest()[:12], 16) / float(1 << 48)
    return "calib" if unit < calibration_share else "test"


def sample_unit(qid: str, seed: int = 0) -> str:
    """The sort key of `qid` in the sample of `seed`: sha256("sample:seed:qid") as hex (salted, so a sample
    is independent of the held-out split `split_unit` draws with the same seed)."""
    return hashlib.sha256(f"sample:{seed}:{qid}".encode()).hexdigest()


def sample_questions(items: Sequence[T], n: int, seed: int = 0, key: str = "sample",
                     qid: Callable[[T], Any] = lambda item: item["qid"]) -> list[T]:  # type: ignore[index]
    """The `n` items whose qids have the smallest `sample_unit` for `seed`, in their input order.

    The chosen set depends only on the qids and the seed, never on the input order, and samples are
    nested: for one seed, the sample of 100 is a subset of the sample of 500. `n` larger than
    ``len(items)`` is a ValueError naming `key` (the recipe key) and the population size.
    """
    if n > len(items):
        raise ValueError(f"{key}: cannot sample {n} questions from {len(items)}; lower {key} or set it to null "
                         "(every question)")
    ranked = sorted(range(len(items)), key=lambda i: (sample_unit(str(qid(items[i])), seed), str(qid(items[i]))))
    chosen = set(ranked[:n])
    return [item for i, item in enumerate(items) if i in chosen]
