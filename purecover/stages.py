"""The stage registry: every stage of a run, declared once.

Each `Stage` names its runner (imported lazily, so `purecover --help` stays fast and optional
dependencies are needed only by the stages that use them), the run-directory files it reads and
writes (keys of `purecover.rundir.FILES`), the recipe sections its config hash covers, the summary
keys the pipeline's final table shows, and its command-line help. ``purecover`` builds one
subcommand per entry, `purecover pipeline` runs the entries marked ``pipeline`` in order, and each
``python -m purecover.<stage>`` entry runs its entry through `run_stage`; adding a stage is one entry
here and one runner function.

This module imports only the configuration; it never imports a stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from collections.abc import Callable
from typing import Any

from .config import Recipe, section_fingerprint

__all__ = ["HASH_EXCLUDE", "HASH_OMIT_AT_DEFAULT", "PIPELINE", "STAGES", "Stage", "config_hash", "get_stage", "load_runner", "not_needed",
           "run_stage"]

Runner = Callable[..., dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a run.

    `runner` is ``"module:function"``, called as ``function(recipe, show_progress=...)`` (or
    ``function(recipe)`` when `progress` is false) and returning the summary it also writes to
    ``run_dir/<name>.run.json``. `writes[0]`... are checked before a complete stage is skipped.
    `on_change` says what a changed configuration means for existing outputs: ``refuse`` (the stage
    would mix two configurations: use a new run_dir) or ``rerun`` (the outputs are recomputed; a
    cache keeps the expensive part). `before` lists stages that a standalone run of this stage runs
    first when they are needed (each skips itself when complete).
    """

    name: str
    runner: str
    help: str
    description: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    sections: tuple[str, ...]
    headline: tuple[str, ...] = ()
    pipeline: bool = True
    progress: bool = True
    on_change: str = "refuse"
    before: tuple[str, ...] = ()
    module: str | None = None  # `python -m` entry, for launchers (accelerate, torchrun)
    hash_extra: str | None = None  # "module:function(recipe) -> str" mixed into the config hash


def _student_evaluated(recipe: Recipe) -> bool:
    return "student" in [str(m).strip() for m in recipe.eval.methods]


def not_needed(recipe: Recipe, stage: str) -> str | None:
    """Why `stage` has nothing to do for this recipe (None when it is needed)."""
    t = recipe.teacher
    if stage == "calibrate":
        if t.estimator != "attention":
            return f"teacher.estimator is {t.estimator}"
        if not t.calibrate:
            return "teacher.calibrate is false"
    if stage in ("train", "export", "select") and not _student_evaluated(recipe):
        return "eval.methods has no student"
    return None


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
    "data.index_path",
    "data.faiss_index",
    "data.faiss_search_params",
    "data.embedding_dtype",
    "data.encode_shard_size",
)


def _at_default(recipe: Recipe, dotted: str) -> bool:
    section, key = dotted.split(".")
    config = getattr(recipe, section)
    return bool(getattr(config, key) == getattr(type(config)(), key))


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage(
        name="data",
        runner="purecover.data.candidates:run_data_stage",
        help="retrieve top-K1 candidates per question -> run_dir/candidates.jsonl",
        description="Load the dataset (data.dataset, data.path), build the corpus (data.corpus: per_question, "
                    "shared or a corpus JSONL), retrieve data.k1 passages per question with data.retriever (bm25 "
                    "or dense) and write run_dir/candidates.jsonl. Resumable: a rerun skips questions already "
                    "written; a complete run for the same data section is skipped.",
        reads=(), writes=("candidates",), sections=("data",),
        headline=("questions", "supporting_recall@", "questions_per_second"),
    ),
    Stage(
        name="calibrate",
        runner="purecover.teacher.job:run_calibrate_stage",
        help="teacher position-bias calibration -> run_dir/bias.json",
        description="Run the teacher once over the prompt template with data.k1 content-free documents and a fixed "
                    "dummy reasoning trace; write the per-position attention bias to run_dir/bias.json (keys: "
                    "model and its weights, k1, template, layers, document lengths). Needed by `label` when "
                    "teacher.calibrate is true.",
        reads=("candidates",), writes=("bias",), sections=("teacher",),
        headline=("k1", "doc_tokens", "seconds"), on_change="rerun",
    ),
    Stage(
        name="label",
        runner="purecover.teacher.job:run_label_stage",
        help="teacher labels: CoT, attention coverage, greedy subset -> run_dir/labels.jsonl",
        description="Read run_dir/candidates.jsonl; get reasoning steps (teacher.steps: model = the teacher's "
                    "reply, oracle = the dataset's decomposition), estimate step weights e and coverage W "
                    "(teacher.estimator: attention or embedding), optionally fuse LANCER ratings, and select a "
                    "subset with the coverage-minus-noise greedy. Resumable. For several processes/GPUs use "
                    "`accelerate launch -m purecover.teacher RECIPE [--set ...]` (each rank labels its shard, "
                    "rank 0 merges).",
        reads=("candidates", "bias"), writes=("labels",), sections=("data", "teacher", "seed"),
        headline=("questions", "mean_size", "size_histogram", "fallback_rate", "first_step_stop_rate", "error",
                  "questions_per_second_rank0", "warning"),
        module="purecover.teacher",
    ),
    Stage(
        name="train",
        runner="purecover.train.run:run_train_stage",
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
        headline=("train_questions", "calib_questions", "test_questions", "train_loss", "tau3", "test_subset_f1"),
        module="purecover.train",
    ),
    Stage(
        name="export",
        runner="purecover.train.export:run_export_stage",
        help="merge the LoRA student into its base -> run_dir/selector/ (safetensors, selector_config.json)",
        description="Merge the trained adapter of run_dir/checkpoints/final into the base model (export.merge: "
                    "true) and write a plain transformers model (safetensors shards), its tokenizer, "
                    "selector_config.json (identifiers, prompt template, k1, tau3, k_max, min_select) and a model "
                    "card to run_dir/selector/ (written to a temporary directory, then renamed into place).",
        reads=("final",), writes=("selector_config",), sections=("data", "teacher", "student", "export", "seed"),
        headline=("format", "tau3", "size_bytes"), progress=False,
    ),
    Stage(
        name="select",
        runner="purecover.select.job:run_select_stage",
        help="run the exported selector over the evaluation questions -> selections.jsonl",
        description="Load run_dir/selector/ and score every candidate of the evaluation questions in one forward "
                    "pass per question: run_dir/candidates.jsonl -> run_dir/selections.jsonl, or with eval.path the "
                    "test set's run_dir/eval/candidates.jsonl -> run_dir/eval/selections.jsonl. Writes the selected "
                    "positions and doc ids, all identifier logits and probabilities. Resumable.",
        reads=("candidates", "selector_config"), writes=("selections",), sections=("data",),
        headline=("questions", "mean_selected", "questions_per_second"),
        hash_extra="purecover.select.job:selector_fingerprint", module="purecover.select",
    ),
    Stage(
        name="evaluate",
        runner="purecover.eval.job:run_evaluate_stage",
        help="RAG QA evaluation: methods x budgets -> run_dir/eval/ (metrics.json, report.md, plots)",
        description="For every method of eval.methods (retrieval, cross_encoder, mmr, xquad, ia_select, lancer_*, "
                    "teacher, student, none; teacher:DIR / student:DIR for another run's labels or selections; "
                    "selections:PATH=NAME for any reranker's selections or TREC run file) and "
                    "every budget of eval.budgets, select at most K passages, answer with eval.generator (QA "
                    "prompt, greedy) and score EM/F1/Acc with the dataset's rules plus Coverage@K / Purity@K. "
                    "Questions: eval.path (a test set), else the student's held-out split of "
                    "run_dir/candidates.jsonl (eval.questions: all for every question). Runs `select` first when "
                    "the student is evaluated. Generations are cached by prompt hash in "
                    "run_dir/eval/generations.jsonl: a rerun only generates what is missing. Writes "
                    "predictions/<method>@<K>.jsonl, metrics.json, report.md and plots/*.png.",
        reads=("candidates", "labels", "selections"), writes=("metrics", "report"), sections=_ALL_SECTIONS,
        headline=("questions", "generated", "cached", "em@"), on_change="rerun", before=("select",),
    ),
)}

PIPELINE: tuple[str, ...] = tuple(name for name, s in STAGES.items() if s.pipeline)


def get_stage(name: str) -> Stage:
    """The registry entry `name`; an unknown name is a ValueError listing the stages."""
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; expected one of {', '.join(STAGES)}") from None


def _load(target: str) -> Callable[..., Any]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_runner(name: str) -> Runner:
    """The runner function of stage `name` (imports its module)."""
    return _load(get_stage(name).runner)


def config_hash(recipe: Recipe, name: str) -> str:
    """The config hash stage `name` records in its manifest: its recipe sections without `HASH_EXCLUDE`
    (16 hex chars), plus the stage's `hash_extra` (e.g. the selector's fingerprint) when it declares one."""
    stage = get_stage(name)
    omitted = tuple(k for k in HASH_OMIT_AT_DEFAULT if _at_default(recipe, k))
    base = section_fingerprint(recipe, *stage.sections, exclude=HASH_EXCLUDE + omitted)
    if stage.hash_extra is None:
        return base
    extra = _load(stage.hash_extra)(recipe)
    return hashlib.sha256(f"{base}:{extra}".encode()).hexdigest()[:16]


def run_stage(name: str, recipe: Recipe, show_progress: bool = True, with_before: bool = True) -> dict[str, Any]:
    """Run stage `name` (after its needed `before` stages when `with_before`); returns its summary."""
    stage = get_stage(name)
    if with_before:
        for prior in stage.before:
            if not_needed(recipe, prior) is None:
                run_stage(prior, recipe, show_progress)
    runner = load_runner(name)
    return runner(recipe, show_progress=show_progress) if stage.progress else runner(recipe)
