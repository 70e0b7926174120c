"""The whole run's training loss across resumes, from the log history (`purecover.train.loss_history`)."""

from __future__ import annotations

import pytest

from purecover.train.loss_history import ResumeMarker, whole_run_train_loss

STEP_LOSSES = [5.0, 4.0, 3.5, 3.0, 2.0, 1.5, 1.2, 1.0]  # the loss of steps 1..8


def _logs(steps_logged, start=0):
    """Trainer-style log entries: the mean loss since the previous log (or `start`) at each logged step."""
    out, prev = [], start
    for s in steps_logged:
        out.append({"step": s, "loss": sum(STEP_LOSSES[prev:s]) / (s - prev)})
        prev = s
    return out


def test_uninterrupted_run_equals_the_trainers_own_mean():
    mean = sum(STEP_LOSSES) / 8
    got = whole_run_train_loss(_logs([3, 6]), 8, mean)  # steps 7-8 after the last log
    assert got.train_loss == pytest.approx(mean) and got.train_loss_steps == 8 and got.resumes == []


def test_resumed_run_covers_the_steps_before_the_checkpoint():
    # logged every 2 steps, checkpoint at 4, killed at 5, resumed at 4: the last call covers steps 5..8.
    history = [*_logs([2, 4]), {"step": 4, "resumed_at_step": 4}, *_logs([6], start=4)]
    this_run = sum(STEP_LOSSES[4:]) / 4
    got = whole_run_train_loss(history, 8, this_run)
    assert got.train_loss == pytest.approx(sum(STEP_LOSSES) / 8)  # equals the uninterrupted run
    assert got.train_loss_this_run == pytest.approx(this_run) != pytest.approx(got.train_loss)
    assert got.train_loss_steps == 8 and got.resumes == [4]


def test_steps_never_logged_before_a_resume_are_left_out_and_counted():
    # logged every 3 steps, checkpoint at 4 (step 4 was never logged), resumed twice.
    history = [*_logs([3]), {"step": 4, "resumed_at_step": 4}, *_logs([6], start=4),
               {"step": 7, "resumed_at_step": 7}]
    got = whole_run_train_loss(history, 8, STEP_LOSSES[7])
    known = [*STEP_LOSSES[:3], *STEP_LOSSES[4:6], STEP_LOSSES[7]]  # steps 4 and 7 are in no record
    assert got.train_loss == pytest.approx(sum(known) / len(known))
    assert got.train_loss_steps == 6 and got.resumes == [4, 7]


def test_resume_marker_only_on_a_resume():
    class State:
        def __init__(self, step):
            self.global_step, self.log_history = step, []

    fresh, resumed = State(0), State(40)
    ResumeMarker().on_train_begin(None, fresh, None)
    ResumeMarker().on_train_begin(None, resumed, None)
    assert fresh.log_history == [] and resumed.log_history == [{"step": 40, "resumed_at_step": 40}]
