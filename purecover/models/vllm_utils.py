"""Helpers for the optional vLLM backends (imported only when vLLM is chosen).

Capabilities are read from the installed vLLM's classes, not from its version string: the values of
`logprobs_mode` (`supported_logprobs_modes`) and whether `SamplingParams` has the ``logprob_token_ids``
field of label reads (`supports_label_reads`, `label_read_limit`).
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import inspect
import logging
import typing
from typing import Any

import torch

log = logging.getLogger(__name__)

__all__ = ["LABEL_READ_FIELD", "label_read_limit", "release_vllm_memory", "sampling_params_fields",
           "supported_logprobs_modes", "supports_label_reads", "vllm_version"]

# The SamplingParams field of label reads: logprobs of exactly these token ids at each generated position,
# whatever their rank (vLLM PR #34539, "Generative Scoring").
LABEL_READ_FIELD = "logprob_token_ids"


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


def vllm_version(vllm: Any) -> str:
    """The installed vLLM's version string ("unknown" when the module has none)."""
    return str(getattr(vllm, "__version__", "unknown"))


def _mode_values(obj: Any) -> tuple[str, ...] | None:
    """Values of `LogprobsMode`: an Enum (vLLM 0.10.x) or a Literal alias (later versions)."""
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return tuple(str(m.value) for m in obj)
    args = typing.get_args(obj)
    return tuple(str(a) for a in args) if args and all(isinstance(a, str) for a in args) else None


def supported_logprobs_modes(vllm: Any) -> tuple[str, ...] | None:
    """The ``logprobs_mode`` values this vLLM accepts.

    ``vllm.config.LogprobsMode``'s values when it exists; None (unknown: try them) when only a
    ``logprobs_mode`` argument of ``EngineArgs`` / ``LLM`` is found; ``()`` when the engine has no
    ``logprobs_mode`` at all (older vLLM: its default raw log-probabilities only).
    """
    config = getattr(vllm, "config", None)
    if config is None:
        try:
            import vllm.config as config  # type: ignore[no-redef]
        except Exception:  # not importable here (or no such module in this version)
            config = None
    mode_type = getattr(config, "LogprobsMode", None)
    if mode_type is not None:
        values = _mode_values(mode_type)
        if values is not None:
            return values
    engine_args = getattr(vllm, "EngineArgs", None)
    if engine_args is not None and dataclasses.is_dataclass(engine_args):
        if any(f.name == "logprobs_mode" for f in dataclasses.fields(engine_args)):
            return None
        return ()
    llm = getattr(vllm, "LLM", None)
    try:
        params = inspect.signature(llm).parameters if llm is not None else {}
    except (TypeError, ValueError):
        return None
    if "logprobs_mode" in params:
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None  # forwarded to EngineArgs: unknown, try
    return ()


def sampling_params_fields(params_type: Any) -> frozenset[str]:
    """The named fields of a `SamplingParams` class: msgspec struct fields (vLLM's own), dataclass fields,
    class annotations along the MRO, and named constructor parameters. A bare ``**kwargs`` names nothing."""
    if params_type is None:
        return frozenset()
    names: set[str] = set(getattr(params_type, "__struct_fields__", ()) or ())
    if dataclasses.is_dataclass(params_type):
        names.update(f.name for f in dataclasses.fields(params_type))
    for klass in getattr(params_type, "__mro__", (params_type,)):
        names.update(getattr(klass, "__annotations__", {}) or {})
    try:
        params = inspect.signature(params_type).parameters.values()
    except (TypeError, ValueError):
        params = ()  # type: ignore[assignment]
    names.update(p.name for p in params if p.kind not in (inspect.Parameter.VAR_KEYWORD,
                                                            inspect.Parameter.VAR_POSITIONAL))
    return frozenset(n for n in names if isinstance(n, str))


def supports_label_reads(vllm: Any) -> bool:
    """True when the installed ``vllm.SamplingParams`` has the ``logprob_token_ids`` field (`LABEL_READ_FIELD`)."""
    return LABEL_READ_FIELD in sampling_params_fields(getattr(vllm, "SamplingParams", None))


def label_read_limit(vllm: Any) -> int | None:
    """The most token ids one label read may ask for (``vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS``, 128 where
    it exists); None when this vLLM declares no limit."""
    module = getattr(vllm, "sampling_params", None)
    if module is None:
        try:
            import vllm.sampling_params as module  # type: ignore[no-redef]
        except Exception:  # not importable here (a stand-in module, or no such module in this version)
            return None
    limit = getattr(module, "MAX_LOGPROB_TOKEN_IDS", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
