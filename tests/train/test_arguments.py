"""`purecover.train.arguments`: student.training checked with pydantic against TrainingArguments' own field types."""

from __future__ import annotations

import pytest

from purecover.config import ConfigError
from purecover.train.arguments import check_training_section


@pytest.mark.parametrize("training", [
    {"num_train_epochs": 2, "warmup_steps": 10},  # integers for float fields
    {"debug": "underflow_overflow"}, {"debug": ["underflow_overflow"]},  # str | list of an enum
    {"optim": "adamw_torch", "hub_strategy": "every_save", "eval_strategy": "no"},  # enums by value
    {"fsdp_config": {"min_num_params": 0}, "deepspeed": "ds.json", "lr_scheduler_kwargs": {}},
    {"include_num_input_tokens_seen": True}, {"include_num_input_tokens_seen": "all"},
    {"label_names": ["labels"]},
    {"parallelism_config": None, "log_level": "info"},
])
def test_values_of_transformers_types_pass(training):
    check_training_section(training)


@pytest.mark.parametrize(("training", "message"), [
    ({"per_device_train_batch_size": "8"}, "student.training.per_device_train_batch_size: expected an integer, got '8'"),
    ({"gradient_checkpointing": 1}, "student.training.gradient_checkpointing: expected true or false or null, got 1"),
    ({"learning_rate": True}, "student.training.learning_rate: expected a number, got True"),
    ({"label_names": "labels"}, "student.training.label_names: expected a list (each item a string) or null"),
    ({"debug": ["underflow"]}, "student.training.debug: expected a string or a list (each item one of "
                               "'underflow_overflow', 'tpu_metrics_debug')"),
    ({"log_level": "loud"}, "student.training.log_level: expected one of "),
    ({"optim": "adamw_torh"}, "did you mean 'adamw_torch'?"),
    ({"parallelism_config": {"dp_shard_size": 2}}, "student.training.parallelism_config: expected a "
                                                   "ParallelismConfig or null"),
])
def test_values_of_the_wrong_type_name_the_key(training, message):
    with pytest.raises(ConfigError) as info:
        check_training_section(training)
    assert message in str(info.value)


def test_unknown_keys_name_the_closest_field():
    with pytest.raises(ConfigError, match=r"unknown key 'student\.training\.num_train_epoch' \(not a "
                                          r"TrainingArguments field\); did you mean 'student\.training\.num_train_epochs'"):
        check_training_section({"num_train_epoch": 1})
