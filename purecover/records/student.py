"""The student: the train stage's summary, checkpoints/final/purecover_student.json (its LoRA and loss
settings) and the export stage's summary."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, create_model, model_validator

from ..config.student_settings import LOSS_SETTINGS, READOUT_SETTINGS, record_fields
from .base import NonNegativeInt, _Written
from .manifests import StageSummary
from .selector import IdentifiersRecord


class TrainSummary(StageSummary):
    """The train stage's summary (``train.run.json``, and ``summary`` of the student metadata;
    `purecover.train.train_stage.train_student`)."""

    train_questions: NonNegativeInt = Field(description="Questions trained on.")
    train_examples: NonNegativeInt | None = Field(
        default=None, description="Training examples: one per candidate order of each training question "
                                  "(student.candidate_shuffles, at least one); null in summaries written before.")
    candidate_shuffles: NonNegativeInt | None = Field(
        default=None, description="Seeded random candidate orders per training question (0: retrieval order "
                                  "only); null in summaries written before the setting existed (retrieval order).")
    calib_questions: NonNegativeInt = Field(description="Questions of the calibration split (early stopping, τ3).")
    test_questions: NonNegativeInt = Field(description="Questions of the test split (used for neither training nor "
                                                       "τ3).")
    labels: NonNegativeInt = Field(description="Lines of labels.jsonl read.")
    used: NonNegativeInt = Field(description="Labels that became training examples.")
    skipped_error: NonNegativeInt = Field(description="Labels skipped because their status is error.")
    global_step: NonNegativeInt = Field(description="Optimizer steps taken, resumes included.")
    lm_reduction: str = Field(description="How L_LM is reduced per question (student.lm_reduction).")
    train_loss: float = Field(description="Mean training loss per step over the whole run, resumes included "
                                          "(6 decimals).")
    train_loss_steps: NonNegativeInt = Field(description="Steps whose loss is known (the steps train_loss is over).")
    train_loss_this_run: float = Field(description="The Trainer's own mean over the last train() call "
                                                   "(6 decimals).")
    resumes: list[int] = Field(description="The steps training resumed at, in order.")
    resumed_from: str | None = Field(description="The checkpoint the last call resumed from; null for a fresh "
                                                 "start.")
    tau3: float = Field(description="Threshold on the readout's logits (6 decimals).")
    tau3_logprob: float = Field(description="The same threshold on the identifier log-softmax (6 decimals).")
    calib_subset_f1: float | None = Field(description="Mean subset F1 at tau3 on the questions it was chosen on "
                                                      "(4 decimals).")
    calib_subset_f1_logprob: float | None = Field(description="The same at tau3_logprob (4 decimals).")
    test_subset_f1: float | None = Field(description="Mean subset F1 at tau3 on the test split (4 decimals); null "
                                                     "without a test split.")
    test_subset_f1_logprob: float | None = Field(description="The same at tau3_logprob; null without a test split.")
    threshold_split: str = Field(description="Where tau3 was chosen: calib, or the training questions when there "
                                             "is no calibration split.")
    final: str = Field(description="The checkpoint directory written (run_dir/checkpoints/final).")


class StudentLora(_Written):
    """The LoRA settings a student was trained with (the recipe's ``student.lora``)."""

    enabled: bool = Field(description="Whether a LoRA adapter was trained (always true here).")
    r: int = Field(ge=1, description="The LoRA rank.")
    alpha: int = Field(description="LoRA scaling alpha.")
    dropout: float = Field(description="Dropout on the LoRA path.")
    target_modules: str | list[str] = Field(description="Modules that got an adapter: all-linear or module names.")


# The loss settings a student was trained with (the recipe's ``student`` section; its readout is beside them in
# `StudentMeta`). A file of an early version without ``cl_weight``, ``lm_reduction``, ``reply_order`` or
# ``negatives`` trained with their defaults, which it reads as.
StudentLosses = create_model("StudentLosses", __base__=_Written, __module__=__name__,
                             __doc__="The loss settings a student was trained with (the recipe's ``student``).",
                             **record_fields(LOSS_SETTINGS))
_StudentReadout = create_model("_StudentReadout", __base__=_Written, __module__=__name__,
                               __doc__="Where a student's scores are read (its readout).",
                               **record_fields(READOUT_SETTINGS))


class StudentMeta(_StudentReadout):
    """``checkpoints/final/purecover_student.json``: what the export needs besides the weights (identifiers, K1,
    τ3, prompt template) and what the model card reports (train stage; read by export and the model card).

    Its readout (``readout``, ``passage_score``, first) and ``losses`` are the student's settings as the recipe
    had them (`purecover.config.student_settings`); earlier files kept the readout under ``losses``, which reads
    the same. Fields after ``tau3`` other than ``k_max``, ``min_select``, ``max_passage_tokens`` and
    ``prompt_template`` may be absent in checkpoints of early versions (read as null, or empty for
    ``log_history``)."""

    base_model: str = Field(min_length=1, description="Hub id or path of the model the student was trained from.")
    lora: StudentLora | None = Field(default=None, description="Its LoRA settings; null when all weights were "
                                                               "trained.")
    identifiers: IdentifiersRecord = Field(description="The identifier scheme (name, separator, labels).")
    k1: int = Field(ge=1, description="The most candidates one prompt holds.")
    tau3: float = Field(description="Threshold on the readout's logits (not rounded).")
    tau3_logprob: float | None = Field(default=None, description="The same threshold on the identifier "
                                                                 "log-softmax (not rounded).")
    calib_subset_f1: float | None = Field(default=None, description="Mean subset F1 at tau3 on the questions it "
                                                                    "was chosen on (4 decimals).")
    calib_subset_f1_logprob: float | None = Field(default=None, description="The same at tau3_logprob.")
    test_subset_f1: float | None = Field(default=None, description="Mean subset F1 at tau3 on the test split "
                                                                   "(4 decimals); null without one.")
    test_subset_f1_logprob: float | None = Field(default=None, description="The same at tau3_logprob.")
    k_max: int | None = Field(description="At most this many passages are kept; null for no limit.")
    min_select: int = Field(ge=0, description="At least this many passages are kept.")
    max_passage_tokens: int = Field(ge=1, description="Each passage was cut to this many tokens in the prompt.")
    prompt_template: dict[str, str] = Field(description="What defines the selection prompt (system, instructions, "
                                                        "layout, hash).")
    losses: StudentLosses | None = Field(default=None, description="The loss settings it was trained with.")
    log_history: list[dict[str, JsonValue]] = Field(default_factory=list, description="The Trainer's log records "
                                                                                      "(state.log_history), as "
                                                                                      "logged.")
    config_hash: str | None = Field(default=None, description="The train stage's config hash (a rerun with another "
                                                              "configuration is refused).")
    summary: TrainSummary | StageSummary | None = Field(
        default=None, description="The train stage's summary (a summary of an early version, which lacks some of "
                                  "its fields, reads as a plain StageSummary).")

    @model_validator(mode="before")
    @classmethod
    def _readout_beside_losses(cls, data: Any) -> Any:
        """A file written while the readout was kept under ``losses`` (before it sat beside them) is read with
        it moved out."""
        if isinstance(data, dict) and isinstance(data.get("losses"), dict):
            losses = data["losses"]
            if any(k in losses for k in READOUT_SETTINGS):
                data = {**{k: losses[k] for k in READOUT_SETTINGS if k in losses}, **data,
                        "losses": {k: v for k, v in losses.items() if k not in READOUT_SETTINGS}}
        return data


class ExportSummary(StageSummary):
    """The export stage's summary (``export.run.json``; `purecover.train.export_stage.write_selector`)."""

    checkpoint: str = Field(description="The checkpoint exported (run_dir/checkpoints/final).")
    selector: str = Field(description="The selector directory written (run_dir/selector).")
    format: Literal["adapter", "merged", "full"] = Field(description="adapter (export.merge false), merged (LoRA "
                                                                     "merged into the base) or full (a fully "
                                                                     "trained model).")
    base_model: str = Field(description="The model the selector was fine-tuned from.")
    k1: int = Field(ge=1, description="The most candidates one prompt may hold.")
    tau3: float = Field(description="Its threshold on the readout's logits.")
    tau3_logprob: float | None = Field(description="Its threshold on the identifier log-softmax; null for a "
                                                   "checkpoint without one.")
    files: list[str] = Field(description="The files of the selector directory, sorted.")
    size_bytes: NonNegativeInt = Field(description="Total size of the exported files, in bytes.")
    seconds: float = Field(ge=0, description="How long the export took.")
