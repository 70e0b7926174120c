"""Experiment tracking of stage summaries (recipe section ``tracking``; wandb, off by default).

`track_stage` logs one finished stage invocation as one wandb run: ``job_type`` = the stage name,
``group`` = the run directory's name, ``name`` = ``tracking.run_name`` (default: the run directory's
name), ``config`` = the resolved recipe, ``summary`` = the stage summary's scalars flattened with
dotted keys (``em@5.retrieval``), plus optional tables (`wandb.Table`, logged as ``<name>_table`` so
that they never collide with a summary key). With ``report_to: none`` it
does nothing and never imports wandb. Any wandb failure (not installed, not logged in while online,
a broken service) is one warning line; the stage never fails because of tracking.

`training_tracking` does the same for the train stage, where transformers' ``WandbCallback`` logs:
it picks ``report_to`` (``student.training.report_to`` when set, else ``tracking.report_to``) and
the environment variables that callback reads (project, entity, group, job type).
"""

from __future__ import annotations

import contextlib
import logging
import netrc
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from ..config import Recipe, recipe_to_dict
from ..records import StageSummary

log = logging.getLogger(__name__)

__all__ = ["Table", "flatten_summary", "track_stage", "training_tracking"]

Table = tuple[Sequence[str], Sequence[Sequence[Any]]]  # (column names, rows)
_OFFLINE_MODES = ("offline", "dryrun", "disabled")


def flatten_summary(summary: Mapping[str, Any], prefix: str = "") -> dict[str, float | int | bool | str]:
    """The scalar values of a (nested) summary under dotted keys: ``{"em@5": {"a": 1}}`` → ``{"em@5.a": 1}``.

    Lists and None are left out (tables carry the structured parts).
    """
    flat: dict[str, float | int | bool | str] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_summary(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            flat[name] = value
    return flat


def _unavailable() -> str | None:
    """Why wandb cannot track here (not installed; online without credentials), or None when it can."""
    try:
        import wandb  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"wandb cannot be imported ({type(exc).__name__}: {exc}); `pip install wandb`"
    if os.environ.get("WANDB_MODE", "online").lower() in _OFFLINE_MODES or os.environ.get("WANDB_API_KEY"):
        return None
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        if netrc.netrc(os.environ.get("NETRC")).authenticators(host):
            return None
    except (OSError, netrc.NetrcParseError):
        pass
    return (f"no wandb credentials for {host} (WANDB_API_KEY or ~/.netrc); run `wandb login` or set "
            "WANDB_MODE=offline")


def _names(recipe: Recipe) -> tuple[str, str]:
    """(run name, group) of this run directory."""
    group = recipe.run_path.resolve().name or "run"
    return recipe.tracking.run_name or group, group


def track_stage(recipe: Recipe, stage: str, summary: StageSummary | Mapping[str, Any],
                tables: Mapping[str, Table] | None = None) -> str | None:
    """Log `summary` (and `tables`) of one `stage` invocation to a new wandb run; returns its local directory.

    A `StageSummary` is logged as written (its ``to_json_dict``).
    None when ``tracking.report_to`` is ``none`` (wandb not imported) or when wandb failed (one warning).
    Call on the main process only.
    """
    cfg = recipe.tracking
    if cfg.report_to == "none":
        return None
    reason = _unavailable()
    if reason is not None:
        log.warning("tracking: %s stage not logged to wandb: %s", stage, reason)
        return None
    run = None
    try:
        import wandb

        name, group = _names(recipe)
        run = wandb.init(project=cfg.project, entity=cfg.entity, name=name, group=group, job_type=stage,
                         config=recipe_to_dict(recipe), reinit="create_new",
                         settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        run.summary.update(flatten_summary(summary.to_json_dict() if isinstance(summary, StageSummary) else summary))
        if tables:
            run.log({f"{key}_table": wandb.Table(columns=list(cols), data=[list(r) for r in rows])
                     for key, (cols, rows) in tables.items()})
        local = str(run.settings.sync_dir)
        run.finish()
        return local
    except Exception as exc:  # tracking never fails a stage
        log.warning("tracking: %s stage not logged to wandb: %s: %s", stage, type(exc).__name__,
                    " ".join(str(exc).split())[:300])
        if run is not None:
            with contextlib.suppress(Exception):  # already failing: the warning above is the message
                run.finish(exit_code=1)
        return None


def training_tracking(recipe: Recipe, training: Mapping[str, Any]) -> dict[str, str]:
    """TrainingArguments additions for tracking: ``report_to`` (and ``run_name``) unless `training` sets them.

    With wandb chosen here, sets the environment variables transformers' WandbCallback reads
    (WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_GROUP, WANDB_JOB_TYPE) from the recipe; when wandb is
    unusable (see `track_stage`) warns once and reports to ``none`` instead.
    """
    if "report_to" in training:
        return {}
    cfg = recipe.tracking
    if cfg.report_to == "none":
        return {"report_to": "none"}
    reason = _unavailable()
    if reason is not None:
        log.warning("tracking: train stage not logged to wandb: %s", reason)
        return {"report_to": "none"}
    name, group = _names(recipe)
    os.environ["WANDB_PROJECT"] = cfg.project
    if cfg.entity:
        os.environ["WANDB_ENTITY"] = cfg.entity
    os.environ["WANDB_RUN_GROUP"] = group
    os.environ["WANDB_JOB_TYPE"] = "train"
    return {"report_to": "wandb", **({} if "run_name" in training else {"run_name": name})}
