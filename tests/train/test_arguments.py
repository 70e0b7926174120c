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


@pytest.mark.parametrize(("training", "message"), [
    ({"learning_rate": -5e-4}, "student.training.learning_rate: expected a number > 0, got -0.0005"),
    ({"learning_rate": float("nan")}, "student.training.learning_rate: expected a finite number, got nan"),
    ({"learning_rate": float("inf")}, "student.training.learning_rate: expected a finite number, got inf"),
    ({"weight_decay": -0.1}, "student.training.weight_decay: expected a number ≥ 0, got -0.1"),
    ({"adam_beta2": 1.0}, "student.training.adam_beta2: expected a number ≥ 0 and < 1, got 1.0"),
    ({"num_train_epochs": 0}, "student.training.num_train_epochs: expected a number > 0, got 0"),
])
def test_numbers_out_of_range_are_refused_before_any_work(training, message):
    """TrainingArguments accepts these and training fails (or diverges) only after the expensive stages."""
    with pytest.raises(ConfigError) as err:
        check_training_section(training)
    assert str(err.value) == message


def test_the_field_snapshot_is_what_the_installed_transformers_declares():
    """`purecover config` reads the fields from the snapshot (no torch); it must equal transformers' own. After a
    transformers upgrade: python -m purecover.train.arguments"""
    import json

    from purecover.train.arguments import SNAPSHOT, snapshot_record

    assert json.loads(SNAPSHOT.read_text(encoding="utf-8")) == snapshot_record()


def test_another_transformers_version_reads_the_live_fields(monkeypatch):
    from purecover.train import arguments

    arguments._training_fields.cache_clear()
    try:
        monkeypatch.setattr(arguments, "_transformers_version", lambda: "0.0-other")
        live = []
        real = arguments._live_fields
        monkeypatch.setattr(arguments, "_live_fields", lambda: live.append(1) or real())
        check_training_section({"learning_rate": 1e-4})
        assert live == [1]
    finally:
        arguments._training_fields.cache_clear()


def test_purecover_config_imports_no_torch(tmp_path):
    """`purecover config` checks every student.training key, type and range without transformers' trainer or
    torch (seconds of imports), and still refuses a bad value."""
    import subprocess
    import sys
    from pathlib import Path

    recipe = Path(__file__).resolve().parents[2] / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "purecover", "config", str(recipe)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "purecover.config" in imported and "run_dir:" in proc.stdout
    assert not {"torch", "transformers", "peft", "deepspeed"} & imported
    bad = subprocess.run([sys.executable, "-m", "purecover", "config", str(recipe), "--set",
                          "student.training.learning_rate=-5e-4"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "student.training.learning_rate: expected a number > 0" in bad.stderr
