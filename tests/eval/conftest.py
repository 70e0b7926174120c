"""Fixtures for evaluation tests: a tiny random generator with the real Qwen2 tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.test_generation import bos_tok, fake_vllm  # noqa: F401  (the stand-in vllm module fixture)


@pytest.fixture(scope="session")
def tiny_generator_dir(tmp_path_factory, sample_dir: Path) -> Path:
    """A tiny random Qwen2 (2 layers) saved with the real Qwen2 tokenizer (skips without the samples)."""
    from purecover.demo.tiny import build_tiny_model

    tok = sample_dir / "qwen2_tokenizer"
    if not tok.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {tok}")
    return build_tiny_model(tmp_path_factory.mktemp("tiny_generator"), tok, "qwen2", seed=0)
