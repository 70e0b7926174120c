"""Fixtures for teacher tests: the real Qwen2 tokenizer and tiny random models built from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from tests.run_dirs import new_run_dir


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


GEMMA3_LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
GEMMA3_WINDOW = 16


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    """A tiny random Gemma3 text model with sliding-window layers and the real Qwen2 tokenizer: 4 layers
    (`GEMMA3_LAYER_TYPES`: sliding, sliding, full, sliding), a window of `GEMMA3_WINDOW` tokens."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    vocab = max(len(tok), max(tok.all_special_ids, default=0) + 1)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                              sliding_window=GEMMA3_WINDOW, layer_types=list(GEMMA3_LAYER_TYPES),
                              max_position_embeddings=8192, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny_gemma3")
    Gemma3ForCausalLM(config).eval().save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


# ---- the demo set's candidates, and recipes over them (the label-stage tests of test_job.py and test_layers.py)


def make_recipe(run_dir, teacher_dir, *extra):
    return load_recipe(None, [f"run_dir={run_dir}", "data.path=demo", "data.k1=5", "data.limit=6",
                              f"teacher.model={teacher_dir}", "teacher.max_new_tokens=12", "teacher.batch_size=4",
                              "teacher.dtype=float32", "teacher.device=cpu", *extra])


@pytest.fixture(scope="module")
def demo_candidates(tmp_path_factory, tiny_teacher_dir):
    base = tmp_path_factory.mktemp("demo_run")
    run_data_stage(make_recipe(base, tiny_teacher_dir), show_progress=False)
    return base


def fresh_run(tmp_path, demo_candidates):
    run = tmp_path / "run"
    new_run_dir(run)
    shutil.copy(demo_candidates / "candidates.jsonl", run / "candidates.jsonl")
    return run


@pytest.fixture
def generation_prompts(monkeypatch) -> list[str]:
    """Every prompt the teacher's hf generator is given (the real generation still runs)."""
    from purecover.models import generation

    seen: list[str] = []
    original = generation.HFGenerator.generate_detailed

    def spy(self, prompts, max_new_tokens, stop_when=None):
        seen.extend(prompts)
        return original(self, prompts, max_new_tokens, stop_when)

    monkeypatch.setattr(generation.HFGenerator, "generate_detailed", spy)
    return seen
