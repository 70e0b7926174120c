"""The training loss of a whole run across resumes, from the Trainer's log history.

`transformers.Trainer` reports ``training_loss`` for the steps of the current ``train()`` call
only: after a resume it leaves out every step before the checkpoint. `ResumeMarker` records each
resume in ``state.log_history`` (``{"step": N, "resumed_at_step": N}``, saved with later
checkpoints), and `whole_run_train_loss` combines the logged interval means (``loss``, the mean
over the steps since the previous log or resume) with the current call's own mean into the mean
over every step whose loss is known. Steps trained after the last log before a kill and before the
checkpoint the run resumed from are not in any record; they are counted and left out (none are
when ``logging_steps`` divides ``save_steps``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

__all__ = ["ResumeMarker", "WholeRunLoss", "whole_run_train_loss"]

MARKER = "resumed_at_step"


class ResumeMarker(TrainerCallback):
    """Appends ``{"step": N, "resumed_at_step": N}`` to the log history when training resumes at step N > 0."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step > 0:
            state.log_history.append({"step": int(state.global_step), MARKER: int(state.global_step)})


@dataclass(frozen=True)
class WholeRunLoss:
    """The training loss of a whole run (`whole_run_train_loss`).

    `train_loss`: mean loss per step over the `train_loss_steps` steps whose loss is known;
    `train_loss_this_run`: the Trainer's own mean over the last ``train()`` call; `resumes`: the steps
    training resumed at, in order.
    """

    train_loss: float
    train_loss_steps: int
    train_loss_this_run: float
    resumes: list[int]


def whole_run_train_loss(log_history: Sequence[Mapping[str, float]], final_step: int,
                         run_loss: float) -> WholeRunLoss:
    """The `WholeRunLoss` of a run that ended at `final_step`, from the Trainer's `log_history`.

    `run_loss`: the Trainer's ``training_loss`` of the last ``train()`` call (the mean over its steps, from
    the last resume marker, or 0, to `final_step`). ``train_loss`` is the mean loss per step over the
    ``train_loss_steps`` steps whose loss is known (all of them when nothing was lost to a kill).
    """
    total, covered, start = 0.0, 0, 0
    run_start, run_logged_sum, run_logged_steps = 0, 0.0, 0
    resumes = []
    for entry in log_history:
        if MARKER in entry:
            start = run_start = int(entry[MARKER])
            run_logged_sum, run_logged_steps = 0.0, 0
            resumes.append(run_start)
        elif "loss" in entry and "step" in entry:
            steps = int(entry["step"]) - start
            if steps > 0:
                total += float(entry["loss"]) * steps
                covered += steps
                run_logged_sum += float(entry["loss"]) * steps
                run_logged_steps += steps
            start = int(entry["step"])
    run_steps = int(final_step) - run_start
    tail_steps = run_steps - run_logged_steps  # this call's steps after its last log
    if tail_steps > 0:
        total += float(run_loss) * run_steps - run_logged_sum
        covered += tail_steps
    return WholeRunLoss(train_loss=total / covered if covered else float(run_loss), train_loss_steps=covered,
                        train_loss_this_run=float(run_loss), resumes=resumes)
