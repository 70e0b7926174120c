"""`purecover pipeline RECIPE`: the registry's stages (`purecover.stages.PIPELINE`: data → calibrate →
label → train → export → select → evaluate) in one command.

A stage is *done* when its manifest (``run_dir/<stage>.run.json``) says ``complete``, was written
for the same configuration (the hash of the recipe sections the registry names for it) and its
outputs still hold what the manifest recorded (`purecover.rundir.RunDir.output_problem`); done
stages are skipped. A stage whose outputs exist from another configuration is
*blocked*: the stage itself would refuse to mix them, so the plan says so before anything runs.
Partly written outputs of the same configuration are *resumed* (every stage is resumable).

``--from STAGE`` runs STAGE and every later stage even when they look done (earlier stages are
not run; their outputs must exist). ``--dry-run`` validates the recipe, resolves every model,
dataset and file it names (local paths are checked, Hub ids are listed but never fetched) and
prints the plan without running anything.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Recipe
from .rundir import RunDir
from .stages import PIPELINE, config_hash, get_stage, not_needed, run_stage
from .utils.rundir_lock import locked_stage

__all__ = ["STAGES", "Resource", "StagePlan", "plan_pipeline", "resolve_resources", "run_pipeline"]

STAGES = PIPELINE  # the pipeline's stages, in order (from the registry)


@dataclasses.dataclass
class StagePlan:
    """One stage of the plan: `action` is run | resume | skip | blocked | not needed."""

    stage: str
    action: str
    reason: str


def stage_run_dir(recipe: Recipe, stage: str) -> RunDir:
    """The run directory `stage` writes: run_dir, or run_dir/eval for select with eval.path (the test set)."""
    rd = RunDir.of(recipe)
    return RunDir(rd.path_of("eval")) if stage == "select" and recipe.eval.path else rd


def _bias_is_current(recipe: Recipe) -> bool:
    """bias.json holds this run's K1, document-length source and teacher weights (no model or tokenizer load)."""
    from .teacher.calibration import bias_is_current

    rd = RunDir.of(recipe)
    return bias_is_current(rd.path_of("bias"), k1=recipe.data.k1, calibration_lengths=recipe.teacher.calibration_lengths,
                           candidates_path=rd.path_of("candidates"), model=recipe.teacher.model)


def _status(recipe: Recipe, stage: str) -> tuple[str, str]:
    """(action, reason) for `stage` from its manifest, config hash and outputs, without running anything."""
    spec = get_stage(stage)
    rd = stage_run_dir(recipe, stage)
    outputs = rd.outputs(stage)
    present = [p for p in outputs if p.exists()]
    manifest = rd.manifest(stage)
    if manifest is None:
        return ("resume", "outputs exist without a manifest") if present else ("run", "no outputs yet")
    expected = config_hash(recipe, stage)
    same = manifest.get("config_hash") == expected
    if stage == "calibrate" and same:
        same = _bias_is_current(recipe)
    if not same:
        if spec.on_change == "rerun":
            return "run", ("teacher (or its weights), data.k1 or the candidates' document lengths changed: the bias is recomputed"
                           if stage == "calibrate" else
                           "recipe changed since the last run (cached work is reused)")
        return "blocked", (f"outputs were made with another configuration (hash {manifest.get('config_hash')}, "
                           f"now {expected}); use a new run_dir or delete them")
    if (manifest.get("summary") or {}).get("status") == "complete":
        problem = rd.output_problem(stage, manifest)
        if problem is None:
            return "skip", "complete for this configuration"
        return "resume", f"marked complete but {problem}"
    return "resume", "partly done for this configuration"


def plan_pipeline(recipe: Recipe, start: str | None = None) -> list[StagePlan]:
    """The action for every stage, without running anything."""
    if start is not None and start not in STAGES:
        raise ValueError(f"--from: unknown stage {start!r}; expected one of {', '.join(STAGES)}")
    plans: list[StagePlan] = []
    upstream_ran = False
    for stage in STAGES:
        why = not_needed(recipe, stage)
        if why is not None:
            plans.append(StagePlan(stage, "not needed", why))
            continue
        if start is not None and STAGES.index(stage) < STAGES.index(start):
            plans.append(StagePlan(stage, "skip", f"before --from {start}"))
            continue
        action, reason = _status(recipe, stage)
        if start is not None and action == "skip":
            action, reason = "run", f"--from {start}: rerun (resumable stages keep finished work)"
        elif upstream_ran and action == "skip":
            action, reason = "run", "an earlier stage runs first (resumable: finished work is kept)"
        upstream_ran = upstream_ran or action in ("run", "resume")
        plans.append(StagePlan(stage, action, reason))
    return plans


# --------------------------------------------------------------------------- resources (dry run)


@dataclasses.dataclass
class Resource:
    """A model, dataset or file the recipe names; `status` is found | missing | hub | bundled | info."""

    key: str
    value: str
    status: str
    note: str = ""


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _classify(key: str, value: str | None, kind: str) -> Resource:
    if value is None:
        return Resource(key, "null", "info", "not set")
    p = Path(value).expanduser()
    if p.exists():
        if kind == "model" and p.is_dir() and not (p / "config.json").is_file() and not (p / "modules.json").is_file():
            return Resource(key, value, "missing", "directory has no config.json (not a model directory)")
        return Resource(key, value, "found", "local " + ("directory" if p.is_dir() else "file"))
    looks_local = value.startswith((".", "/", "~")) or p.suffix in (".json", ".jsonl", ".gz", ".zip", ".parquet")
    if _HUB_ID.match(value) and not looks_local:
        return Resource(key, value, "hub", "Hugging Face Hub id (fetched when the stage runs; not in a dry run)")
    return Resource(key, value, "missing", "no such local path")


def resolve_resources(recipe: Recipe) -> list[Resource]:
    """Every model, dataset and file the recipe's enabled stages use."""
    from .eval.job import EMBEDDING_METHODS, parse_methods

    d, t, s, e = recipe.data, recipe.teacher, recipe.student, recipe.eval
    out: list[Resource] = []
    if d.path == "demo":
        out.append(Resource("data.path", "demo", "bundled", "the demo set shipped in the package"))
    else:
        out.append(_classify("data.path", d.path, "data"))
    if d.corpus in ("per_question", "shared"):
        out.append(Resource("data.corpus", d.corpus, "info", "built from the dataset's paragraphs"))
    else:
        out.append(_classify("data.corpus", d.corpus, "data"))
    if d.aliases:
        out.append(_classify("data.aliases", d.aliases, "data"))
    if d.retriever == "dense":
        out.append(_classify("data.dense_model", d.dense_model, "model"))
    out.append(_classify("teacher.model", t.model, "model"))
    if t.estimator in ("embedding", "no_attention"):
        out.append(_classify("teacher.embedding_model", t.embedding_model, "model"))
    specs = parse_methods(e.methods)
    kinds = {sp.kind for sp in specs if sp.source is None}
    if not_needed(recipe, "train") is None:
        out.append(_classify("student.model", s.model, "model"))
    out.append(_classify("eval.generator", e.generator, "model"))
    if e.path:
        out.append(_classify("eval.path", e.path, "data"))
    if kinds & set(EMBEDDING_METHODS):
        out.append(_classify("eval.embedding_model", e.embedding_model, "model"))
    if "cross_encoder" in kinds:
        out.append(_classify("eval.cross_encoder", e.cross_encoder, "model"))
    for sp in specs:
        if sp.source is not None:
            need = "labels.jsonl" if sp.kind == "teacher" else "selections.jsonl"
            out.append(_classify(f"eval.methods[{sp.name}]", str(sp.source / need), "data"))
    for key, backend in (("teacher.backend", t.backend), ("eval.backend", e.backend)):
        if backend == "vllm":
            have = importlib.util.find_spec("vllm") is not None
            out.append(Resource(key, "vllm", "found" if have else "missing",
                                "installed" if have else "vLLM is not installed here: pip install 'purecover[vllm]' "
                                                          "on the GPU machine"))
    for r in out:  # resolve the bundled MiniLM copy like the stages do
        if r.status == "hub" and r.key.endswith(("embedding_model",)):
            from .data.retrieval.dense import resolve_embedding_model

            local = resolve_embedding_model(r.value)
            if local != r.value:
                r.status, r.note = "found", f"bundled copy at {local}"
    return out


# --------------------------------------------------------------------------- running


def headline(stage: str, summary: dict[str, Any]) -> str:
    """A one-line digest of a stage summary for the final table."""
    parts = []
    for prefix in get_stage(stage).headline:
        for key, value in summary.items():
            if (key == prefix or (prefix.endswith("@") and key.startswith(prefix))) and value is not None:
                if isinstance(value, float):
                    value = round(value, 4)
                if isinstance(value, dict):
                    value = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
                parts.append(f"{key} {value}")
    return "; ".join(parts)


@locked_stage("pipeline")
def run_pipeline(recipe: Recipe, start: str | None = None, show_progress: bool = True,
                 echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the plan; returns one row per stage ``{stage, action, seconds, summary}``.

    The plan is made once, under the run directory's lock. Stops at the first blocked stage (nothing
    is run) or the first failing stage (the exception propagates after the rows so far are echoed).
    """
    plans = plan_pipeline(recipe, start)
    blocked = [p for p in plans if p.action == "blocked"]
    if blocked:
        raise RuntimeError(f"stage {blocked[0].stage} is blocked: {blocked[0].reason}")
    rows: list[dict[str, Any]] = []
    for plan in plans:
        if plan.action in ("skip", "not needed"):
            manifest = stage_run_dir(recipe, plan.stage).manifest(plan.stage) or {}
            rows.append({"stage": plan.stage, "action": plan.action, "seconds": None,
                         "summary": manifest.get("summary", {}) if plan.action == "skip" else {},
                         "reason": plan.reason})
            echo(f"[pipeline] {plan.stage}: {plan.action} ({plan.reason})")
            continue
        echo(f"[pipeline] {plan.stage}: {plan.action} ({plan.reason})")
        t0 = time.perf_counter()
        summary = run_stage(plan.stage, recipe, show_progress, with_before=False)
        rows.append({"stage": plan.stage, "action": "ran" if plan.action == "run" else "resumed",
                     "seconds": round(time.perf_counter() - t0, 1), "summary": summary, "reason": plan.reason})
    return rows


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The final table: stage, what happened, seconds, headline figures."""
    lines = ["| stage | action | seconds | figures |", "|---|---|---|---|"]
    for r in rows:
        secs = "—" if r["seconds"] is None else f"{r['seconds']:.1f}"
        lines.append(f"| {r['stage']} | {r['action']} | {secs} | {headline(r['stage'], r['summary']) or r['reason']} |")
    return "\n".join(lines)
