"""Fixtures for teacher tests: the real Qwen2 tokenizer and tiny random models built from it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def qwen_tokenizer_dir(sample_dir: Path) -> Path:
    path = sample_dir / "qwen2_tokenizer"
    if not path.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {path}")
    return path


@pytest.fixture(scope="session")
def tiny_teacher_dir(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    """A tiny random Qwen2 (2 layers, 4 heads, 2 kv heads) with the real Qwen2 tokenizer."""
    from purecover.demo.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"), qwen_tokenizer_dir, "qwen2", seed=0)
