"""The RAG answer generator of the evaluate stage: its tokenizer, a lazy loader for its backend (HF or vLLM),
and the identity that keys the generation cache."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..config import Recipe

__all__ = ["generator_id", "generator_loader", "load_generator_tokenizer"]


def load_generator_tokenizer(recipe: Recipe) -> Any:
    """The tokenizer of ``eval.generator``."""
    from ..models.loading import load_tokenizer

    return load_tokenizer(recipe.eval.generator, trust_remote_code=recipe.eval.trust_remote_code)


def generator_loader(recipe: Recipe, tokenizer: Any, show_progress: bool) -> Any:
    """A function that loads ``eval.generator`` on ``eval.backend`` (called only when a prompt is not cached)."""
    cfg = recipe.eval

    def load() -> Any:
        from ..models.generation import make_generator

        if cfg.backend == "vllm":
            return make_generator("vllm", model_name=cfg.generator, tensor_parallel_size=cfg.tensor_parallel_size,
                                  dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code, seed=recipe.seed)
        from ..models.loading import load_causal_lm

        model = load_causal_lm(cfg.generator, dtype=cfg.dtype, device=cfg.device,
                               trust_remote_code=cfg.trust_remote_code)
        return make_generator("hf", model=model, tokenizer=tokenizer, batch_size=cfg.batch_size)

    return load


def generator_id(recipe: Recipe) -> str:
    """What identifies the generator in cache keys: its name, plus a fingerprint of local weights."""
    name = recipe.eval.generator
    local = Path(name)
    if local.is_dir():
        h = hashlib.sha256()
        for p in sorted(local.glob("*.safetensors")) + sorted(local.glob("config.json")):
            h.update(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())
        return f"{local.resolve()}#{h.hexdigest()[:12]}"
    return name
