"""The student's training settings, each declared once: type, range, default and description.

These are the recipe's keys under ``student`` that the trainer reads (the loss weights and forms, the negatives,
the readout). `StudentConfig` (the recipe section) inherits them; `purecover.train.selector_arguments` makes
the training arguments' fields from them (`trainer_fields`: the same defaults, the description as help, the
choices of a `Literal`); the student metadata records them (`purecover.records.student`: the loss settings
under ``losses``, `READOUT_SETTINGS` beside them), and the export copies the readout into
selector_config.json. Nothing else declares them.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any, Literal

from pydantic import Field, StrictFloat, StrictInt, model_validator
from pydantic.dataclasses import dataclass

from ..models.readouts import PASSAGE_SCORES, READOUT_VALUES, pair_problem
from .base import _SECTION, _SectionError

__all__ = ["LOSS_SETTINGS", "READOUT_SETTINGS", "SETTINGS", "StudentSettings", "record_fields", "settings_of",
           "trainer_fields"]


@dataclass(config=_SECTION)
class StudentSettings:
    """The settings of the student's loss and readout (recipe keys ``student.<name>``)."""

    lm_weight: StrictFloat = Field(1.0, ge=0, description="Weight of L_LM in L = cl_weight · L_CL + lm_weight · L_LM.")
    m_exact: StrictInt = Field(
        5, ge=1, description="L_LM takes the minimum over every ordering of the label up to this size; larger labels "
        "are ordered by descending score.")
    lm_reduction: Literal["token_mean", "sequence_sum"] = Field(
        "token_mean", description="L_LM per question: token_mean, the mean token NLL of the reply (its weight "
        "against L_CL does not grow with |S|), or sequence_sum, the reply's total NLL −log p(reply), the paper's "
        "formula.")
    cl_weight: StrictFloat = Field(
        1.0, ge=0, description="Weight of L_CL, the contrastive loss on the readout's scores (0: the L_LM-only "
        "ablation).")
    reply_order: Literal["best", "target"] = Field(
        "best", description="The reply L_LM trains on: best, the ordering of the label with the lowest NLL (the "
        "paper's permutation-invariant loss), or target, the target in its own order (top_k: by descending gain; "
        "the authors' released code).")
    negatives: Literal["all", "sampled"] = Field(
        "all", description="L_CL's negatives per question: all, every candidate outside the target (the paper), or "
        "sampled, negative_sample drawn afresh each step from the negative_pool last candidates (the target "
        "first, the rest in retrieval order; the released code's BPR).")
    negative_sample: StrictInt = Field(5, ge=1, description="Negatives drawn per question and step when "
                                       "negatives is sampled (the released code: 5).")
    negative_pool: StrictInt = Field(10, ge=1, description="How many last candidates the sampled negatives come "
                                     "from (the released code: the bottom 10).")
    readout: Literal[READOUT_VALUES] = Field(  # type: ignore[valid-type]  # the registry's values
        "identifier", description="Where the selector reads each candidate's score: identifier, the logit of its "
        "identifier at the first reply position (the paper; needs a model that binds content to letters, ~7B); "
        "passage, the logit of ' yes' at a marker after each passage, in the same one-pass prompt (our extension, "
        "for small students: docs/guides/student.md#readouts). The vLLM selector backend reads identifier only.")
    passage_score: Literal[PASSAGE_SCORES] = Field(  # type: ignore[valid-type]
        "token", description="How the passage readout scores a passage at its marker: token, the logit of ' yes'; "
        "head, a linear head on the hidden state there, started as that token's row of the output projection and "
        "trained with the adapter (score_head.safetensors beside it). Needs readout: passage.")
    bce_weight: StrictFloat = Field(
        0.0, ge=0, description="Weight of a per-passage binary cross-entropy on the same scores (selected: 1, "
        "others: 0), added to L; it puts the scores on an absolute scale. 0: off (the paper).")

    @model_validator(mode="after")
    def _check_settings(self) -> StudentSettings:
        if self.cl_weight == 0 and self.lm_weight == 0 and self.bce_weight == 0:
            raise _SectionError("cl_weight", "cl_weight, lm_weight and bce_weight cannot all be 0")
        problem = pair_problem(self.readout, self.passage_score)  # a pair no registered readout has
        if problem:
            raise _SectionError("passage_score", problem)
        return self


SETTINGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StudentSettings))
READOUT_SETTINGS: tuple[str, ...] = ("readout", "passage_score")  # which readout (purecover.models.readouts)
LOSS_SETTINGS: tuple[str, ...] = tuple(n for n in SETTINGS if n not in READOUT_SETTINGS)


def settings_of(student: Any, names: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    """The values of `names` (default: every setting) in `student` (a `StudentConfig`, or anything with them as
    attributes), by name, in declaration order."""
    return {name: getattr(student, name) for name in names}


def record_fields(names: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """The settings `names` as pydantic model fields for ``create_model``: ``name -> (type, FieldInfo)``, with the
    declared type, range, default and description (a file without one reads as its default)."""
    hints = typing.get_type_hints(StudentSettings)
    fields = {f.name: f for f in dataclasses.fields(StudentSettings)}
    return {name: (hints[name], copy.copy(fields[name].default)) for name in names}


def trainer_fields() -> list[tuple[str, type, dataclasses.Field]]:
    """Each setting as a training-arguments dataclass field ``(name, type, field)``: the recipe's default, its
    description as ``help`` (with the recipe key), and the values of a ``Literal`` as ``choices``."""
    hints = typing.get_type_hints(StudentSettings)
    out = []
    for f in dataclasses.fields(StudentSettings):
        info = f.default  # pydantic keeps the FieldInfo as the dataclass default
        default = info.default
        meta: dict[str, Any] = {"help": f"{info.description} (student.{f.name})"}
        if typing.get_origin(hints[f.name]) is Literal:
            meta["choices"] = list(typing.get_args(hints[f.name]))
        out.append((f.name, type(default), dataclasses.field(default=default, metadata=meta)))
    return out
