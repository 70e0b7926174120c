"""`SelectorTrainingArguments`: transformers' TrainingArguments plus the student's loss and readout settings.

The settings travel with the other training arguments, as TRL's trainer configs do, so that
`SelectorTrainer` reads them from ``self.args`` and the Trainer saves them with every checkpoint
(``training_args.bin``). They are declared once, in `purecover.config.student_settings` (the recipe's
``student.lm_weight``, ...; not ``student.training``), and the fields here are made from those declarations
(`trainer_fields`: the recipe's default, its description as help, a Literal's values as choices);
`purecover.train.train_stage.build_training_arguments` copies the values from the recipe (`loss_settings`), so the
recipe and its config hash are the same as before they moved here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from transformers import TrainingArguments

from ..config.student_settings import SETTINGS, settings_of, trainer_fields

if TYPE_CHECKING:
    from ..config import StudentConfig

__all__ = ["LOSS_FIELDS", "SelectorTrainingArguments", "loss_settings"]

LOSS_FIELDS = SETTINGS  # the settings' names: fields here and keys of the recipe's `student` section


def _make() -> type[TrainingArguments]:
    cls = dataclasses.make_dataclass("SelectorTrainingArguments", trainer_fields(), bases=(TrainingArguments,))
    cls.__module__ = __name__  # where training_args.bin finds it when a checkpoint is loaded
    cls.__doc__ = ("TrainingArguments with the student's settings as fields: L = cl_weight · L_CL + lm_weight · "
                   "L_LM (+ bce_weight · L_BCE) and the readout (defaults: the recipe's; "
                   "purecover.config.student_settings).")
    return cls


SelectorTrainingArguments: Any = _make()


def loss_settings(student: StudentConfig) -> dict[str, Any]:
    """The settings (`LOSS_FIELDS`) of a recipe's `student` section, as SelectorTrainingArguments keyword
    arguments."""
    return settings_of(student)
