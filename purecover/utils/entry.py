"""Shared command-line entry for modules run with ``python -m`` (e.g. under accelerate launch or torchrun)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

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


def recipe_main(prog: str, description: str | None, run: Callable[..., Any],
                argv: list[str] | None = None, flags: dict[str, str] | None = None) -> int:
    """Parse ``RECIPE [--set k=v ...] [-q]``, validate the whole recipe, call ``run(recipe, show_progress)``
    and print what it returns. `flags` (``--name`` -> help) are extra switches passed to `run` as keywords.

    A recipe error (from validation or from `run`) is one line on stderr and exit code 2 (like `purecover`).
    """
    from ..config import ConfigError
    from ..validate import load_validated_recipe

    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("-q", "--quiet", action="store_true")
    for flag, help_text in (flags or {}).items():
        parser.add_argument(f"--{flag}", action="store_true", help=help_text)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_notices()
    try:
        recipe = load_validated_recipe(args.recipe, args.overrides)
        result = run(recipe, not args.quiet, **{f.replace("-", "_"): getattr(args, f.replace("-", "_"))
                                                for f in (flags or {})})
    except ConfigError as exc:
        print(f"{prog}: recipe error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json_dict()) if isinstance(result, StageSummary) else result)
    return 0


def stage_main(stage: str, prog: str, description: str | None, argv: list[str] | None = None) -> int:
    """`recipe_main` running registered `stage` (`purecover.contract.run_stage`) and printing its summary."""
    from ..contract import run_stage

    return recipe_main(prog, description,
                       lambda recipe, progress, rerun: run_stage(stage, recipe, show_progress=progress, force=rerun),
                       argv, flags={"rerun": "run the stage even when it is complete (as `pipeline --from`)"})
