"""The teacher's models, loaded from the recipe's teacher section (shared by the calibrate and label stages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import TeacherConfig

__all__ = ["TeacherResources", "load_embedder", "load_teacher_model", "load_teacher_tokenizer", "teacher_generator"]


def load_teacher_tokenizer(cfg: TeacherConfig) -> Any:
    """The tokenizer of ``teacher.model``."""
    from ..models.loading import load_tokenizer

    return load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code)


def load_teacher_model(cfg: TeacherConfig) -> Any:
    """``teacher.model`` as a causal LM (dtype, device and device map of the teacher section)."""
    from ..models.loading import load_causal_lm

    return load_causal_lm(cfg.model, dtype=cfg.dtype, device=cfg.device, device_map=cfg.device_map,
                          trust_remote_code=cfg.trust_remote_code)


def teacher_generator(cfg: TeacherConfig, seed: int, tokenizer: Any, model: Callable[[], Any]) -> Any:
    """The generation backend of ``teacher.backend``: hf over the loaded model (`model()` is called only then), or
    vLLM over ``teacher.model``."""
    from ..models.generation import make_generator

    if cfg.backend == "hf":
        return make_generator("hf", model=model(), tokenizer=tokenizer, batch_size=cfg.batch_size)
    return make_generator("vllm", model_name=cfg.model, tensor_parallel_size=cfg.tensor_parallel_size,
                          dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code, seed=seed, tokenizer=tokenizer)


def load_embedder(cfg: TeacherConfig) -> Any:
    """The sentence encoder of ``teacher.embedding_model`` (the embedding estimator)."""
    from ..data.retrieval.dense import load_sentence_transformer

    return load_sentence_transformer(cfg.embedding_model)


@dataclass
class TeacherResources:
    """The models one labelling process has loaded so far (each loaded on first use)."""

    cfg: TeacherConfig
    _tokenizer: Any = None
    _model: Any = None
    _embedder: Any = None

    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_teacher_tokenizer(self.cfg)
        return self._tokenizer

    def model(self) -> Any:
        if self._model is None:
            self._model = load_teacher_model(self.cfg)
        return self._model

    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = load_embedder(self.cfg)
        return self._embedder
