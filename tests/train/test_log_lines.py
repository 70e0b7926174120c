"""Training logs are readable lines on the purecover.train logger, not the Trainer's printed dicts."""

from __future__ import annotations

import logging
import shutil

from purecover.train.log_lines import format_log_line
from purecover.train.train_stage import run_train_stage
from tests.run_dirs import new_run_dir
from tests.train.helpers import labelled_run
from tests.train.test_idempotent import recipe_for


def test_a_log_becomes_one_line_with_speed_and_time_left():
    line = format_log_line({"loss": 2.5039, "grad_norm": 3.679, "learning_rate": 4.679e-4, "l_cl": 0.9091,
                            "l_lm": 1.595, "epoch": 0.2532}, 20, 150, 1.9)
    assert line == ("train step 20/150 (13%): loss 2.504 (L_CL 0.909, L_LM 1.595), grad norm 3.68, lr 0.000468, "
                    "epoch 0.25; 1.9 s/step, about 4m07s left")
    # prompt tokens per second, and on a CUDA device the peak GPU memory
    assert format_log_line({"loss": 2.5}, 20, 150, 1.9, 2316.4, 35.21) == (
        "train step 20/150 (13%): loss 2.500; 1.9 s/step, 2,316 prompt tokens/s, peak GPU memory 35.2 GB, "
        "about 4m07s left")
    assert format_log_line({"eval_loss": 1.25, "eval_l_cl": 0.5}, 50, 150, None) == \
        "eval at step 50/150 (33%): eval loss 1.250, L_CL 0.500"
    assert format_log_line({"train_runtime": 12.0, "train_loss": 2.0}, 150, 150, 1.0) is None  # the final summary
    # the passage readout's per-passage BCE, when it is trained on
    assert format_log_line({"loss": 1.2, "l_cl": 0.5, "l_lm": 0.0, "l_bce": 0.7}, 10, 100, None) == \
        "train step 10/100 (10%): loss 1.200 (L_CL 0.500, L_LM 0.000, L_BCE 0.700)"


def test_a_real_training_run_logs_lines_and_prints_no_dicts(tmp_path, capsys, caplog):
    """With and without the progress bar: a line per logged step, no dict on stdout or stderr."""
    tiny, run = labelled_run(tmp_path)
    with caplog.at_level(logging.INFO, logger="purecover.train"):
        for show in (False, True):
            copy = tmp_path / f"progress-{show}"
            new_run_dir(copy)
            for name in ("candidates.jsonl", "labels.jsonl", "data.run.json", "label.run.json"):
                if (run / name).exists():
                    shutil.copy(run / name, copy / name)
            run_train_stage(recipe_for(run, tiny, f"run_dir={copy}"), show_progress=show)
    out = capsys.readouterr()
    assert "{'loss'" not in out.out + out.err and "'grad_norm'" not in out.out + out.err
    lines = [r.getMessage() for r in caplog.records if r.name == "purecover.train"]
    steps = [m for m in lines if m.startswith("train step ")]
    assert len(steps) == 8 and steps[0].startswith("train step 1/4 (25%): loss ") and "s/step" in steps[1]
    assert all(" prompt tokens/s" in m for m in steps)
    import torch

    assert ("peak GPU memory" in steps[1]) == torch.cuda.is_available()  # on the CPU no GPU figure


def test_a_line_after_the_first_step_and_then_at_least_every_heartbeat(monkeypatch):
    """A slow machine shows its pace after step 1, not after `logging_steps`; a long step cadence still gives a
    line every HEARTBEAT_SECONDS (make demo-real was silent for 21 minutes before its first line)."""
    from types import SimpleNamespace

    from purecover.train import log_lines

    clock = [100.0]
    monkeypatch.setattr(log_lines.time, "perf_counter", lambda: clock[0])
    callback = log_lines.TrainingLogLines()
    state = SimpleNamespace(global_step=4, max_steps=50, is_world_process_zero=True)  # a resumed run: from step 4
    callback.on_train_begin(None, state, SimpleNamespace())

    def step(seconds: float) -> bool:
        clock[0] += seconds
        state.global_step += 1
        return callback.on_step_end(None, state, SimpleNamespace(should_log=False)).should_log

    assert step(30.0) is True  # the first step of this run
    callback.on_log(None, state, SimpleNamespace(), logs={"loss": 1.0})  # the line it asked for
    assert step(30.0) is False and step(29.0) is False
    assert step(log_lines.HEARTBEAT_SECONDS) is True  # a minute without a line
