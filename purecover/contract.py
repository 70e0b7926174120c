"""The stage contract: `execute_stage` runs any registered stage the same way.

Under the run directory's lock: compute the config hash (`purecover.stages.config_hash`), ask the run
directory what running means now (`purecover.rundir.RunDir.status`), refuse a blocked stage, return the
stored summary of a complete one, set damaged outputs aside, mark the stage running, run its body, mark it
complete with what its outputs and inputs hold. This module sits above the registry (declarations) and the
run directory (files, manifests, locks) and imports both; neither imports it. The pipeline and the command
line call it; a stage's body receives a `StageRun` and calls `run_stage` for its ``python -m`` entry.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import os
from collections.abc import Callable
from pathlib import Path

from .config import Recipe
from .records import OutputDescription, RecordError, StageSummary, validate_record
from .rundir import FILES, RunDir, describe_input
from .stages import STAGES, Runner, config_hash, get_stage, load_hook, load_runner, not_needed, summary_type
from .utils.threads import apply_threads

__all__ = ["StageBlockedError", "StageOutcome", "StageRun", "execute_stage", "run_stage", "stage_directory",
           "stage_inputs", "stored_summary", "upstream_problem"]

log = logging.getLogger(__name__)


def stage_directory(recipe: Recipe, name: str) -> RunDir:
    """The run directory stage `name` writes for `recipe` (its `Stage.directory` hook; default run_dir)."""
    hook = get_stage(name).directory
    return RunDir(load_hook(hook)(recipe)) if hook else RunDir.of(recipe)


def stage_inputs(recipe: Recipe, name: str) -> dict[str, OutputDescription | None]:
    """What each input of stage `name` holds now (name -> `describe_input`, None when absent): its
    `Stage.inputs` hook, else its `reads` in its run directory."""
    stage = get_stage(name)
    if stage.inputs:
        paths = load_hook(stage.inputs)(recipe)
    else:
        rd = stage_directory(recipe, name)
        paths = {FILES[key]: rd.path_of(key) for key in stage.reads}
    return {key: describe_input(Path(path)) for key, path in paths.items()}


class StageBlockedError(RuntimeError):
    """A stage's outputs were made with another configuration or from other inputs: it refuses to mix them."""


def _producers(name: str) -> list[str]:
    """The pipeline stages before `name` whose outputs it reads, directly or through another such stage, in
    pipeline order."""
    order = list(STAGES)
    wanted, todo = set(), [name]
    while todo:
        reads = set(get_stage(todo.pop()).reads)
        for prior in order[:order.index(name)]:
            if prior not in wanted and reads & set(get_stage(prior).writes):
                wanted.add(prior)
                todo.append(prior)
    return [s for s in order if s in wanted]


def upstream_problem(recipe: Recipe, name: str) -> str | None:
    """Why stage `name`, run on its own, must not start: a stage whose outputs it reads (`_producers`, in the same
    run directory, needed by this recipe, not a ``rerun`` stage such as calibrate, whose bias the label stage
    checks key by key) is blocked, or stale: its manifest is not complete for this recipe
    and the inputs it holds now. None when every one is complete, or has no manifest (outputs made by hand are
    used as they are; missing ones are named by the stage itself). What `purecover pipeline` plans for every
    stage, checked for one."""
    if name not in STAGES:
        return None
    here = stage_directory(recipe, name).path
    for prior in _producers(name):
        rd = stage_directory(recipe, prior)
        if not_needed(recipe, prior) is not None or rd.path != here or get_stage(prior).on_change == "rerun":
            continue  # a rerun stage (calibrate) is recomputed, not refused: its reader checks what it reads
        try:
            status = rd.status(prior, config_hash(recipe, prior), stage_inputs(recipe, prior))
        except (OSError, ValueError) as exc:
            return f"the {prior} stage cannot be checked for this recipe ({exc})"
        if status.action == "skip":
            continue
        if status.action != "blocked" and rd.manifest(prior) is None:
            continue  # outputs made by hand (used as they are), or none: the stage names what it misses
        state = {"blocked": "blocked", "run": "not done for this recipe", "resume": "not finished",
                 "redo": "changed since it completed"}.get(status.action, status.action)
        return (f"the {prior} stage is {state} ({status.reason}); run `purecover {prior}` with this recipe "
                f"first, or `purecover pipeline`, which runs every stage that needs it")
    return None


@dataclasses.dataclass
class StageRun:
    """What a stage's body is given by `execute_stage`: the recipe, the run directory it writes, the config
    hash its manifest records, whether it resumes, and whether this process writes manifests (rank 0 of a
    launch). Callables appended to `after_complete` run (on every rank) once the manifest is complete."""

    name: str
    recipe: Recipe
    run_dir: RunDir
    config_hash: str
    action: str  # run | resume | redo | rerun (forced)
    show_progress: bool = True
    is_main: bool = True
    started: _dt.datetime = dataclasses.field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))
    after_complete: list[Callable[[StageSummary], None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class StageOutcome:
    """What `execute_stage` did (`action`: skip | ran | resumed | redone | rerun) and the stage's summary."""

    action: str
    summary: StageSummary


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def execute_stage(name: str, recipe: Recipe, show_progress: bool = True, *, force: bool = False,
                  with_before: bool = True, body: Runner | None = None,
                  config_hash_value: str | None = None, directory: RunDir | None = None) -> StageOutcome:
    """Run stage `name` under the one contract every stage follows.

    Run on its own (`with_before`): first the stages of `Stage.before`, then refuse (`StageBlockedError`) when a
    stage whose outputs it reads is blocked, stale or not run (`upstream_problem`). Then, under the run
    directory's lock: compute the config hash; ask `RunDir.status`; refuse a blocked stage
    (`StageBlockedError`); return the stored summary of a complete one (unless `force`: ``--from``); set
    damaged outputs aside (``redo``); mark the stage running; run its body; mark it complete with what its
    outputs and inputs hold. Manifests are written by rank 0 only (every rank of a launch runs the body).
    `body`, `config_hash_value` and `directory` replace the registry's (a selection with another selector).
    """
    stage = get_stage(name)
    if with_before:  # run on its own (not by the pipeline, which plans every stage itself)
        for prior in stage.before:
            if not_needed(recipe, prior) is None:
                execute_stage(prior, recipe, show_progress)
        problem = upstream_problem(recipe, name)
        if problem is not None:
            raise StageBlockedError(f"stage {name}: {problem}")
    rd = directory or stage_directory(recipe, name)
    with rd.lock(name):
        h = config_hash_value or config_hash(recipe, name)
        inputs_now = stage_inputs(recipe, name)
        status = rd.status(name, h, inputs_now)
        if status.action == "blocked":
            raise StageBlockedError(f"stage {name}: {status.reason}")
        if status.action == "skip" and not force:
            log.info("%s: complete for this configuration (%s); nothing to do", name, rd.path)
            return StageOutcome("skip", stored_summary(rd, name))
        main = _is_main_process()
        if status.action == "redo" and main:
            rd.set_aside(name)
        action = "rerun" if status.action == "skip" else status.action
        run = StageRun(name, recipe, rd, h, action, show_progress, main)
        if main:
            rd.begin(name, recipe, h, run.started, inputs=inputs_now)
        apply_threads(recipe.threads)  # for this stage: the machine's load may have changed since the last
        summary = (body or load_runner(name))(run)
        if main:
            summary = rd.complete(name, recipe, h, summary, run.started, inputs=stage_inputs(recipe, name))
        for hook in run.after_complete:
            hook(summary)
    done = {"run": "ran", "resume": "resumed", "redo": "redone", "rerun": "rerun"}[action]
    return StageOutcome(done, summary)


def stored_summary(rd: RunDir, name: str) -> StageSummary:
    """The summary in stage `name`'s manifest, as the stage's own summary record when it reads as one (a
    manifest from another version may not: then the summary as stored)."""
    manifest = rd.manifest(name)
    if manifest is None:
        return StageSummary()
    try:
        return validate_record(summary_type(name), manifest.summary.to_json_dict(), str(rd.manifest_path(name)))
    except RecordError:
        return manifest.summary


def run_stage(name: str, recipe: Recipe, show_progress: bool = True, with_before: bool = True,
              force: bool = False) -> StageSummary:
    """Run stage `name` (after its needed `before` stages when `with_before`); returns its summary."""
    return execute_stage(name, recipe, show_progress, force=force, with_before=with_before).summary
