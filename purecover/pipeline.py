"""`purecover pipeline RECIPE`: data → calibrate → label → train → export → evaluate in one command.

A stage is *done* when its manifest (``run_dir/<stage>.run.json``) says ``complete``, was written
for the same configuration (the same recipe sections hash, see `config.STAGE_SECTIONS`) and its outputs
exist; done stages are skipped. A stage whose outputs exist from another configuration is
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
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import STAGE_SECTIONS, Recipe, stage_fingerprint
from .utils.rundir_lock import locked_stage

__all__ = ["STAGES", "Resource", "StagePlan", "plan_pipeline", "resolve_resources",
           "run_pipeline"]

STAGES = ("data", "calibrate", "label", "train", "export", "evaluate")

# What must exist for a stage to count as done (relative to run_dir).
_OUTPUTS: dict[str, tuple[str, ...]] = {
    "data": ("candidates.jsonl",),
    "calibrate": ("bias.json",),
    "label": ("labels.jsonl",),
    "train": ("checkpoints/final",),
    "export": ("selector/selector_config.json",),
    "evaluate": ("eval/metrics.json", "eval/report.md"),
}


def stage_hash(recipe: Recipe, stage: str) -> str | None:
    """The config hash `stage` records in its manifest (None for evaluate, which depends on its questions)."""
    return stage_fingerprint(recipe, stage) if stage in STAGE_SECTIONS else None


@dataclasses.dataclass
class StagePlan:
    """One stage of the plan: `action` is run | resume | skip | blocked | not needed."""

    stage: str
    action: str
    reason: str


def _needed(recipe: Recipe, stage: str) -> tuple[bool, str]:
    t = recipe.teacher
    if stage == "calibrate":
        if t.estimator != "attention":
            return False, f"teacher.estimator is {t.estimator}"
        if not t.calibrate:
            return False, "teacher.calibrate is false"
    if stage in ("train", "export") and "student" not in [str(m).strip() for m in recipe.eval.methods]:
        return False, "eval.methods has no student"
    return True, ""


def _manifest(run_dir: Path, stage: str) -> dict[str, Any] | None:
    path = run_dir / f"{stage}.run.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def _bias_is_current(recipe: Recipe) -> bool:
    """bias.json has this run's K1 and the length source the candidates imply now (no model or tokenizer load).

    The source is the calibration_lengths setting, or a fingerprint of the candidate documents
    the lengths are measured on; the teacher itself is covered by the manifest's config hash.
    """
    from .teacher.calibration import BIAS_FILE, length_source, stored_length_source

    run_dir = recipe.run_path
    try:
        bias_k1 = json.loads((run_dir / BIAS_FILE).read_text(encoding="utf-8")).get("keys", {}).get("k1")
        current = length_source(recipe.data.k1, recipe.teacher.calibration_lengths, run_dir / "candidates.jsonl")
    except (OSError, ValueError, AttributeError):
        return False
    return bias_k1 == recipe.data.k1 and stored_length_source(run_dir / BIAS_FILE) == current


def _status(recipe: Recipe, stage: str) -> tuple[str, str]:
    run_dir = recipe.run_path
    outputs = [run_dir / p for p in _OUTPUTS[stage]]
    present = [p for p in outputs if p.exists()]
    manifest = _manifest(run_dir, stage)
    expected = stage_hash(recipe, stage)
    if manifest is None:
        return ("resume", "outputs exist without a manifest") if present else ("run", "no outputs yet")
    same = expected is None or manifest.get("config_hash") == expected
    if stage == "evaluate":
        same = manifest.get("recipe") == _recipe_tree(recipe)
    if stage == "calibrate" and same:
        same = _bias_is_current(recipe)
    if not same:
        if stage in ("evaluate", "calibrate"):
            return "run", ("recipe changed since the last evaluation (cached generations are reused)"
                           if stage == "evaluate" else
                           "teacher, data.k1 or the candidates' document lengths changed: the bias is recomputed")
        return "blocked", (f"outputs were made with another configuration (hash {manifest.get('config_hash')}, "
                           f"now {expected}); use a new run_dir or delete them")
    complete = manifest.get("summary", {}).get("status") == "complete"
    if complete and len(present) == len(outputs):
        return "skip", "complete for this configuration"
    return "resume", "partly done for this configuration"


def _recipe_tree(recipe: Recipe) -> dict[str, Any]:
    from .config import recipe_to_dict

    return json.loads(json.dumps(recipe_to_dict(recipe), default=str))


def plan_pipeline(recipe: Recipe, start: str | None = None) -> list[StagePlan]:
    """The action for every stage, without running anything."""
    if start is not None and start not in STAGES:
        raise ValueError(f"--from: unknown stage {start!r}; expected one of {', '.join(STAGES)}")
    plans: list[StagePlan] = []
    upstream_ran = False
    for stage in STAGES:
        needed, why = _needed(recipe, stage)
        if not needed:
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
    from .eval.job import _EMBEDDING_METHODS, parse_methods

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
    if _needed(recipe, "train")[0]:
        out.append(_classify("student.model", s.model, "model"))
    out.append(_classify("eval.generator", e.generator, "model"))
    if e.path:
        out.append(_classify("eval.path", e.path, "data"))
    if kinds & set(_EMBEDDING_METHODS):
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


def _runner(stage: str) -> Callable[[Recipe, bool], dict[str, Any]]:
    def data(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .data.candidates import run_data_stage

        return run_data_stage(recipe, show_progress=progress)

    def calibrate(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .teacher.job import run_calibrate_stage

        return run_calibrate_stage(recipe, show_progress=progress)

    def label(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .teacher.job import run_label_stage

        return run_label_stage(recipe, show_progress=progress)

    def train(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .train.run import run_train_stage

        return run_train_stage(recipe, show_progress=progress)

    def export(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .train.export import run_export_stage

        return run_export_stage(recipe)

    def evaluate(recipe: Recipe, progress: bool) -> dict[str, Any]:
        from .eval.job import run_evaluate_stage

        return run_evaluate_stage(recipe, show_progress=progress)

    return {"data": data, "calibrate": calibrate, "label": label, "train": train, "export": export,
            "evaluate": evaluate}[stage]


_HEADLINES: dict[str, tuple[str, ...]] = {
    "data": ("questions", "supporting_recall@" , "questions_per_second"),
    "calibrate": ("k1", "doc_tokens", "seconds"),
    "label": ("questions", "mean_size", "size_histogram", "fallback_rate", "first_step_stop_rate", "error",
              "questions_per_second_rank0", "warning"),
    "train": ("train_questions", "heldout_questions", "train_loss", "tau3", "seconds"),
    "export": ("format", "tau3", "size_bytes"),
    "evaluate": ("questions", "generated", "cached", "em@"),
}


def headline(stage: str, summary: dict[str, Any]) -> str:
    """A one-line digest of a stage summary for the final table."""
    parts = []
    for prefix in _HEADLINES.get(stage, ()):
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

    Stops at the first blocked stage (nothing is run) or the first failing stage (the exception
    propagates after the rows so far are echoed).
    """
    plans = plan_pipeline(recipe, start)
    blocked = [p for p in plans if p.action == "blocked"]
    if blocked:
        raise RuntimeError(f"stage {blocked[0].stage} is blocked: {blocked[0].reason}")
    rows: list[dict[str, Any]] = []
    for plan in plans:
        if plan.action in ("skip", "not needed"):
            manifest = _manifest(recipe.run_path, plan.stage) or {}
            rows.append({"stage": plan.stage, "action": plan.action, "seconds": None,
                         "summary": manifest.get("summary", {}) if plan.action == "skip" else {},
                         "reason": plan.reason})
            echo(f"[pipeline] {plan.stage}: {plan.action} ({plan.reason})")
            continue
        echo(f"[pipeline] {plan.stage}: {plan.action} ({plan.reason})")
        t0 = time.perf_counter()
        summary = _runner(plan.stage)(recipe, show_progress)
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
