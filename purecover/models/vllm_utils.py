"""Helpers for the optional vLLM backends (imported only when vLLM is chosen)."""

from __future__ import annotations

import gc
import logging

import torch

log = logging.getLogger(__name__)

__all__ = ["release_vllm_memory"]


def release_vllm_memory() -> None:
    """Tear down vLLM's parallel state and free cached GPU memory (after the engine object is dropped)."""
    try:
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()
    except Exception:  # best effort across vLLM versions
        log.debug("vLLM parallel state teardown skipped", exc_info=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
