"""The train stage: labels → LoRA student checkpoints (+ τ3), in one process or under `accelerate launch`.

    purecover train RECIPE [--set ...]                                   # one process
    accelerate launch --config_file configs/accelerate/<cfg>.yaml -m purecover.train RECIPE [--set ...]

Outputs in ``run_dir/checkpoints/``: the Trainer's ``checkpoint-N/`` folders (model/adapter,
optimizer, scheduler, RNG states: a rerun resumes from the last one) and ``final/`` (the trained
adapter or model, the tokenizer, and ``purecover_student.json`` with the identifier scheme, K1
and the calibrated threshold τ3).

Run under the stage contract (`purecover.contract.execute_stage`): a complete ``train.run.json`` whose
recorded ``final/`` files are all there is skipped without loading anything; a run with another
configuration is refused before anything loads; a kill, or a ``final/`` file deleted since, resumes from
the last *complete* checkpoint (`checkpoint_problem`: every file the Trainer writes is there), so a
checkpoint that lost its optimizer state is passed over with a warning instead of resumed with a fresh
optimizer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError, Recipe
from ..config.student_settings import LOSS_SETTINGS, READOUT_SETTINGS, settings_of
from ..contract import StageRun
from ..data.data_stage import read_candidate_records
from ..models.identifiers import IdentifierScheme
from ..models.passage_scores import hf_passage_logits
from ..models.readouts import get_readout
from ..models.score_head import SCORE_HEAD_FILE, ScoreHead
from ..models.selector import hf_identifier_logits
from ..models.selector_prompt import SelectorWording, end_token_id, prompt_template
from ..records import (
    RecordError,
    StageSummary,
    StudentLora,
    StudentLosses,
    StudentMeta,
    TrainSummary,
    load_json_record,
)
from ..rundir import FILES, RunDir
from ..utils.io import apply_umask, atomic_write_json
from ..utils.progress import tqdm
from .data import (
    SelectorCollator,
    SelectorDataset,
    read_labelled_questions,
    render_examples,
    split_examples,
    training_splits,
)
from .epoch_orders import EpochShuffledDataset, EpochViewCallback
from .log_lines import use_log_lines
from .loss_history import ResumeMarker, whole_run_train_loss
from .losses import ReplyFormat
from .selector_arguments import SelectorTrainingArguments, loss_settings
from .shared_files import UmaskCallback
from .threshold import calibrate_thresholds, subset_f1_both_spaces
from .trainer import SelectorTrainer

log = logging.getLogger(__name__)

__all__ = ["STUDENT_META", "build_training_arguments", "checkpoint_problem", "first_position_logits", "foreign_student", "run_train_stage",
           "train_student"]

CHECKPOINTS = FILES["checkpoints"]
FINAL = Path(FILES["final"]).name
STUDENT_META = Path(FILES["student_meta"]).name  # in checkpoints/final/

_DEFAULT_TRAINING: dict[str, int | float | str | bool] = {
    "per_device_train_batch_size": 1,
    "per_device_eval_batch_size": 1,
    "gradient_accumulation_steps": 1,
    "num_train_epochs": 1,
    "learning_rate": 1e-4,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "logging_steps": 10,
    "save_strategy": "steps",
    "save_steps": 200,
    "save_total_limit": 2,
    "report_to": "none",
    "remove_unused_columns": False,
    "dataloader_num_workers": 0,
}


def build_training_arguments(recipe: Recipe, has_eval: bool, dry_run: bool = False) -> SelectorTrainingArguments:
    """The run's SelectorTrainingArguments: the defaults above, overridden by ``student.training``, and the
    loss settings of ``student`` (lm_weight, cl_weight, m_exact, lm_reduction).

    Keys and values are checked by `purecover.train.arguments.check_training_section`. ``dry_run``: only
    build them on the CPU in a temporary directory, changing no process state (the recipe check
    that `purecover.validate.validate_recipe` runs before any stage).
    """
    from .arguments import check_training_section, dry_training_arguments

    user = dict(recipe.student.training)
    check_training_section(user)
    if user.get("output_dir") not in (None, str(recipe.run_path / CHECKPOINTS)):
        raise ConfigError("student.training.output_dir is fixed to run_dir/checkpoints; change run_dir instead")
    kwargs = {**_DEFAULT_TRAINING, "seed": recipe.seed, "data_seed": recipe.seed,
              "eval_strategy": "epoch" if has_eval else "no", **user,
              "output_dir": str(recipe.run_path / CHECKPOINTS), **loss_settings(recipe.student)}
    kwargs.pop("resume_from_checkpoint", None)
    if dry_run:
        return dry_training_arguments(kwargs)
    from ..utils.tracking import training_tracking

    kwargs.update(training_tracking(recipe, user))  # tracking.report_to unless student.training.report_to
    if not torch.cuda.is_available():
        kwargs.setdefault("use_cpu", True)
        if kwargs.get("bf16"):
            from ..utils.cpu_features import warn_unless_cpu_bf16

            warn_unless_cpu_bf16("student.training.bf16: true (bfloat16 autocast)")
    return SelectorTrainingArguments(**kwargs)


def _load_student(recipe: Recipe) -> tuple[Any, Any]:
    from transformers import set_seed

    from ..models.loading import load_causal_lm, load_tokenizer

    cfg = recipe.student
    set_seed(recipe.seed)  # LoRA A matrices are initialised at random: same seed, same start
    tokenizer = load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code, padding_side="left")
    model = load_causal_lm(cfg.model, dtype=cfg.dtype, device="cpu", trust_remote_code=cfg.trust_remote_code)
    model.train()
    if cfg.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                          target_modules=cfg.lora.target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    elif cfg.freeze_embeddings:
        freeze_embeddings(model)
    return model, tokenizer


def freeze_embeddings(model: Any) -> int:
    """Keep the token embedding and the output projection (tied or not) fixed; returns the parameters frozen."""
    frozen = 0
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        weight = getattr(module, "weight", None)
        if weight is not None and weight.requires_grad:
            weight.requires_grad_(False)
            frozen += weight.numel()
    return frozen


def first_position_logits(model: Any, prompts: list[list[int]], identifier_ids: list[int], n_docs: list[int],
                          batch_size: int = 4) -> list[list[float]]:
    """Identifier logits at the first reply position, per prompt (left-padded batches, one forward each)."""
    return hf_identifier_logits(model, prompts, [identifier_ids[:n] for n in n_docs], batch_size=batch_size)


def checkpoint_problem(d: Path, needs_head: bool = False) -> str | None:
    """What a ``checkpoint-N`` folder lacks to be resumed exactly as saved (None when complete).

    The Trainer writes, in order, the weights (``adapter_model.safetensors`` or ``model*.safetensors``),
    the optimizer and scheduler state (``optimizer.pt``, ``scheduler.pt``; under DeepSpeed the engine's
    ``global_step*/`` folder named by ``latest`` instead), the RNG state (``rng_state*.pth``) and last
    ``trainer_state.json``. Resuming without the optimizer or scheduler state silently trains another
    student, so each is required; so is ``score_head.safetensors`` (written with the weights) when `needs_head`
    (``passage_score: head``).
    """
    if not (d / "trainer_state.json").is_file():
        return "no trainer_state.json (interrupted while saving)"
    deepspeed = (d / "latest").is_file()
    if deepspeed:
        tag = (d / "latest").read_text(encoding="utf-8").strip()
        if not tag or not (d / tag).is_dir():
            return f"DeepSpeed state {tag or '(empty latest)'}/ is missing"
    else:
        if not any(d.glob("*.safetensors")):
            return "no weights (*.safetensors)"
        for name in ("optimizer.pt", "scheduler.pt"):
            if not (d / name).is_file():
                return f"no {name}"
    if needs_head and not (d / SCORE_HEAD_FILE).is_file():
        return f"no {SCORE_HEAD_FILE} (the scoring head)"
    if needs_head:
        try:
            ScoreHead.load(d)  # its checks: the tensors, their shapes, finite values
        except ValueError as exc:
            return f"its scoring head is unusable ({exc})"
    if not any(d.glob("rng_state*.pth")):
        return "no rng_state*.pth"
    return None


def _last_complete_checkpoint(output_dir: Path, needs_head: bool = False) -> str | None:
    """The ``checkpoint-N`` to resume from: the newest complete one (`checkpoint_problem`); an incomplete one
    is passed over with a warning.

    A checkpoint saved at ``max_steps`` is passed over for the one before it (or a fresh start): the
    Trainer resumed there takes one step past ``max_steps`` before it checks (transformers 5), whereas
    replaying the last steps from the previous checkpoint is deterministic and ends where an
    uninterrupted run ends.
    """
    if not output_dir.is_dir():
        return None
    found = []
    for d in output_dir.glob("checkpoint-*"):
        suffix = d.name.split("-", 1)[1]
        if d.is_dir() and suffix.isdigit():
            found.append((int(suffix), d))
    for _step, d in sorted(found, reverse=True):
        problem = checkpoint_problem(d, needs_head)
        if problem is not None:
            earlier = [e.name for s, e in sorted(found, reverse=True) if s < _step]
            log.warning("not resuming from %s: %s; %s", d, problem,
                        f"trying the earlier {', '.join(earlier)}" if earlier else "no earlier checkpoint: training "
                        "starts afresh")
            continue
        state = json.loads((d / "trainer_state.json").read_text(encoding="utf-8"))
        if 0 < int(state.get("max_steps") or 0) <= int(state.get("global_step") or 0):
            log.info("checkpoint %s is at max_steps: resuming from the one before it instead", d)
            continue
        return str(d)
    return None


def foreign_student(rd: RunDir, config_hash: str) -> str | None:
    """Why checkpoints found without train.run.json belong to another configuration: the hash recorded in
    their ``final/purecover_student.json`` differs (None when there is none to compare)."""
    path = rd.path_of("final") / STUDENT_META
    try:
        recorded = load_json_record(path, StudentMeta).config_hash
    except (OSError, RecordError):
        return None
    if recorded and recorded != config_hash:
        return (f"{rd.path_of('final')} holds a student trained with another configuration (hash {recorded}, "
                f"now {config_hash})")
    return None


def run_train_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Train the student on run_dir/labels.jsonl; returns the summary written to train.run.json (a
    `TrainSummary`; a complete stage's stored summary that another version wrote may read as a plain
    `StageSummary`)."""
    from ..contract import run_stage

    return run_stage("train", recipe, show_progress)


def _f1(value: float | None) -> float | None:
    """A subset F1 as stored: 4 decimals."""
    return None if value is None else round(value, 4)


def train_student(run: StageRun) -> TrainSummary:
    """The train stage's body (every rank of a launch runs it): LoRA distillation from the labels, resumed from
    the last complete checkpoint, then τ3 on the calibration split; rank 0 writes final/."""
    recipe, show_progress = run.recipe, run.show_progress
    cfg = recipe.student
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    candidates, labels = rd.path_of("candidates"), rd.path_of("labels")
    config_hash = run.config_hash
    model, tokenizer = _load_student(recipe)
    k1 = max(len(rec.docs) for rec in read_candidate_records(candidates)) if candidates.is_file() else recipe.data.k1
    scheme = IdentifierScheme(cfg.identifiers).check(tokenizer, k1)
    wording = SelectorWording.from_config(cfg)  # ours, or student.prompt_file's parts over ours
    questions, counts = read_labelled_questions(candidates, labels, target=cfg.target, target_k=cfg.target_k)
    # training: student.candidate_shuffles seeded orders per question (labels permuted with their passages);
    # calibration and test in retrieval order
    train, calib, test = training_splits(questions, tokenizer, scheme, cfg.max_passage_tokens, wording,
                                         eval_fraction=cfg.eval_fraction, calibration_share=cfg.calibration_share,
                                         seed=recipe.seed, candidate_shuffles=cfg.candidate_shuffles,
                                         readout=cfg.readout)
    reader = get_readout(cfg.readout, cfg.passage_score)
    read_token = reader.read_token(tokenizer)  # the token read at each marker, or None (identifier readout)
    score_head = reader.new_head(model, read_token)  # a head trained with the adapter, or None
    train_dataset: torch.utils.data.Dataset = SelectorDataset(train)
    callbacks = [ResumeMarker(), UmaskCallback()]
    if cfg.reshuffle_each_epoch:  # epoch 0 as `train`; each later epoch its own fresh orders
        train_q = split_examples(questions, cfg.eval_fraction, recipe.seed, cfg.calibration_share)[0]
        train_dataset = EpochShuffledDataset(
            train_q, cfg.candidate_shuffles, recipe.seed,
            lambda q: render_examples([q], tokenizer, scheme, cfg.max_passage_tokens, wording, cfg.readout)[0])
        callbacks.append(EpochViewCallback(train_dataset))
    args = build_training_arguments(recipe, has_eval=bool(calib))
    if not show_progress:
        args.disable_tqdm = True
    fmt = ReplyFormat(tuple(scheme.token_ids), int(scheme.separator_id), end_token_id(tokenizer))
    trainer = SelectorTrainer(
        model=model, args=args, train_dataset=train_dataset,
        eval_dataset=SelectorDataset(calib) if calib else None, data_collator=SelectorCollator(),
        processing_class=tokenizer, reply_format=fmt, pad_id=tokenizer.pad_token_id or 0, read_token=read_token,
        score_head=score_head, callbacks=callbacks,
    )
    use_log_lines(trainer, show_progress=not args.disable_tqdm)
    is_main = trainer.accelerator.is_main_process
    resume = cfg.training.get("resume_from_checkpoint")
    if resume is None:
        resume = _last_complete_checkpoint(Path(args.output_dir), needs_head=score_head is not None)
    if resume:
        log.info("resuming from %s", resume)
    if resume and score_head is not None:  # the Trainer restores the adapter and the optimizer; the head is ours
        try:
            head = ScoreHead.load(resume, hidden_size=score_head.hidden_size)
        except ValueError as exc:  # only a given resume_from_checkpoint gets here: found ones are checked
            usable = _last_complete_checkpoint(Path(args.output_dir), needs_head=True)
            raise ValueError(f"{exc}. student.training.resume_from_checkpoint names {resume}: "
                             + (f"resume from {usable} instead, the newest usable checkpoint of this run"
                                if usable else "no checkpoint of this run is usable; unset it to train afresh")
                             ) from None
        score_head.load_state_dict(head.state_dict())
    result = trainer.train(resume_from_checkpoint=resume)
    final = Path(args.output_dir) / FINAL
    trainer.save_model(str(final))

    # τ3 on the calibration split, scored on the test split (all ranks run the forwards: ZeRO-3 shards
    # the weights); τ3 on the logits and on their identifier log-softmax (vLLM log-prob modes).
    def scores_of(exs: list[Any], split: str) -> list[list[float]]:
        """The student's scores of `exs`, in chunks of a few batches with a progress bar or log line (`split`
        names them): on CPU a few hundred questions take minutes."""
        chunk = 4 * args.per_device_eval_batch_size
        out: list[list[float]] = []
        with tqdm(total=len(exs), desc=f"scoring the {split} split", unit="q",
                          disable=not show_progress or not is_main) as bar:
            for i in range(0, len(exs), chunk):
                part = exs[i:i + chunk]
                if reader.reads_at_markers:  # the score token's logit (or the head) at each marker
                    out += hf_passage_logits(trainer.model, [e.input_ids for e in part],
                                             [e.read_positions for e in part], read_token,
                                             batch_size=args.per_device_eval_batch_size,
                                             pad_id=tokenizer.pad_token_id or 0, score_head=trainer.head_readout)
                else:
                    out += first_position_logits(trainer.model, [e.input_ids for e in part], scheme.token_ids,
                                                 [e.n_docs for e in part], batch_size=args.per_device_eval_batch_size)
                bar.update(len(part))
        return out

    tuned_on = calib if calib else train
    k_max = cfg.k_max or recipe.teacher.budget
    th = calibrate_thresholds(scores_of(tuned_on, "calibration" if calib else "training"),
                              [e.selected for e in tuned_on], cfg.min_select, k_max)
    tau3 = th["tau3"]
    tested = subset_f1_both_spaces(scores_of(test, "test"), [e.selected for e in test], th, cfg.min_select, k_max) \
        if test else None
    calib_f1, calib_f1_logprob = _f1(th["calib_subset_f1"]), _f1(th["calib_subset_f1_logprob"])
    test_f1 = _f1(tested["test_subset_f1"]) if tested else None
    test_f1_logprob = _f1(tested["test_subset_f1_logprob"]) if tested else None
    if test:  # the held-out figure in the Trainer's own log too (log_history, wandb's test/ panel), labelled test_
        trainer.log({"test_subset_f1": test_f1, "test_subset_f1_logprob": test_f1_logprob,
                     "test_questions": len(test)})
    # the mean over the whole run, resumes included (the Trainer's own covers only the last train() call)
    loss = whole_run_train_loss(trainer.state.log_history, result.global_step, float(result.training_loss))
    summary = TrainSummary(
        status="complete", train_questions=len({e.qid for e in train}), train_examples=len(train),
        candidate_shuffles=cfg.candidate_shuffles, calib_questions=len(calib), test_questions=len(test),
        labels=counts.labels, used=counts.used, skipped_error=counts.skipped_error,
        global_step=result.global_step, lm_reduction=cfg.lm_reduction,
        train_loss=round(loss.train_loss, 6), train_loss_steps=loss.train_loss_steps,
        train_loss_this_run=round(loss.train_loss_this_run, 6), resumes=loss.resumes,
        resumed_from=str(resume) if resume else None, tau3=round(tau3, 6),
        tau3_logprob=round(th["tau3_logprob"], 6), calib_subset_f1=calib_f1,
        calib_subset_f1_logprob=calib_f1_logprob, test_subset_f1=test_f1, test_subset_f1_logprob=test_f1_logprob,
        threshold_split="calib" if calib else "train (no calibration split)",
        final=str(final),
    )
    if is_main:
        tokenizer.save_pretrained(final)
        meta = StudentMeta(
            base_model=cfg.model, lora=StudentLora(**dataclasses.asdict(cfg.lora)) if cfg.lora.enabled else None,
            identifiers=scheme.to_record(), k1=k1, tau3=tau3, tau3_logprob=th["tau3_logprob"],
            calib_subset_f1=calib_f1, calib_subset_f1_logprob=calib_f1_logprob, test_subset_f1=test_f1,
            test_subset_f1_logprob=test_f1_logprob, k_max=k_max, min_select=cfg.min_select,
            max_passage_tokens=cfg.max_passage_tokens, prompt_template=prompt_template(wording, cfg.readout),
            losses=StudentLosses(**settings_of(cfg, LOSS_SETTINGS)), **settings_of(cfg, READOUT_SETTINGS),
            log_history=trainer.state.log_history,
            config_hash=config_hash, summary=summary,
        )
        atomic_write_json(final / STUDENT_META, meta.to_json_dict())
        apply_umask(final)
        log.info("trained student: %s", json.dumps(summary.to_json_dict()))
    return summary
