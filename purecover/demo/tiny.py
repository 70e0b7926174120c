"""Tiny randomly initialised causal LMs with a real tokenizer, for CPU demos, tests and benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["ARCHITECTURES", "build_tiny_model", "tiny_causal_lm"]

ARCHITECTURES = ("qwen2", "llama", "mistral")


def tiny_causal_lm(arch: str, vocab_size: int, *, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                   num_kv_heads: int = 2, intermediate_size: int = 128, max_position_embeddings: int = 8192,
                   seed: int = 0, **config_kwargs: Any) -> Any:
    """A randomly initialised `arch` (qwen2 | llama | mistral) causal LM in eval mode, in memory."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    classes = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM),
               "mistral": (MistralConfig, MistralForCausalLM)}
    if arch not in classes:
        raise ValueError(f"unknown tiny architecture {arch!r}; expected {', '.join(ARCHITECTURES)}")
    config_cls, model_cls = classes[arch]
    config = config_cls(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
                        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                        max_position_embeddings=max_position_embeddings, **config_kwargs)
    torch.manual_seed(seed)
    return model_cls(config).eval()


def build_tiny_model(out_dir: str | Path, tokenizer_dir: str | Path, arch: str = "qwen2", *, hidden_size: int = 64,
                     num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128,
                     max_position_embeddings: int = 8192, seed: int = 0, **config_kwargs: Any) -> Path:
    """Save a tiny `arch` model + the tokenizer of `tokenizer_dir` to `out_dir`; returns `out_dir`.

    The vocabulary covers every id of the tokenizer (special tokens included), weights are
    safetensors, and the result loads with `AutoModelForCausalLM.from_pretrained(out_dir)`.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = max(len(tokenizer), max(tokenizer.all_special_ids, default=0) + 1)
    model = tiny_causal_lm(arch, vocab, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                           num_kv_heads=num_kv_heads, intermediate_size=intermediate_size,
                           max_position_embeddings=max_position_embeddings, seed=seed, tie_word_embeddings=True,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id, **config_kwargs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
