"""A tiny randomly initialised sentence-transformers encoder for fast dense-retrieval tests and benchmarks."""

from __future__ import annotations

from pathlib import Path

from purecover.demo.tiny import build_tiny_sentence_encoder


def build_tiny_encoder(path: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a `hidden`-dim, `layers`-layer BERT encoder (MiniLM's tokenizer, mean pooling) to `path`; returns it."""
    return build_tiny_sentence_encoder(path, hidden=hidden, layers=layers, seed=seed)
