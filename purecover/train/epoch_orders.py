"""A fresh candidate order each epoch (``student.reshuffle_each_epoch``): the training questions as a dataset that
renders each question in an order drawn for the current epoch, and the Trainer callback that sets the epoch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from .data import LabelledQuestion, SelectorExample, candidate_order

__all__ = ["EpochShuffledDataset", "EpochViewCallback"]


class EpochShuffledDataset(torch.utils.data.Dataset):
    """The training questions with a fresh candidate order each epoch (``student.reshuffle_each_epoch``).

    Item i is copy ``v = i % shuffles`` of question ``i // shuffles`` (question-major, as `shuffled_views`), shown
    in `candidate_order` view ``epoch * shuffles + v`` and rendered when it is read (`render`). Epoch 0 is
    exactly `shuffled_views`; each later epoch draws new orders, a pure function of (seed, epoch, copy, qid), so a
    run resumed mid-epoch sees what the uninterrupted run saw. `EpochViewCallback` sets the epoch.
    """

    def __init__(self, questions: Sequence[LabelledQuestion], shuffles: int, seed: int,
                 render: Callable[[LabelledQuestion], SelectorExample]) -> None:
        if shuffles < 1:
            raise ValueError(f"a fresh order each epoch needs candidate_shuffles >= 1, got {shuffles}")
        self.questions = list(questions)
        self.shuffles = shuffles
        self.seed = seed
        self.render = render
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.questions) * self.shuffles

    def __getitem__(self, i: int) -> SelectorExample:
        q = self.questions[i // self.shuffles]
        view = self.epoch * self.shuffles + i % self.shuffles
        return self.render(q.permuted(candidate_order(q.qid, len(q.docs), self.seed, view)))


class EpochViewCallback(TrainerCallback):
    """At the start of each epoch, `EpochShuffledDataset.set_epoch` to the epoch the Trainer is in (from
    ``state.epoch``: 0 at a fresh start, k after k whole epochs, the epoch under way when resumed mid-epoch)."""

    def __init__(self, dataset: EpochShuffledDataset) -> None:
        self.dataset = dataset

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dataset.set_epoch(math.floor(float(state.epoch or 0.0) + 1e-6))
