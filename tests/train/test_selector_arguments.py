"""`SelectorTrainingArguments`: the loss settings as TrainingArguments fields, filled from the recipe's `student`."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import TrainingArguments

from purecover.config import load_recipe
from purecover.train.selector_arguments import LOSS_FIELDS, SelectorTrainingArguments
from purecover.train.train_stage import build_training_arguments
from purecover.train.trainer import SelectorTrainer

LOSS_OVERRIDES = ["student.lm_weight=0.25", "student.cl_weight=2.0", "student.m_exact=3",
                  "student.lm_reduction=sequence_sum", "student.reply_order=target", "student.negatives=sampled",
                  "student.negative_sample=3", "student.negative_pool=7", "student.bce_weight=0.5",
                  "student.readout=passage", "student.passage_score=head"]
LOSS_VALUES = {"lm_weight": 0.25, "cl_weight": 2.0, "m_exact": 3, "lm_reduction": "sequence_sum",
               "reply_order": "target", "negatives": "sampled", "negative_sample": 3, "negative_pool": 7,
               "bce_weight": 0.5, "readout": "passage", "passage_score": "head"}


def test_fields_default_to_the_recipe_defaults_and_say_what_they_are():
    fields = {f.name: f for f in dataclasses.fields(SelectorTrainingArguments)}
    student = load_recipe(None, []).student
    for name in LOSS_FIELDS:
        assert fields[name].default == getattr(student, name)
        assert fields[name].metadata["help"]
    assert fields["lm_reduction"].metadata["choices"] == ["token_mean", "sequence_sum"]
    assert fields["reply_order"].metadata["choices"] == ["best", "target"]
    assert fields["negatives"].metadata["choices"] == ["all", "sampled"]
    assert fields["readout"].metadata["choices"] == ["identifier", "passage"]
    assert fields["passage_score"].metadata["choices"] == ["token", "head"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_build_training_arguments_fills_them_from_the_student_section(tmp_path, dry_run):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", *LOSS_OVERRIDES])
    args = build_training_arguments(recipe, has_eval=False, dry_run=dry_run)
    assert isinstance(args, SelectorTrainingArguments)
    assert {name: getattr(args, name) for name in LOSS_FIELDS} == LOSS_VALUES
    assert {name: args.to_dict()[name] for name in LOSS_FIELDS} == LOSS_VALUES


def test_they_survive_training_args_bin(tmp_path):
    """The Trainer saves its args with torch.save into every checkpoint (training_args.bin)."""
    args = build_training_arguments(load_recipe(None, [f"run_dir={tmp_path}", *LOSS_OVERRIDES]), has_eval=False)
    torch.save(args, tmp_path / "training_args.bin")
    loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert type(loaded) is SelectorTrainingArguments
    assert {name: getattr(loaded, name) for name in LOSS_FIELDS} == LOSS_VALUES


def test_the_trainer_refuses_arguments_without_loss_settings(tmp_path):
    with pytest.raises(TypeError, match="SelectorTrainingArguments"):
        SelectorTrainer(model=None, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True), reply_format=None)
