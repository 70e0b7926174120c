"""Training progress as one readable log line per ``logging_steps``, instead of the Trainer's printed dicts.

transformers prints each log as a Python dict (``{'loss': '2.504', 'grad_norm': ...}``), through its progress
bar or, without one, with ``print``. `TrainingLogLines` replaces that printing (the bar itself stays when
progress is shown) with a line on the ``purecover.train`` logger, e.g.::

    train step 20/150 (13%): loss 2.504 (L_CL 0.909, L_LM 1.595), grad norm 3.68, lr 4.68e-04, epoch 0.25;
    1.9 s/step, 2,316 prompt tokens/s, about 4m08s left

(the tokens of the prompts this process trained on, since this run started; on a CUDA device also the peak GPU
memory torch has allocated, ``peak GPU memory 35.2 GB``) and an evaluation line (``eval loss ...``) for the calibration split's logs. Besides the ``logging_steps`` lines, a
line comes after the first step of a run (so a slow machine shows its pace at once, not after ten steps) and
whenever `HEARTBEAT_SECONDS` pass without one: the Trainer is asked to log at that step (its loss is the mean
since the last line, as at any logging step).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from ..utils.progress import duration_text, use_bars

__all__ = ["HEARTBEAT_SECONDS", "QuietProgressCallback", "TrainingLogLines", "format_log_line", "peak_gpu_memory_gb",
           "use_log_lines"]

log = logging.getLogger("purecover.train")
HEARTBEAT_SECONDS = 60.0  # at most this long between two training lines

_NAMES = {"l_cl": "L_CL", "l_lm": "L_LM", "l_bce": "L_BCE"}


def format_log_line(logs: dict[str, Any], step: int, max_steps: int, seconds_per_step: float | None,
                    tokens_per_second: float | None = None, peak_gpu_gb: float | None = None) -> str | None:
    """One line for a Trainer log (None for logs that carry nothing to show, such as the final summary).
    `tokens_per_second`: prompt tokens trained on per second; `peak_gpu_gb`: peak GPU memory allocated (GB)."""
    def num(key: str, fmt: str = ".3f") -> str:
        return format(float(logs[key]), fmt)

    total = f"/{max_steps} ({100 * step / max_steps:.0f}%)" if max_steps > 0 else ""
    if "eval_loss" in logs:
        parts = [f"eval loss {num('eval_loss')}"]
        parts += [f"{_NAMES.get(k[5:], k[5:])} {num(k)}" for k in ("eval_l_cl", "eval_l_lm", "eval_l_bce") if k in logs]
        return f"eval at step {step}{total}: " + ", ".join(parts)
    if "loss" not in logs:
        return None
    losses = [f"{_NAMES[k]} {num(k)}" for k in ("l_cl", "l_lm", "l_bce") if k in logs]
    line = f"train step {step}{total}: loss {num('loss')}" + (f" ({', '.join(losses)})" if losses else "")
    if "grad_norm" in logs:
        line += f", grad norm {num('grad_norm', '.3g')}"
    if "learning_rate" in logs:
        line += f", lr {num('learning_rate', '.3g')}"
    if "epoch" in logs:
        line += f", epoch {num('epoch', '.2f')}"
    if seconds_per_step is not None:
        line += f"; {seconds_per_step:.2g} s/step"
        if tokens_per_second is not None:
            line += f", {tokens_per_second:,.0f} prompt tokens/s"
        if peak_gpu_gb is not None:
            line += f", peak GPU memory {peak_gpu_gb:.1f} GB"
        if max_steps > step:
            line += f", about {duration_text(seconds_per_step * (max_steps - step))} left"
    return line


def peak_gpu_memory_gb() -> float | None:
    """The peak memory torch has allocated on the current CUDA device (GB), None without one in use."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated() / 1e9


class TrainingLogLines(TrainerCallback):
    """Logs `format_log_line` of every Trainer log on the main process; speed from the steps of this run."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None
        self._last_line = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = (time.perf_counter(), int(state.global_step))
        self._last_line = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Ask for a log line after the run's first step and when `HEARTBEAT_SECONDS` passed without one."""
        first = self._start is not None and state.global_step == self._start[1] + 1
        if first or time.perf_counter() - self._last_line >= HEARTBEAT_SECONDS:
            control.should_log = True
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or not state.is_world_process_zero:
            return
        speed = tokens = None
        if self._start is not None and state.global_step > self._start[1]:
            elapsed = time.perf_counter() - self._start[0]
            speed = elapsed / (state.global_step - self._start[1])
            if "prompt_tokens" in logs and elapsed > 0:
                tokens = float(logs["prompt_tokens"]) / elapsed
        line = format_log_line(logs, int(state.global_step), int(state.max_steps or 0), speed, tokens,
                               peak_gpu_memory_gb())
        if line:
            log.info("%s", line)
            self._last_line = time.perf_counter()


class QuietProgressCallback(ProgressCallback):
    """The Trainer's progress bar without its printed log dicts (`TrainingLogLines` logs them)."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        return None


def use_log_lines(trainer: Any, show_progress: bool) -> None:
    """Replace `trainer`'s dict printing by `TrainingLogLines` (and a quiet bar when `show_progress`)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if show_progress and use_bars():  # a bar on a terminal; in a log file the lines alone
        trainer.add_callback(QuietProgressCallback)
    trainer.add_callback(TrainingLogLines())
