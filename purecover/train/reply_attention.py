"""The attention kernel of the best reply's training forward, and the switch between attention kernels.

What it computes. In `purecover.train.losses`, the chosen reply (a few tokens) is run with gradients after the
question's long prompt, whose keys and values come from a cache. `reply_attention` computes that attention
exactly as the model would (its own boolean mask: causal, sliding window) with plain matmuls, the query heads
of a key/value group stacked so that the prompt's keys and values are neither repeated per head nor, in the
backward, summed back per head. Same values and gradients as the model's sdpa or eager attention.

Why it exists. With grouped-query attention, eager attention, and sdpa whenever a mask is passed (as it is
here), repeat the whole prompt's keys/values for every query head of a group in every layer (and the
backward sums the copies back), for a query of only a few tokens. `reply_attention_for` installs the kernel
for the enclosed forward only, and only where it gives the model's own result (`reply_attention_applies`:
sdpa or eager, no soft-capping, no attention sinks).

The transformers internals it relies on (``transformers>=5.0,<6`` in pyproject.toml; tested with 5.24.0):

- ``AttentionInterface._global_mapping`` (private): the registry of named attention functions, read to
  register `REPLY_ATTENTION` once per process (``AttentionInterface.register`` and
  ``transformers.masking_utils.AttentionMaskInterface.register`` do the registering);
- ``PretrainedConfig._attn_implementation_internal`` (private): set on every config of the model by
  `attention_implementation` to select a kernel for a forward and restored afterwards (also used by
  `purecover.train.prefix_tree` for its own scoring kernel);
- ``transformers.masking_utils.sdpa_mask`` and its ``allow_is_causal_skip`` argument, for the mask;
- the attention-function call convention: ``(module, query (b, h, n, d), key, value, attention_mask,
  scaling=, dropout=, **kwargs)`` returning ``(output (b, n, h, d), weights)``, and the ``sinks`` attribute
  of attention modules and ``attn_logit_softcapping`` of configs that mark the cases it does not cover.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["REPLY_ATTENTION", "attention_implementation", "reply_attention", "reply_attention_applies",
           "reply_attention_for"]

REPLY_ATTENTION = "purecover_reply"


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """Switch every config of `model` (and its submodules, e.g. under PEFT) to the attention implementation
    `name` for the duration (restored on exit, also on error); yields nothing."""
    from transformers import PretrainedConfig

    configs: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig) and hasattr(config, "_attn_implementation_internal"):
            configs.setdefault(id(config), config)
    saved = {key: config._attn_implementation_internal for key, config in configs.items()}
    try:
        for config in configs.values():
            config._attn_implementation_internal = name
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation_internal = saved[key]


def _reply_mask(*args: Any, **kwargs: Any) -> Any:
    """The sdpa boolean mask (True: visible), always materialised (never None for `is_causal`)."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def reply_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    """AttentionInterface function for a few query tokens after a long cached prompt (the best reply's training
    forward): plain matmul attention under the model's boolean mask (causal, sliding window, as the model
    builds it), the query heads of a key/value group stacked so that the prompt's keys and values are neither
    repeated per head nor, in the backward, summed back; attention dropout as in eager attention."""
    b, h, n, d = query.shape
    kv, length = key.shape[1], key.shape[2]
    g = h // kv
    scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(d)
    scores = torch.matmul(query.reshape(b, kv, g * n, d), key.transpose(-1, -2)).mul_(scale).view(b, kv, g, n, length)
    if attention_mask is None:  # bottom-right causal: the queries are the last n positions
        visible = torch.arange(length, device=query.device)[None, :] <= torch.arange(length - n, length,
                                                                                   device=query.device)[:, None]
    else:
        visible = attention_mask[:, :, None, -n:, -length:]  # (b or 1, 1, 1, n, length), bool
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = scores.float().softmax(-1).to(query.dtype)
    if dropout:
        probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs.view(b, kv, g * n, length), value).view(b, h, n, d)
    return out.transpose(1, 2).contiguous(), None


def reply_attention_applies(model: Any) -> bool:
    """Whether `reply_attention` computes the model's attention: its attention goes through the interface
    with the standard masks (sdpa or eager), without soft-capping or attention sinks."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return False
    return not any(getattr(m, "sinks", None) is not None for m in model.modules())


@contextlib.contextmanager
def reply_attention_for(model: Any, applies: bool | None = None) -> Iterator[bool]:
    """Run the enclosed forward(s) of `model` with `reply_attention` where it applies (`applies`: the result of
    `reply_attention_applies(model)`, if known); yields whether it does."""
    if not (reply_attention_applies(model) if applies is None else applies):
        yield False
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if REPLY_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(REPLY_ATTENTION, reply_attention)
        AttentionMaskInterface.register(REPLY_ATTENTION, _reply_mask)
    with attention_implementation(model, REPLY_ATTENTION):
        yield True
