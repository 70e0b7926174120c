"""Training outputs as readable as the umask says.

Libraries save some files through temporary files created 0600 (peft's ``adapter_model.safetensors``, for one), so
a checkpoint would be readable by its owner only whatever the umask. `UmaskCallback` gives each checkpoint the
umask's permissions once the Trainer has saved it; the train stage does the same for ``checkpoints/final``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..utils.io import apply_umask

__all__ = ["UmaskCallback"]


class UmaskCallback(TrainerCallback):
    """After every checkpoint save (main process): ``output_dir/checkpoint-<step>`` gets 0666/0777 & ~umask."""

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if checkpoint.is_dir():
            apply_umask(checkpoint)
