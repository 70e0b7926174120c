"""`purecover pipeline RECIPE`: the registry's stages (`purecover.stages.PIPELINE`: data → calibrate →
label → train → export → select → evaluate) in one command.

Every stage runs under one contract (`purecover.contract.execute_stage`), and the plan asks the same
question it does (`purecover.rundir.RunDir.status`): a stage is *done* when its manifest
(``run_dir/<stage>.run.json``) says ``complete``, was written for the same configuration (the hash of
the recipe sections the registry names for it) and its outputs and inputs still hold what the
manifest recorded; done stages are skipped. A complete stage with a missing or changed output is
*redone* (the changed file is set aside, never deleted). A stage whose outputs exist from another
configuration or other inputs is *blocked*: the stage itself would refuse to mix them, so the plan
says so before anything runs. Partly written outputs of the same configuration are *resumed*.

``--from STAGE`` reruns STAGE and every later stage even when they are done (earlier stages are
not run; their outputs must exist); resumable stages keep their finished work. ``--dry-run`` validates the recipe, resolves every model,
dataset and file it names (local paths are checked, Hub ids are listed but never fetched) and
prints the plan without running anything.

With ``student.launch.config_file`` set, the train stage runs as a subprocess
``python -m accelerate.commands.launch --config_file F [--num_processes N ...] [extra_args] -m
purecover.train run_dir/train.launch.yaml`` (`launch_command`): the resolved recipe (overrides
included) is written to ``run_dir/train.launch.yaml`` first, so the child trains exactly this
configuration; its output goes to the terminal and to ``run_dir/train.launch.log``. The pipeline
keeps the run directory's lock and hands it over to the launch (`purecover.utils.rundir_lock.handover`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .config import LAUNCH_FLAGS, Recipe, dump_recipe_yaml, load_recipe, recipe_to_dict
from .contract import execute_stage, stage_directory, stage_inputs, stored_summary
from .records import StageSummary
from .rundir import RunDir, StageStatus
from .stages import PIPELINE, config_hash, get_stage, load_hook, not_needed, summary_type
from .utils.io import atomic_write_text, open_in_place
from .utils.rundir_lock import handover, locked_stage, run_dir_lock

__all__ = ["LAUNCH_LOG", "LAUNCH_RECIPE", "STAGES", "Resource", "StagePlan", "StageRow", "launch_command", "plan_pipeline",
           "resolve_resources", "run_launched_train", "run_pipeline", "train_needs_launch"]

STAGES = PIPELINE  # the pipeline's stages, in order (from the registry)
LAUNCH_RECIPE = "train.launch.yaml"  # in run_dir: the resolved recipe the launched train stage reads
LAUNCH_LOG = "train.launch.log"  # in run_dir: the launched train stage's stdout and stderr (appended)


@dataclasses.dataclass(frozen=True)
class StageRow:
    """One row of the pipeline's final table: what happened to `stage` (`action`: skip | not needed | ran |
    resumed | redone | rerun), how long it took (None when nothing ran), its summary and the plan's reason."""

    stage: str
    action: str
    seconds: float | None
    summary: StageSummary
    reason: str


@dataclasses.dataclass
class StagePlan:
    """One stage of the plan (`action` as in `purecover.rundir.RunDir.status`, plus ``rerun`` for ``--from`` and
    ``not needed``); `command` is the subprocess that runs it (a stage with a launcher, e.g. train with
    ``student.launch``), None for an in-process stage."""

    stage: str
    action: str  # run | resume | redo | rerun | skip | blocked | not needed
    reason: str
    command: list[str] | None = None


def _status(recipe: Recipe, stage: str) -> StageStatus:
    """What `stage` would do now (`purecover.rundir.RunDir.status`), without running anything."""
    rd = stage_directory(recipe, stage)
    return rd.status(stage, config_hash(recipe, stage), stage_inputs(recipe, stage))


def plan_pipeline(recipe: Recipe, start: str | None = None) -> list[StagePlan]:
    """The action for every stage, without running anything.

    Once a stage will run, the later ones are planned as ``run`` (each skips itself when it starts and finds
    its inputs unchanged), except a ``blocked`` stage whose configuration does not depend on an earlier
    stage's outputs: that one is reported now, before anything runs.
    """
    if start is not None and start not in STAGES:
        raise ValueError(f"--from: unknown stage {start!r}; expected one of {', '.join(STAGES)}")
    plans: list[StagePlan] = []
    upstream: str | None = None  # the first stage that runs
    for stage in STAGES:
        spec = get_stage(stage)
        why = not_needed(recipe, stage)
        if why is not None:
            plans.append(StagePlan(stage, "not needed", why))
            continue
        forced = start is not None and STAGES.index(stage) >= STAGES.index(start)
        if start is not None and not forced:
            plans.append(StagePlan(stage, "skip", f"before --from {start}"))
            continue
        try:
            status = _status(recipe, stage)
            action, reason = status.action, status.reason
        except (OSError, ValueError) as exc:  # an input an earlier stage makes is not there yet
            if upstream is None:
                raise
            action, reason = "run", f"after {upstream} ({exc})"
        if action == "blocked" and upstream is not None and (spec.hash_extra is not None or status.cause == "inputs"):
            action, reason = "run", (f"after {upstream}, which may make its inputs again: checked when it starts "
                                     f"({reason})")
        elif forced and action == "skip":
            action, reason = "rerun", f"--from {start}: rerun (resumable stages keep finished work)"
        elif upstream is not None and action == "skip":
            action, reason = "run", f"after {upstream}: skipped when it starts if its inputs are unchanged"
        if upstream is None and action in ("run", "resume", "redo", "rerun"):
            upstream = stage
        command = None
        if spec.launcher is not None and action in ("run", "resume", "redo", "rerun"):
            command = load_hook(spec.launcher)(recipe, recipe.run_path / LAUNCH_RECIPE, rerun=forced)
        plans.append(StagePlan(stage, action, reason, command))
    return plans


# --------------------------------------------------------------------------- launching the train stage


def launch_command(recipe: Recipe, recipe_file: str | Path, quiet: bool = False, rerun: bool = False
                   ) -> list[str] | None:
    """The argument list that runs the train stage under ``accelerate launch`` (`student.launch`), or
    None when ``student.launch.config_file`` is null (the stage runs in-process).

    ``python -m accelerate.commands.launch`` is the `accelerate launch` command run by this
    interpreter (so the child uses the same environment); `recipe_file` is the resolved recipe.
    """
    cfg = recipe.student.launch
    if cfg.config_file is None:  # (a launch key without config_file is a recipe error: purecover.config)
        return None
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg.config_file)]
    for key in LAUNCH_FLAGS:
        value = getattr(cfg, key)
        if value is not None:
            cmd += [f"--{key}", str(value)]
    cmd += [str(a) for a in cfg.extra_args]
    cmd += ["-m", str(get_stage("train").module), str(recipe_file)]
    return [*cmd, *(["--rerun"] if rerun else []), *(["-q"] if quiet else [])]


def _stream(cmd: list[str], env: dict[str, str], log_path: Path) -> int:
    """Run `cmd`, copying its stdout and stderr (merged) to our stdout and to `log_path`; its exit code.
    Interrupting the parent terminates the child."""
    out = getattr(sys.stdout, "buffer", None)
    with os.fdopen(open_in_place(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab") as log:
        log.write(f"\n$ {shlex.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        try:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                log.write(chunk)
                log.flush()
                if out is not None:
                    out.write(chunk)
                    out.flush()
                else:
                    sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        finally:
            proc.stdout.close()  # type: ignore[union-attr]


def train_needs_launch(recipe: Recipe) -> bool:
    """Whether the train stage runs under accelerate launch now: ``student.launch.config_file`` is set and
    the stage is not complete for this configuration (a complete one is skipped in-process, loading nothing)."""
    if launch_command(recipe, recipe.run_path / LAUNCH_RECIPE) is None:
        return False
    return _status(recipe, "train").action != "skip"


def run_launched_train(recipe: Recipe, show_progress: bool = True,
                       echo: Callable[[str], None] = print, rerun: bool = False) -> StageSummary:
    """Run the train stage through `launch_command` as a subprocess; returns its summary (train.run.json).

    Holds the run directory's lock and hands it over to the launch. A non-zero exit, or a launch that
    leaves no complete train manifest for this configuration, is a RuntimeError naming the command and
    the log file. `rerun` (``--from``) passes ``--rerun`` to the launched stage.
    """
    run_dir = recipe.run_path
    with run_dir_lock(run_dir, "train"):
        recipe_file = run_dir / LAUNCH_RECIPE
        atomic_write_text(recipe_file, "# The resolved recipe of the launched train stage (written by purecover; "
                                       "overwritten at each launch).\n" + dump_recipe_yaml(recipe))
        if recipe_to_dict(load_recipe(recipe_file)) != recipe_to_dict(recipe):
            raise RuntimeError(f"{recipe_file} does not read back as the resolved recipe (a value YAML cannot "
                               "round-trip?): run `purecover config RECIPE` to inspect it")
        cmd = launch_command(recipe, recipe_file, quiet=not show_progress, rerun=rerun)
        if cmd is None:
            raise ValueError("student.launch.config_file is null: the train stage runs in-process")
        log_path = run_dir / LAUNCH_LOG
        echo(f"[pipeline] train: {shlex.join(cmd)}")
        echo(f"[pipeline] train: output also in {log_path}")
        with handover(run_dir) as env_add:
            code = _stream(cmd, {**os.environ, **env_add, "PYTHONUNBUFFERED": "1"}, log_path)
    if code != 0:
        raise RuntimeError(f"the launched train stage failed (exit code {code}): {shlex.join(cmd)}; "
                           f"see {log_path}")
    rd = RunDir.of(recipe)
    manifest = rd.manifest("train")
    if manifest is None or manifest.summary.status != "complete" or manifest.config_hash != config_hash(recipe, "train"):
        raise RuntimeError(f"the launched train stage exited 0 but {rd.manifest_path('train')} is not "
                           f"complete for this configuration: {shlex.join(cmd)}; see {log_path}")
    return stored_summary(rd, "train")


# --------------------------------------------------------------------------- resources (dry run)


@dataclasses.dataclass
class Resource:
    """A model, dataset or file the recipe names; `status` is found | missing | hub | bundled | info."""

    key: str
    value: str
    status: str
    note: str = ""


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _gguf_model(key: str, value: str) -> Resource | None:
    """A model key naming a GGUF file, a directory of one, or a catalogue model; None for anything else."""
    from .models.catalogue import catalogue_entry, converted_dir, default_models_dir
    from .models.gguf_convert import SOURCE_FILE, converted_dir_for, read_gguf_info
    from .models.loading import gguf_file_of

    p = Path(value).expanduser()
    if p.exists():
        try:
            gguf = gguf_file_of(value)
            if gguf is None:
                return None
            info = read_gguf_info(gguf)
        except ValueError as exc:
            return Resource(key, value, "missing", str(exc))
        done = converted_dir_for(gguf, default_models_dir())
        state = f"converted: {done}" if (done / SOURCE_FILE).is_file() else "converted into the model cache on first use"
        return Resource(key, value, "found", f"GGUF file ({info.architecture}, {info.quantization}; {state})")
    entry = catalogue_entry(value)
    if entry is None:
        return None
    done = converted_dir(entry)
    if (done / "config.json").is_file():
        return Resource(key, value, "found", f"catalogue model {entry.upstream} ({entry.quantization}): {done}")
    if (default_models_dir() / "gguf" / entry.gguf_file).is_file():
        return Resource(key, value, "found", f"catalogue model {entry.upstream}: fetched, converted on first use")
    return Resource(key, value, "missing", f"catalogue model {entry.upstream}, not fetched: run `purecover models "
                                           f"fetch {entry.name}`")


def _classify(key: str, value: str | None, kind: str) -> Resource:
    if value is None:
        return Resource(key, "null", "info", "not set")
    if kind == "model":
        found = _gguf_model(key, value)
        if found is not None:
            return found
    p = Path(value).expanduser()
    if p.exists():
        if kind == "model" and p.is_dir() and not (p / "config.json").is_file() and not (p / "modules.json").is_file():
            return Resource(key, value, "missing", "directory has no config.json (not a model directory)")
        return Resource(key, value, "found", "local " + ("directory" if p.is_dir() else "file"))
    looks_local = value.startswith((".", "/", "~")) or p.suffix in (".json", ".jsonl", ".gz", ".zip", ".parquet")
    if _HUB_ID.match(value) and not looks_local:
        return Resource(key, value, "hub", "Hugging Face Hub id (fetched when the stage runs; not in a dry run)")
    return Resource(key, value, "missing", "no such local path")


def _index_dir_resource(index_dir: str | None, corpus: str) -> Resource:
    """Where the corpus store and indexes go, and whether the store of `corpus` is already built there."""
    from .data.corpus_store import store_key
    from .data.index_dir import resolve_index_dir

    where = resolve_index_dir(index_dir)
    key = "data.index_dir" if index_dir else "data.index_dir (default)"
    path = Path(corpus)
    if path.is_file() and (where / f"corpus-{store_key(path)}" / "store.json").is_file():
        return Resource(key, str(where), "found", "the corpus store is built there; indexes are reused when built")
    return Resource(key, str(where), "info", "the corpus store and index are built there on the first data stage")


def _launch_resources(recipe: Recipe) -> list[Resource]:
    """The accelerate config of ``student.launch`` and the DeepSpeed JSON it names (paths from the cwd)."""
    import yaml

    file = recipe.student.launch.config_file
    if file is None:
        return []
    res = _classify("student.launch.config_file", file, "data")
    if res.status != "found":
        return [res]
    try:
        conf = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return [Resource(res.key, file, "missing", f"not a readable accelerate config YAML: {exc}")]
    if not isinstance(conf, dict):
        return [Resource(res.key, file, "missing", "not an accelerate config (a YAML mapping)")]
    ds = (conf.get("deepspeed_config") or {}).get("deepspeed_config_file")
    n = recipe.student.launch.num_processes or conf.get("num_processes", "?")
    res.note = f"accelerate config: {conf.get('distributed_type', '?')}, {n} process(es)"
    return [res] + ([_classify("student.launch deepspeed_config_file", str(ds), "data")] if ds else [])


def resolve_resources(recipe: Recipe) -> list[Resource]:
    """Every model, dataset and file the recipe's enabled stages use."""
    from .eval.methods import EMBEDDING_METHODS, parse_methods

    d, t, s, e = recipe.data, recipe.teacher, recipe.student, recipe.eval
    out: list[Resource] = []
    if d.path == "demo":
        out.append(Resource("data.path", "demo", "bundled", "the demo set shipped in the package"))
    elif isinstance(d.path, list):  # a list of local files, read in list order as one set of questions
        from .data.paths import data_path_entries, list_entry_problem

        for i, (key, value) in enumerate(data_path_entries(d.path)):
            problem = list_entry_problem(value, must_exist=True)
            out.append(Resource(key, value, "missing", problem) if problem is not None else
                       Resource(key, value, "found", f"local file {i + 1} of {len(d.path)}, read in list order"))
    else:
        out.append(_classify("data.path", d.path, "data"))
        if d.path is not None:  # Hub ids and dataset repository folders: resolve config and split
            from .data.loaders.hub import dry_run_status

            checked = dry_run_status(d.path, d.dataset, d.hub_config, d.split, split_key="data.split")
            out[-1].status, out[-1].note = checked or (out[-1].status, out[-1].note)
    if d.corpus in ("per_question", "shared"):
        out.append(Resource("data.corpus", d.corpus, "info", "built from the dataset's paragraphs"))
    else:
        out.append(_classify("data.corpus", d.corpus, "data"))
        out.append(_index_dir_resource(d.index_dir, d.corpus))
    if d.index_path:
        out.append(_classify("data.index_path", d.index_path, "data"))
    if d.aliases:
        out.append(_classify("data.aliases", d.aliases, "data"))
    if d.qrels:  # a coverage collection's nugget qrels, and its judge file
        out.append(_classify("data.qrels", d.qrels, "data"))
    if e.judgments:
        out.append(_classify("eval.judgments", e.judgments, "data"))
    if d.retriever == "dense":
        out.append(_classify("data.dense_model", d.dense_model, "model"))
    out.append(_classify("teacher.model", t.model, "model"))
    if t.estimator in ("embedding", "no_attention"):
        out.append(_classify("teacher.embedding_model", t.embedding_model, "model"))
    specs = parse_methods(e.methods)
    kinds = {sp.kind for sp in specs if sp.source is None}
    if not_needed(recipe, "train") is None:
        out.append(_classify("student.model", s.model, "model"))
        out += _launch_resources(recipe)
    out.append(_classify("eval.generator", e.generator, "model"))
    if e.path:
        out.append(_classify("eval.path", e.path, "data"))
        from .data.data_stage import evaluation_recipe
        from .data.loaders.hub import dry_run_status

        test = evaluation_recipe(recipe).data  # the test set's config and split, as the eval data stage reads them
        checked = dry_run_status(e.path, d.dataset, test.hub_config, e.split, split_key="eval.split")
        out[-1].status, out[-1].note = checked or (out[-1].status, out[-1].note)
    if kinds & set(EMBEDDING_METHODS):
        out.append(_classify("eval.embedding_model", e.embedding_model, "model"))
    if "cross_encoder" in kinds:
        out.append(_classify("eval.cross_encoder", e.cross_encoder, "model"))
    if kinds & {"icr", "icr_fused"}:
        out.append(_classify("eval.icr_model", e.icr_model or s.model, "model"))  # null: student.model
    for sp in specs:
        if sp.kind == "selections" and sp.source is not None:  # an external reranker's file (never a Hub id)
            found = sp.source.expanduser().is_file()
            out.append(Resource(f"eval.methods[{sp.name}]", str(sp.source), "found" if found else "missing",
                                "local file" if found else "no such local file (selections JSONL or TREC run)"))
        elif sp.source is not None:
            need = "labels.jsonl" if sp.kind == "teacher" else "selections.jsonl"
            out.append(_classify(f"eval.methods[{sp.name}]", str(sp.source / need), "data"))
    for key, backend in (("teacher.backend", t.backend), ("eval.backend", e.backend)):
        if backend == "vllm":
            have = importlib.util.find_spec("vllm") is not None
            out.append(Resource(key, "vllm", "found" if have else "missing",
                                "installed" if have else "vLLM is not installed here: pip install -e '.[vllm]' "
                                                          "on the GPU machine"))
    for r in out:  # resolve the bundled MiniLM copy like the stages do
        if r.status == "hub" and r.key.endswith(("embedding_model",)):
            from .data.retrieval.dense import resolve_embedding_model

            local = resolve_embedding_model(r.value)
            if local != r.value:
                r.status, r.note = "found", f"bundled copy at {local}"
    return out


# --------------------------------------------------------------------------- running


def _headline_figures(stage: str, summary: StageSummary) -> list[tuple[str, object]]:
    """(key, value) of the figures `Stage.headline` names that the summary holds, in headline order."""
    out = []
    figures = summary.figures()
    for prefix in get_stage(stage).headline:
        for key, value in figures.items():
            if (key == prefix or (prefix.endswith("@") and key.startswith(prefix))) and value is not None:
                out.append((key, value))
    return out


def figure_legend(rows: list[StageRow]) -> str:
    """What the figures of the final table mean: one line per figure name shown that is not a plain word (its
    summary field's description), then where every stage's figures are described."""
    lines, seen = ["figures:"], set()
    for r in rows:
        try:
            fields = summary_type(r.stage).model_fields
        except (KeyError, TypeError, ImportError):
            continue
        for key, _ in _headline_figures(r.stage, r.summary):
            field = fields.get(key) or fields.get(key.split("@")[0])
            plain = key.isalpha() and key != "error"  # questions, generated, cached, format: read as written
            if key in seen or plain or field is None or not field.description:
                continue
            seen.add(key)
            lines.append(f"  {key} ({r.stage}): {field.description.split('; null')[0].rstrip('.')}")
    lines.append("  every stage's figures: docs/reference/run-files.md (the <Stage>Summary records)")
    return "\n".join(lines)


def headline(stage: str, summary: StageSummary) -> str:
    """A one-line digest of a stage summary for the final table (the figures `Stage.headline` names)."""
    parts = []
    for key, value in _headline_figures(stage, summary):
        if isinstance(value, float):
            value = round(value, 4)
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
        parts.append(f"{key} {value}")
    return "; ".join(parts)


def check_stages_with_work(recipe: Recipe, plans: list[StagePlan], dry_run: bool = False) -> None:
    """Each planned stage's recipe check (`Stage.check`, called as ``check(recipe, dry_run=...)``), for the stages
    with work only, before any runs. ``dry_run``: the checks that import nothing heavy (no torch: the train
    stage's TrainingArguments are built when the pipeline starts)."""
    for plan in plans:
        hook = get_stage(plan.stage).check
        if hook and plan.action not in ("skip", "not needed", "blocked"):
            load_hook(hook)(recipe, dry_run=dry_run)


@locked_stage("pipeline")
def run_pipeline(recipe: Recipe, start: str | None = None, show_progress: bool = True,
                 echo: Callable[[str], None] = print) -> list[StageRow]:
    """Run the plan; returns one `StageRow` per stage.

    The plan is made once, under the run directory's lock. Stops at the first blocked stage (nothing
    is run) or the first failing stage (the exception propagates after the rows so far are echoed).
    """
    plans = plan_pipeline(recipe, start)
    blocked = [p for p in plans if p.action == "blocked"]
    if blocked:
        raise RuntimeError(f"stage {blocked[0].stage} is blocked: {blocked[0].reason}")
    check_stages_with_work(recipe, plans)
    rows: list[StageRow] = []
    for plan in plans:
        echo(f"[pipeline] {plan.stage}: {plan.action} ({plan.reason})")
        if plan.action in ("skip", "not needed"):
            summary = stored_summary(stage_directory(recipe, plan.stage), plan.stage) if plan.action == "skip" \
                else StageSummary()
            rows.append(StageRow(plan.stage, plan.action, None, summary, plan.reason))
            continue
        forced = start is not None and STAGES.index(plan.stage) >= STAGES.index(start)
        t0 = time.perf_counter()
        if plan.command is not None:
            rd = stage_directory(recipe, plan.stage)
            before = _finished(rd, plan.stage)
            summary = run_launched_train(recipe, show_progress, echo, rerun=forced)
            after = _finished(rd, plan.stage)
            action = "skip" if after == before else {"run": "ran", "resume": "resumed"}.get(plan.action, plan.action)
        else:
            outcome = execute_stage(plan.stage, recipe, show_progress, force=forced, with_before=False)
            summary, action = outcome.summary, outcome.action
        seconds = None if action == "skip" else round(time.perf_counter() - t0, 1)
        if action == "skip":
            echo(f"[pipeline] {plan.stage}: skip (complete for this configuration and these inputs)")
        rows.append(StageRow(plan.stage, action, seconds, summary, plan.reason))
    return rows


def _finished(rd: RunDir, stage: str) -> str | None:
    manifest = rd.manifest(stage)
    return manifest.finished if manifest is not None else None


def summary_table(rows: list[StageRow]) -> str:
    """The final table: stage, what happened, seconds, headline figures."""
    lines = ["| stage | action | seconds | figures |", "|---|---|---|---|"]
    for r in rows:
        secs = "—" if r.seconds is None else f"{r.seconds:.1f}"
        lines.append(f"| {r.stage} | {r.action} | {secs} | {headline(r.stage, r.summary) or r.reason} |")
    return "\n".join(lines)
