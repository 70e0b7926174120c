"""The stage registry: every stage of a run, declared once (declarations only: no file is read or written here).

Each `Stage` names its runner (imported lazily, so `purecover --help` stays fast and optional
dependencies are needed only by the stages that use them), the run-directory files it reads and
writes (keys of `purecover.rundir.FILES`), the recipe sections its config hash covers, the summary
record it returns, the summary keys the pipeline's final table shows, and its command-line help.
``purecover`` builds one subcommand per entry, `purecover pipeline` runs the entries marked
``pipeline`` in order, and each ``python -m purecover.<stage>`` entry runs its entry through
`purecover.contract.run_stage`. Adding a stage is one entry here and one body function.

The layers (docs/development/architecture.md): this registry imports only the configuration and the
records; the run directory (`purecover.rundir`: files, manifests, locks) reads it; the contract
(`purecover.contract.execute_stage`: hash, status, skip or refuse, set aside, begin, body, complete)
sits above both; the pipeline and the command line above the contract. It never imports a stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Recipe, section_fingerprint
from .records import StageSummary

__all__ = ["HASH_EXCLUDE", "HASH_OMIT_AT_DEFAULT", "HASH_OMIT_AT_VALUE", "PIPELINE", "STAGES", "Runner", "Stage",
           "config_hash", "dependency_order", "get_stage", "load_hook", "load_runner", "no_inputs", "not_needed",
           "summary_type"]

log = logging.getLogger(__name__)

Runner = Callable[[Any], StageSummary]  # called with a `purecover.contract.StageRun`


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
    "threads",  # how many threads compute, not what
    "data.index_dir",  # where shared indexes live; their own keys say what they hold
    "data.index_verify",  # how much of an index is read to check it: the same files either way
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
    "teacher.format_example",
    "teacher.repeated_steps",
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
    "data.qrels",
    "eval.prompt_file",
    "eval.judgments",
    "eval.icr_model",
    "eval.icr_layers",
    "eval.icr_fusion_weight",
    "eval.icr_max_passage_tokens",
    "eval.cross_encoder_ft_base",
    "eval.cross_encoder_ft_epochs",
    "eval.cross_encoder_ft_learning_rate",
    "eval.cross_encoder_ft_bf16",
    "eval.report_note",
    "student.prompt_file",
    "teacher.reply_prefix",
    "student.readout",
    "student.bce_weight",
    "student.reshuffle_each_epoch",
    "student.passage_score",
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
        runner="purecover.data.data_stage:write_candidates",
        help="retrieve top-K1 candidates per question -> run_dir/candidates.jsonl",
        description="Load the dataset (data.dataset, data.path), build the corpus (data.corpus: per_question, "
                    "shared or a corpus JSONL), retrieve data.k1 passages per question with data.retriever (bm25 "
                    "or dense) and write run_dir/candidates.jsonl. Resumable: a rerun skips questions already "
                    "written; a complete run for the same data section is skipped.",
        reads=(), writes=("candidates",), sections=("data",),
        summary="purecover.records:DataSummary",
        headline=("questions", "with_gold", "supporting_recall@", "questions_per_second"),
        inputs="purecover.data.data_stage:dataset_inputs", check="purecover.data.paths:check_data_files", test_set=True,
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
        hash_extra="purecover.teacher.bias_fingerprint:bias_inputs_fingerprint", needed="purecover.stages:calibration_needed",
        test_set=True,
    ),
    Stage(
        name="label",
        runner="purecover.teacher.label_stage:write_labels",
        help="teacher labels: CoT, attention coverage, greedy subset -> run_dir/labels.jsonl",
        description="Read run_dir/candidates.jsonl; get reasoning steps (teacher.steps: model = the teacher's "
                    "reply, oracle = the dataset's decomposition, auto = oracle where a question has it, else the "
                    "reply), estimate step weights e and coverage W "
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
        runner="purecover.train.train_stage:train_student",
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
        foreign="purecover.train.train_stage:foreign_student", check="purecover.train.recipe_check:check_training_arguments",
        summary="purecover.records:TrainSummary",
        headline=("train_questions", "calib_questions", "test_questions", "train_loss", "tau3", "test_subset_f1"),
        module="purecover.train",
    ),
    Stage(
        name="export",
        runner="purecover.train.export_stage:write_selector",
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
        runner="purecover.select.select_stage:write_selections",
        help="run the exported selector over the evaluation questions -> selections.jsonl",
        description="Load run_dir/selector/ and score every candidate of the evaluation questions in one forward "
                    "pass per question: run_dir/candidates.jsonl -> run_dir/selections.jsonl, or with eval.path the "
                    "test set's run_dir/test/candidates.jsonl -> run_dir/test/selections.jsonl. Writes the selected "
                    "positions and doc ids, all identifier logits and probabilities. Resumable.",
        reads=("candidates", "selector"), writes=("selections",), sections=("data",),
        summary="purecover.records:SelectSummary",
        headline=("questions", "mean_selected", "questions_per_second"),
        hash_extra="purecover.select.stage_keys:selector_fingerprint", module="purecover.select",
        needed="purecover.stages:student_needed", directory="purecover.rundir:test_set_directory",
        inputs="purecover.select.stage_keys:selection_inputs", hashed="selector or data", command="purecover.select.byo_cli:select_command",
    ),
    Stage(
        name="evaluate",
        runner="purecover.eval.evaluate_stage:evaluate_methods",
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
        inputs="purecover.eval.stage_keys:evaluation_inputs",
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


def no_inputs(recipe: Recipe) -> dict[str, Path]:
    """For a stage whose `hash_extra` already covers what it reads: no input is recorded."""
    return {}
