"""What every command line of purecover shares: the --log-level help, quieting library notices, printing a stage's
summary. The ``python -m`` entries of the stages themselves are in `purecover.entry` (command-line level)."""

from __future__ import annotations

import json
import logging
import os

from ..records import StageSummary

LOG_LEVEL_HELP = ("how much the command logs: WARNING and ERROR only problems, INFO also progress, DEBUG also "
                  "details and the traceback of an unexpected error")

# Library notices that say nothing to a purecover user: DeepSpeed announcing the CPU accelerator whenever it is
# imported (building a tokenizer included), and deprecations of arguments that transformers and torch pass to
# themselves. The command-line entries drop them; the library, imported by your code, leaves them alone.
_DEEPSPEED_NOTICES = ("Setting accelerator to CPU", "Setting ds_accelerator to")
_LIBRARY_DEPRECATIONS = (r"`past_key_values` is deprecated", r"`is_gradient_checkpointing` is deprecated")


_TRANSFORMERS_NOTICES = {"transformers.utils.generic": "`past_key_values`/`cache_params` are deprecated"}


def _not_a_deepspeed_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_DEEPSPEED_NOTICES)


def _not_a_transformers_notice(record: logging.LogRecord) -> bool:
    notice = _TRANSFORMERS_NOTICES.get(record.name)
    return notice is None or not str(record.msg).startswith(notice)


def quiet_library_notices() -> None:
    """Drop the notices above for this process (command-line entries call it first). Written to a log file
    rather than a terminal, the libraries' own progress bars (transformers' "Loading weights", the Hub's
    downloads) are switched off as well: purecover's stages log their progress as lines there
    (`purecover.utils.progress`)."""
    import warnings

    from .progress import use_bars

    if not use_bars():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by huggingface_hub and transformers

    deepspeed = logging.getLogger("DeepSpeed")  # the logger DeepSpeed creates on import (same object)
    if _not_a_deepspeed_notice not in deepspeed.filters:
        deepspeed.addFilter(_not_a_deepspeed_notice)
    for name in _TRANSFORMERS_NOTICES:  # the module's logger (the same object when transformers creates it)
        module_logger = logging.getLogger(name)
        if _not_a_transformers_notice not in module_logger.filters:
            module_logger.addFilter(_not_a_transformers_notice)
    for message in _LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)


def print_summary(stage: str, summary: StageSummary) -> None:
    """``purecover STAGE: done`` and the summary's fields, one per line."""
    fields = summary.to_json_dict()
    width = max((len(k) for k in fields), default=0)
    print(f"purecover {stage}: done")
    for key, value in fields.items():
        shown = json.dumps(value) if not isinstance(value, str) else value
        print(f"  {key:<{width}}  {shown}")
