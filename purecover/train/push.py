"""Uploading a finished export to the Hugging Face Hub (``purecover export RECIPE --push-to-hub REPO``).

`push_export` re-renders the model card (`refresh_model_card`, so that metrics written since the export
appear), then uploads run_dir/selector/ through `purecover.utils.hub.push_folder`, which records the push in
run_dir/export.push.json and skips a repeated push of the same files.
"""

from __future__ import annotations

import logging

from ..config import Recipe
from ..models.selector import SELECTOR_CONFIG, read_selector_config
from ..records import RecordError
from ..rundir import RunDir
from ..stages import config_hash as stage_config_hash
from ..utils.hub import PushResult
from ..utils.io import atomic_write_text
from ..utils.rundir_lock import locked_stage
from .export_stage import STUDENT_META, read_student_meta
from .model_card import render_model_card

log = logging.getLogger(__name__)

__all__ = ["PUSH_RECORD", "push_export", "refresh_model_card"]

PUSH_RECORD = "export.push.json"  # run_dir/export.push.json: the last push of run_dir/selector (utils.hub)


def refresh_model_card(recipe: Recipe) -> bool:
    """Re-render run_dir/selector/README.md from the same inputs as at export time, so that metrics written
    since (run_dir/eval/metrics.json) appear; returns True when the card changed. Only README.md is rewritten
    (the weights and selector_config.json, hence the select stage's fingerprint, are untouched)."""
    rd = RunDir(recipe.run_path)
    out, ckpt = rd.path_of("selector"), rd.path_of("final")
    try:
        config = read_selector_config(out)
        meta = read_student_meta(ckpt)
    except (OSError, RecordError) as exc:
        log.warning("cannot refresh the model card of %s (%s or %s: %s); pushing it as it is", out,
                    out / SELECTOR_CONFIG, ckpt / STUDENT_META, exc)
        return False
    merged = not config.adapter and (ckpt / "adapter_config.json").is_file()
    card = render_model_card(config, meta, recipe.run_path, merged, license=recipe.export.license)
    readme = out / "README.md"
    if readme.is_file() and readme.read_text(encoding="utf-8") == card:
        return False
    atomic_write_text(readme, card)
    rd.record_outputs("export")  # the card is part of the export: its manifest records the new size
    log.info("refreshed the model card %s", readme)
    return True


@locked_stage("export")
def push_export(recipe: Recipe, repo_id: str, *, private: bool = False, revision: str | None = None,
                commit_message: str | None = None) -> PushResult:
    """Push the complete export run_dir/selector/ to the Hub repo `repo_id` (``purecover export --push-to-hub``).

    The card is refreshed first (`refresh_model_card`); the push is recorded in run_dir/export.push.json and a
    second push of the same files to the same repo and revision does nothing (`purecover.utils.hub.push_folder`).
    """
    from ..utils.hub import push_folder
    from ..utils.rundir_lock import run_dir_lock

    rd = RunDir(recipe.run_path)
    with run_dir_lock(recipe.run_path, "export"):  # the card is rewritten: no other writer meanwhile
        if rd.completed("export", stage_config_hash(recipe, "export")) is None:
            raise RuntimeError(f"{rd.path_of('selector')} is not a complete export for this recipe: run "
                               "`purecover export RECIPE` first")
        refresh_model_card(recipe)
        return push_folder(rd.path_of("selector"), repo_id, record=recipe.run_path / PUSH_RECORD, repo_type="model",
                           private=private, revision=revision,
                           commit_message=commit_message or f"Upload the purecover selector of {recipe.run_path.name}")
