"""`purecover.utils.cpu_features`: native bfloat16 read from /proc/cpuinfo, and the warning the bfloat16 settings
give on a CPU without it (the model loader and the trainer's arguments)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from purecover.utils import cpu_features
from purecover.utils.cpu_features import cpu_bf16_native, warn_unless_cpu_bf16

ZEN4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512vbmi\n\n"
        "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n")
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n"
OLD = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"  # avx512bw is not bfloat16


def _info(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "native"), [(ZEN4, True), (SAPPHIRE, True), (OLD, False),
                                              ("processor\t: 0\nmodel name\t: ARMv8\n", None)])
def test_native_bf16_is_read_from_the_flags_line(tmp_path, text, native):
    assert cpu_bf16_native(_info(tmp_path, text)) is native


def test_no_cpuinfo_is_unknown_and_says_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert warn_unless_cpu_bf16("eval.dtype: bfloat16", tmp_path / "absent") is None
    assert not caplog.records


def test_a_cpu_without_it_is_warned_naming_the_setting(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert warn_unless_cpu_bf16("eval.dtype: bfloat16", _info(tmp_path, OLD)) is False
        assert warn_unless_cpu_bf16("eval.dtype: bfloat16", _info(tmp_path, ZEN4)) is True
    [record] = caplog.records
    assert "eval.dtype: bfloat16" in record.getMessage() and "avx512_bf16" in record.getMessage()


def test_the_trainer_arguments_warn_for_bf16_autocast_on_such_a_cpu(tmp_path, monkeypatch, caplog):
    from purecover.config import load_recipe
    from purecover.train.train_stage import build_training_arguments

    monkeypatch.setattr(cpu_features, "CPUINFO", _info(tmp_path, OLD))
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", "student.training.bf16=true"])
    with caplog.at_level(logging.WARNING):
        args = build_training_arguments(recipe, has_eval=False)
    assert args.bf16
    assert any("student.training.bf16: true" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_training_arguments(load_recipe(None, [f"run_dir={tmp_path / 'run2'}"]), has_eval=False)
    assert not any("bfloat16" in r.getMessage() for r in caplog.records)


def test_loading_a_model_in_bf16_on_such_a_cpu_warns(tmp_path, monkeypatch, caplog, sample_dir):
    import torch

    from purecover.demo.tiny import build_tiny_model
    from purecover.models.loading import load_causal_lm

    tok = sample_dir / "qwen2_tokenizer"
    if not tok.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {tok}")
    tiny = build_tiny_model(tmp_path / "tiny", tok, "qwen2", seed=0)
    monkeypatch.setattr(cpu_features, "CPUINFO", _info(tmp_path, OLD))
    with caplog.at_level(logging.WARNING):
        model = load_causal_lm(str(tiny), dtype="bfloat16", device="cpu")
        load_causal_lm(str(tiny), dtype="float32", device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert [r.getMessage().split(" on a CPU")[0] for r in caplog.records if "emulated" in r.getMessage()] == \
        [f"loading {tiny} in bfloat16"]
