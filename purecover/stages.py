"""The stage registry: every stage of a run, declared once.

Each `Stage` names its runner (imported lazily, so `purecover --help` stays fast and optional
dependencies are needed only by the stages that use them), the run-directory files it reads and
writes (keys of `purecover.rundir.FILES`), the recipe sections its config hash covers, the summary
keys the pipeline's final table shows, and its command-line help. ``purecover`` builds one
subcommand per entry, `purecover pipeline` runs the entries marked ``pipeline`` in order, and each
``python -m purecover.<stage>`` entry runs its entry through `run_stage`. Every stage runs under one
contract, `execute_stage` (hash, skip, refuse, begin, body, complete); adding a stage is one entry
here and one body function.

This module imports only the configuration and `purecover.rundir`; it never imports a stage.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Recipe, section_fingerprint
from .records import OutputDescription, RecordError, StageSummary, validate_record
from .rundir import FILES, RunDir, describe_input

__all__ = ["HASH_EXCLUDE", "HASH_OMIT_AT_DEFAULT", "HASH_OMIT_AT_VALUE", "PIPELINE", "STAGES", "Stage", "StageBlockedError", "StageOutcome",
           "StageRun", "config_hash", "dependency_order", "execute_stage", "get_stage", "load_hook", "load_runner", "not_needed", "run_stage",
           "stage_directory", "stage_inputs"]

log = logging.getLogger(__name__)

Runner = Callable[["StageRun"], StageSummary]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a run.

    `runner` is ``"module:function"``: the stage's body, called as ``function(run)`` with a `StageRun` once
    `execute_stage` has decided the stage has work to do, and returning its summary: an instance of the
    `purecover.records.StageSummary` subclass that `summary` names, stored in ``<stage>.run.json``. `reads` and `writes` are keys of `purecover.rundir.FILES`: the pipeline's order
    follows them, `writes` are checked before a complete stage is skipped, and `reads` are recorded as the
    stage's inputs (`inputs` replaces that list when the stage reads files elsewhere). `scratch` are
    resumable work areas (checkpoints, shards) that count as "this stage has started here".
    `on_change` says what a changed configuration or input means for existing outputs: ``refuse`` (the
    stage would mix two configurations: use a new run_dir) or ``rerun`` (the outputs are recomputed; a
    cache keeps the expensive part). `before` lists stages that a standalone run of this stage runs first
    when they are needed (each skips itself when complete).

    Hooks (``"module:function"`` strings, imported only when used): `needed(recipe)` says why the stage has
    nothing to do for a recipe (None when it is needed); `directory(recipe)` is the run directory the
    stage writes (default ``run_dir``); `inputs(recipe)` maps input names to paths; `hash_extra(recipe)`
    is mixed into the config hash; `launcher(recipe, recipe_file, quiet)` is the command that runs the
    stage in a launcher (accelerate) or None to run it in-process; `command(parser)` adds the stage's own
    command-line options and returns the handler ``(args, default) -> exit code`` of its subcommand;
    `foreign(run_dir, config_hash)` says why outputs found without a manifest belong to another configuration
    (None when that cannot be told: they are resumed); `check(recipe)` is a slow recipe check (raises
    ConfigError) that `purecover pipeline` runs, before any stage, only when this stage has work in the plan
    (the train stage builds its TrainingArguments: seconds of imports a rerun of a complete run need not pay).
    """

    name: str
    runner: str
    help: str
    description: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    sections: tuple[str, ...]
    headline: tuple[str, ...] = ()
    summary: str = "purecover.records:StageSummary"  # the record its body returns
    pipeline: bool = True
    on_change: str = "refuse"
    changed_reason: str = "recipe changed since the last run (cached work is reused)"
    hashed: str | None = None  # what the config hash covers, in messages (default: its sections)
    before: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    module: str | None = None  # `python -m` entry, for launchers (accelerate, torchrun)
    hash_extra: str | None = None
    needed: str | None = None
    directory: str | None = None
    inputs: str | None = None
    launcher: str | None = None
    command: str | None = None
    foreign: str | None = None
    check: str | None = None
    test_set: bool = False  # `purecover <stage> --test-set` runs it on eval.path's test set (run_dir/test)


def _student_evaluated(recipe: Recipe) -> bool:
    return "student" in [str(m).strip() for m in recipe.eval.methods]


def calibration_needed(recipe: Recipe) -> str | None:
    """Why the calibrate stage has nothing to do (None when the attention estimator is calibrated)."""
    t = recipe.teacher
    if t.estimator != "attention":
        return f"teacher.estimator is {t.estimator}"
    if not t.calibrate:
        return "teacher.calibrate is false"
    return None


def student_needed(recipe: Recipe) -> str | None:
    """Why the student's stages (train, export, select) have nothing to do (None when eval.methods has it)."""
    return None if _student_evaluated(recipe) else "eval.methods has no student"


def not_needed(recipe: Recipe, stage: str) -> str | None:
    """Why `stage` has nothing to do for this recipe (None when it is needed): its `Stage.needed` hook."""
    hook = get_stage(stage).needed
    return None if hook is None else load_hook(hook)(recipe)


_ALL_SECTIONS = ("data", "teacher", "student", "export", "eval", "seed")

# Recipe keys (dotted) left out of every stage's config hash: they say how a stage is started, not
# what it computes, so changing them never blocks resuming a run. `student.launch.num_processes`
# stays hashed: the effective batch is num_processes x per_device_train_batch_size x
# gradient_accumulation_steps.
HASH_EXCLUDE: tuple[str, ...] = (
    "data.index_dir",  # where shared indexes live; their own keys say what they hold
    "student.launch.config_file",
    "student.launch.num_machines",
    "student.launch.machine_rank",
    "student.launch.main_process_ip",
    "student.launch.main_process_port",
    "student.launch.extra_args",
)

# Keys added after runs already existed: left out of the hash while they hold their default, so a run
# made before they existed keeps its hash (and resumes) until the user sets one of them.
HASH_OMIT_AT_DEFAULT: tuple[str, ...] = (
    "teacher.objective",
    "teacher.attention_layout",
    "teacher.calibration_procedure",
    "teacher.calibration_questions",
    "student.target",
    "student.target_k",
    "student.reply_order",
    "student.negatives",
    "student.negative_sample",
    "student.negative_pool",
    "data.index_path",
    "data.faiss_index",
    "data.faiss_search_params",
    "data.embedding_dtype",
    "data.encode_shard_size",
    "eval.prompt_file",
    "student.prompt_file",
    "teacher.reply_prefix",
)

# Keys added after runs already existed whose default changes what a stage does: left out of the hash while
# they hold the value that reproduces the behaviour from before they existed, so such a run keeps its hash
# (and resumes) once that value is set, and the new default gets a hash of its own.
HASH_OMIT_AT_VALUE: dict[str, object] = {
    "student.candidate_shuffles": 0,  # 0: retrieval order only, as every student trained before the key
}


def _value_of(recipe: Recipe, dotted: str) -> object:
    section, key = dotted.split(".")
    return getattr(getattr(recipe, section), key)


def _at_default(recipe: Recipe, dotted: str) -> bool:
    section, key = dotted.split(".")
    config = getattr(recipe, section)
    return bool(getattr(config, key) == getattr(type(config)(), key))


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage(
        name="data",
        runner="purecover.data.candidates:write_candidates",
        help="retrieve top-K1 candidates per question -> run_dir/candidates.jsonl",
        description="Load the dataset (data.dataset, data.path), build the corpus (data.corpus: per_question, "
                    "shared or a corpus JSONL), retrieve data.k1 passages per question with data.retriever (bm25 "
                    "or dense) and write run_dir/candidates.jsonl. Resumable: a rerun skips questions already "
                    "written; a complete run for the same data section is skipped.",
        reads=(), writes=("candidates",), sections=("data",),
        summary="purecover.records:DataSummary",
        headline=("questions", "with_gold", "supporting_recall@", "questions_per_second"),
        inputs="purecover.data.candidates:dataset_inputs", test_set=True,
    ),
    Stage(
        name="calibrate",
        runner="purecover.teacher.calibrate_stage:write_bias",
        help="teacher position-bias calibration -> run_dir/bias.json",
        description="Run the teacher once over the prompt template with data.k1 content-free documents and a fixed "
                    "dummy reasoning trace; write the per-position attention bias to run_dir/bias.json (keys: "
                    "model and its weights, k1, template, layers, document lengths). Needed by `label` when "
                    "teacher.calibrate is true.",
        reads=("candidates",), writes=("bias",), sections=("teacher",), scratch=("bias_rows",),
        summary="purecover.records:CalibrateSummary",
        headline=("k1", "doc_tokens", "seconds"), on_change="rerun", inputs="purecover.stages:no_inputs",
        changed_reason="teacher (or its weights), data.k1, the reasoning prompt or the candidates' document lengths "
                       "changed: the bias is recomputed",
        hash_extra="purecover.teacher.calibration:bias_inputs_fingerprint", needed="purecover.stages:calibration_needed",
        test_set=True,
    ),
    Stage(
        name="label",
        runner="purecover.teacher.job:write_labels",
        help="teacher labels: CoT, attention coverage, greedy subset -> run_dir/labels.jsonl",
        description="Read run_dir/candidates.jsonl; get reasoning steps (teacher.steps: model = the teacher's "
                    "reply, oracle = the dataset's decomposition), estimate step weights e and coverage W "
                    "(teacher.estimator: attention or embedding), optionally fuse LANCER ratings, and select a "
                    "subset with the coverage-minus-noise greedy. Resumable. For several processes/GPUs use "
                    "`accelerate launch -m purecover.teacher RECIPE [--set ...]` (each rank labels its shard, "
                    "rank 0 merges).",
        reads=("candidates", "bias"), writes=("labels",), sections=("data", "teacher", "seed"), scratch=("label_shards",),
        summary="purecover.records:LabelSummary",
        headline=("questions", "mean_size", "size_histogram", "fallback_rate", "first_step_stop_rate", "error",
                  "questions_per_second_rank0", "warning"),
        module="purecover.teacher", test_set=True,
    ),
    Stage(
        name="train",
        runner="purecover.train.run:train_student",
        help="distil the student (LoRA) from labels.jsonl -> run_dir/checkpoints/",
        description="Train the student selector with L = L_CL + student.lm_weight * L_LM (exact "
                    "permutation-invariant LM loss for up to student.m_exact selected passages). student.training "
                    "takes any transformers TrainingArguments field. Resumes from the last checkpoint; a finished "
                    "run for the same configuration is skipped without loading anything. Calibrates the threshold "
                    "tau3 on the calibration split and scores it on the test split (student.eval_fraction, "
                    "student.calibration_share). Multi-GPU / DeepSpeed: set student.launch.config_file (e.g. "
                    "configs/accelerate/deepspeed_zero2.yaml) and student.launch.num_processes, and this command "
                    "(and `purecover pipeline`) runs `accelerate launch ... -m purecover.train` for you; or run "
                    "accelerate launch --config_file configs/accelerate/<cfg>.yaml -m purecover.train RECIPE "
                    "[--set ...] yourself.",
        reads=("candidates", "labels"), writes=("final",), sections=("data", "teacher", "student", "seed"),
        scratch=("checkpoints",), needed="purecover.stages:student_needed", launcher="purecover.pipeline:launch_command",
        foreign="purecover.train.run:foreign_student", check="purecover.train.run:check_training_arguments",
        summary="purecover.records:TrainSummary",
        headline=("train_questions", "calib_questions", "test_questions", "train_loss", "tau3", "test_subset_f1"),
        module="purecover.train",
    ),
    Stage(
        name="export",
        runner="purecover.train.export:write_selector",
        help="merge the LoRA student into its base -> run_dir/selector/ (safetensors, selector_config.json)",
        description="Merge the trained adapter of run_dir/checkpoints/final into the base model (export.merge: "
                    "true) and write a plain transformers model (safetensors shards), its tokenizer, "
                    "selector_config.json (identifiers, prompt template, k1, tau3, k_max, min_select) and a model "
                    "card to run_dir/selector/ (written to a temporary directory, then renamed into place).",
        reads=("final",), writes=("selector",), sections=("data", "teacher", "student", "export", "seed"),
        summary="purecover.records:ExportSummary",
        headline=("format", "tau3", "size_bytes"), needed="purecover.stages:student_needed",
        command="purecover.train.export_cli:export_command",
    ),
    Stage(
        name="select",
        runner="purecover.select.job:write_selections",
        help="run the exported selector over the evaluation questions -> selections.jsonl",
        description="Load run_dir/selector/ and score every candidate of the evaluation questions in one forward "
                    "pass per question: run_dir/candidates.jsonl -> run_dir/selections.jsonl, or with eval.path the "
                    "test set's run_dir/test/candidates.jsonl -> run_dir/test/selections.jsonl. Writes the selected "
                    "positions and doc ids, all identifier logits and probabilities. Resumable.",
        reads=("candidates", "selector"), writes=("selections",), sections=("data",),
        summary="purecover.records:SelectSummary",
        headline=("questions", "mean_selected", "questions_per_second"),
        hash_extra="purecover.select.job:selector_fingerprint", module="purecover.select",
        needed="purecover.stages:student_needed", directory="purecover.stages:test_set_directory",
        inputs="purecover.select.job:selection_inputs", hashed="selector or data", command="purecover.select.byo_cli:select_command",
    ),
    Stage(
        name="evaluate",
        runner="purecover.eval.job:evaluate_methods",
        help="RAG QA evaluation: methods x budgets -> run_dir/eval/ (metrics.json, report.md, plots)",
        description="For every method of eval.methods (retrieval, cross_encoder, mmr, xquad, ia_select, lancer_*, "
                    "teacher, student, none; teacher:DIR / student:DIR for another run's labels or selections; "
                    "selections:PATH=NAME for any reranker's selections or TREC run file) and "
                    "every budget of eval.budgets, select at most K passages, answer with eval.generator (QA "
                    "prompt, greedy) and score EM/F1/Acc with the dataset's rules plus Coverage@K / Purity@K, "
                    "α-nDCG@K and subtopic recall@K. "
                    "Questions: eval.path (a test set), else the student's held-out split of "
                    "run_dir/candidates.jsonl (eval.questions: all for every question). Runs `select` first when "
                    "the student is evaluated. Generations are cached by prompt hash in "
                    "run_dir/eval/generations.jsonl: a rerun only generates what is missing. Writes "
                    "predictions/<method>@<K>.jsonl, metrics.json, report.md and plots/*.png.",
        reads=("candidates", "labels", "selections"), writes=("metrics", "report"), sections=_ALL_SECTIONS,
        summary="purecover.records:EvaluateSummary",
        headline=("questions", "generated", "cached", "em@"), on_change="rerun", before=("select",),
        inputs="purecover.eval.job:evaluation_inputs",
    ),
)}

def dependency_order(stages: dict[str, Stage]) -> tuple[str, ...]:
    """The stages ordered so that each comes after every stage that writes a file it reads (declaration order
    among the ready ones); a cycle is a ValueError naming the stages left."""
    writer = {key: name for name, st in stages.items() for key in st.writes}
    needs = {name: {writer[k] for k in st.reads if k in writer and writer[k] != name} for name, st in stages.items()}
    order: list[str] = []
    while len(order) < len(stages):
        ready = [n for n in stages if n not in order and needs[n] <= set(order)]
        if not ready:
            raise ValueError(f"the stages {', '.join(n for n in stages if n not in order)} read each other's outputs")
        order.append(ready[0])
    return tuple(order)


# The pipeline's order comes from what each stage reads and writes.
PIPELINE: tuple[str, ...] = tuple(n for n in dependency_order(STAGES) if STAGES[n].pipeline)


def get_stage(name: str) -> Stage:
    """The registry entry `name`; an unknown name is a ValueError listing the stages."""
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; expected one of {', '.join(STAGES)}") from None


def load_hook(target: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` string names (imports the module)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def summary_type(name: str) -> type[StageSummary]:
    """The record stage `name`'s body returns (`Stage.summary`)."""
    cls = load_hook(get_stage(name).summary)
    if not (isinstance(cls, type) and issubclass(cls, StageSummary)):
        raise TypeError(f"stage {name}: summary {get_stage(name).summary} is not a StageSummary record")
    return cls


def load_runner(name: str) -> Runner:
    """The runner function of stage `name` (imports its module)."""
    return load_hook(get_stage(name).runner)


def config_hash(recipe: Recipe, name: str) -> str:
    """The config hash stage `name` records in its manifest: its recipe sections without `HASH_EXCLUDE` and
    without the `HASH_OMIT_AT_DEFAULT` / `HASH_OMIT_AT_VALUE` keys that hold their old value (16 hex chars),
    plus the stage's `hash_extra` (e.g. the selector's fingerprint) when it declares one."""
    stage = get_stage(name)
    omitted = tuple(k for k in HASH_OMIT_AT_DEFAULT if _at_default(recipe, k)) + tuple(
        k for k, old in HASH_OMIT_AT_VALUE.items() if _value_of(recipe, k) == old)
    base = section_fingerprint(recipe, *stage.sections, exclude=HASH_EXCLUDE + omitted)
    if stage.hash_extra is None:
        return base
    extra = load_hook(stage.hash_extra)(recipe)
    return hashlib.sha256(f"{base}:{extra}".encode()).hexdigest()[:16]


def stage_directory(recipe: Recipe, name: str) -> RunDir:
    """The run directory stage `name` writes for `recipe` (its `Stage.directory` hook; default run_dir)."""
    hook = get_stage(name).directory
    return RunDir(load_hook(hook)(recipe)) if hook else RunDir.of(recipe)


def test_set_directory(recipe: Recipe) -> Path:
    """run_dir, or with eval.path the test set's run directory (`RunDir.test_set`: run_dir/test), where
    selections for the evaluation questions go."""
    rd = RunDir.of(recipe)
    return rd.test_set().path if recipe.eval.path else rd.path


def no_inputs(recipe: Recipe) -> dict[str, Path]:
    """For a stage whose `hash_extra` already covers what it reads: no input is recorded."""
    return {}


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

    Under the run directory's lock: compute the config hash; ask `RunDir.status`; refuse a blocked stage
    (`StageBlockedError`); return the stored summary of a complete one (unless `force`: ``--from``); set
    damaged outputs aside (``redo``); mark the stage running; run its body; mark it complete with what its
    outputs and inputs hold. Manifests are written by rank 0 only (every rank of a launch runs the body).
    `body`, `config_hash_value` and `directory` replace the registry's (a selection with another selector).
    """
    stage = get_stage(name)
    if with_before:
        for prior in stage.before:
            if not_needed(recipe, prior) is None:
                execute_stage(prior, recipe, show_progress)
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
