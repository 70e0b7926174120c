"""`SelectorTrainingArguments`: transformers' TrainingArguments plus the selector's loss settings.

The loss settings travel with the other training arguments, as TRL's trainer configs do, so that
`SelectorTrainer` reads them from ``self.args`` and the Trainer saves them with every checkpoint
(``training_args.bin``). In a recipe they stay under ``student`` (``student.lm_weight``, ...; not
``student.training``): `purecover.train.run.build_training_arguments` copies them from there
(`loss_settings`), so the recipe and its config hash are the same as before they moved here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from transformers import TrainingArguments

from ..models.readouts import PASSAGE_SCORES, READOUT_VALUES

if TYPE_CHECKING:
    from ..config import StudentConfig

__all__ = ["LOSS_FIELDS", "LossSettings", "SelectorTrainingArguments", "loss_settings"]

LOSS_FIELDS = ("lm_weight", "cl_weight", "m_exact", "lm_reduction", "reply_order", "negatives", "negative_sample",
               "negative_pool", "bce_weight", "readout", "passage_score")  # also keys of the recipe's `student` section


@dataclass
class SelectorTrainingArguments(TrainingArguments):
    """TrainingArguments with the fields of L = cl_weight · L_CL + lm_weight · L_LM (defaults: the recipe's)."""

    lm_weight: float = field(default=1.0, metadata={"help": "Weight of L_LM, the LM loss of the best ordering of "
                                                            "the teacher's subset (student.lm_weight)."})
    cl_weight: float = field(default=1.0, metadata={"help": "Weight of L_CL, the contrastive loss on the "
                                                            "first-position identifier logits; 0 trains on L_LM "
                                                            "alone (student.cl_weight)."})
    m_exact: int = field(default=5, metadata={"help": "Subsets up to this size are scored in every ordering; larger "
                                                      "ones are ordered by descending score (student.m_exact)."})
    lm_reduction: str = field(default="token_mean", metadata={
        "help": "L_LM per question: token_mean, the mean token NLL of the reply, or sequence_sum, its total NLL "
                "(student.lm_reduction).",
        "choices": ["token_mean", "sequence_sum"]})
    reply_order: str = field(default="best", metadata={
        "help": "The reply L_LM trains on: best, the label's ordering with the lowest NLL (the paper), or target, the "
                "target in its own order (the released code: by descending gain) (student.reply_order).",
        "choices": ["best", "target"]})
    negatives: str = field(default="all", metadata={
        "help": "L_CL's negatives per question: all, every unselected candidate (the paper), or sampled, "
                "negative_sample drawn from the negative_pool last (the released code's BPR) (student.negatives).",
        "choices": ["all", "sampled"]})
    negative_sample: int = field(default=5, metadata={"help": "Negatives drawn per question and step when "
                                                              "negatives is sampled (student.negative_sample)."})
    negative_pool: int = field(default=10, metadata={"help": "The sampled negatives come from this many last "
                                                             "candidates (student.negative_pool)."})
    bce_weight: float = field(default=0.0, metadata={"help": "Weight of the per-passage binary cross-entropy on the "
                                                             "scores (student.bce_weight)."})
    readout: str = field(default="identifier", metadata={
        "help": "Where each candidate's score is read: identifier (first reply position) or passage (a marker "
                "after each passage) (student.readout).", "choices": list(READOUT_VALUES)})
    passage_score: str = field(default="token", metadata={
        "help": "How the passage readout scores a marker: token (the ' yes' logit) or head (a trained linear head on "
                "the hidden state) (student.passage_score).", "choices": list(PASSAGE_SCORES)})


class LossSettings(TypedDict):
    """The `LOSS_FIELDS` as SelectorTrainingArguments keyword arguments (and ``losses`` of the student metadata)."""

    lm_weight: float
    cl_weight: float
    m_exact: int
    lm_reduction: str
    reply_order: str
    negatives: str
    negative_sample: int
    negative_pool: int
    bce_weight: float
    readout: str
    passage_score: str


def loss_settings(student: StudentConfig) -> LossSettings:
    """The `LOSS_FIELDS` of a recipe's `student` section, as SelectorTrainingArguments keyword arguments."""
    return LossSettings(lm_weight=student.lm_weight, cl_weight=student.cl_weight, m_exact=student.m_exact,
                        lm_reduction=student.lm_reduction, reply_order=student.reply_order,
                        negatives=student.negatives, negative_sample=student.negative_sample,
                        negative_pool=student.negative_pool, bce_weight=student.bce_weight,
                        readout=student.readout, passage_score=student.passage_score)
