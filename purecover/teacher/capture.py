"""Segment attention from one forward pass, without materialising full attention matrices.

docs/concepts/method.md#segment-attention For each sequence we need Attn(X, Y) = (1/|X||Y|) Σ_{i∈X} Σ_{j∈Y} Ā_ij for a few row
segments X (reasoning steps, the answer) and column segments Y (documents, steps), where Ā is
the softmax attention averaged over the chosen layers and all query heads.

How: a custom attention function is registered with transformers' `AttentionInterface`. It
runs the normal sdpa kernel for the forward pass and, for the chosen layers, also takes the
model's own RoPE-applied queries and keys (exactly what the attention kernel receives, so any
architecture that goes through the interface works: Qwen2, Llama, Mistral, ...), computes the
attention of the needed rows only, in row chunks, reduced at once to segment sums. Per layer
the extra memory is bounded by one row chunk;
what is kept across layers is the (rows × columns) segment matrix per sequence. The row
probabilities are never materialised: `scaled_dot_product_attention` of the needed rows with
the column-indicator matrix as values yields their segment sums directly.

Entry points: `capture_segment_attention` (the capture), `capture_token_lists` (the same over unpadded token lists,
left-padded into one batch) and `reference_segment_attention` (the same quantity from eager ``output_attentions``,
for tests and benchmarks).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .layers import resolve_layers

__all__ = [
    "CAPTURE_IMPLEMENTATION",
    "SegmentSpec",
    "capture_segment_attention",
    "capture_token_lists",
    "decoder_layers",
    "reference_segment_attention",
]

CAPTURE_IMPLEMENTATION = "purecover_capture"
_ACTIVE: contextvars.ContextVar[_Collector | None] = contextvars.ContextVar("purecover_capture", default=None)


@dataclass(frozen=True)
class SegmentSpec:
    """Token spans of one sequence (positions in its unpadded token list, ``[start, end)``).

    `rows`: the query segments (e.g. steps 1..N then the answer); `cols`: the key segments
    (e.g. documents 1..K1 then steps 1..N). An empty span yields NaN in its row/column.
    """

    rows: tuple[tuple[int, int], ...]
    cols: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, rows: Sequence[tuple[int, int]], cols: Sequence[tuple[int, int]]) -> SegmentSpec:
        return cls(tuple((int(a), int(b)) for a, b in rows), tuple((int(a), int(b)) for a, b in cols))


class _StopForward(Exception):
    """Raised after the last needed layer so the remaining layers are not computed."""


class _Collector:
    """Per-batch state: which rows/columns to reduce, and the running segment sums."""

    def __init__(self, specs: Sequence[SegmentSpec], offsets: list[int], seq_len: int, layers: Sequence[int],
                 device: torch.device, max_chunk_bytes: int) -> None:
        self.layers = set(layers)
        self.slot = {layer: i for i, layer in enumerate(layers)}  # layer index -> its slot in `sums`
        self.max_chunk_bytes = max_chunk_bytes
        self.seen_layers: set[int] = set()
        b = len(specs)
        n_rows = max(len(s.rows) for s in specs)
        n_cols = max(len(s.cols) for s in specs)
        positions: list[list[int]] = []
        for spec, off in zip(specs, offsets):
            positions.append([off + t for a, e in spec.rows for t in range(a, e)])
        r_max = max(1, max(len(p) for p in positions))
        self.rows = torch.zeros(b, r_max, dtype=torch.long, device=device)  # (B, R) token positions
        self.row_valid = torch.zeros(b, r_max, dtype=torch.bool, device=device)
        self.row_assign = torch.zeros(b, n_rows, r_max, dtype=torch.float32, device=device)  # (B, Sr, R)
        self.col_assign = torch.zeros(b, seq_len, n_cols, dtype=torch.float32, device=device)  # (B, T, Sc)
        for i, (spec, off) in enumerate(zip(specs, offsets)):
            r = 0
            for s, (a, e) in enumerate(spec.rows):
                n = e - a
                if n > 0:
                    self.rows[i, r : r + n] = torch.arange(off + a, off + e, device=device)
                    self.row_valid[i, r : r + n] = True
                    self.row_assign[i, s, r : r + n] = 1.0
                r += max(n, 0)
            for c, (a, e) in enumerate(spec.cols):
                if e > a:
                    self.col_assign[i, off + a : off + e, c] = 1.0
        # (B, L, Sr, Sc): per chosen layer, Σ over heads and the segments' token pairs
        self.sums = torch.zeros(b, len(layers), n_rows, n_cols, dtype=torch.float64, device=device)

    def observe(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                attention_mask: torch.Tensor | None, scaling: float, softcap: float | None) -> None:
        """Add this layer's head-summed segment sums. query (B, H, T, D), key (B, Hkv, T, D).

        The segment sums of a row are its attention output when the values are the column
        indicator matrix (T × Sc): softmax(q Kᵀ) @ 1_seg. So the needed rows go through
        `scaled_dot_product_attention` with those values and no (rows × T) probability matrix is
        formed. With a logit soft-cap (not expressible in sdpa) the probabilities are formed
        explicitly, one row chunk at a time.
        """
        self.seen_layers.add(module.layer_idx)
        bsz, n_heads, t_len, head_dim = query.shape
        n_kv = key.shape[1]
        groups = n_heads // n_kv
        r_total = self.rows.shape[1]
        per_row = bsz * n_heads * t_len * 4 * 3  # scores, probabilities and a temporary, float32
        chunk = max(1, min(r_total, self.max_chunk_bytes // max(per_row, 1)))
        kv_pos = torch.arange(t_len, device=query.device)
        keys = key.float()
        # Value blocks as wide as the head dimension: sdpa's fused kernels need equal q/k/v widths.
        n_seg = self.col_assign.shape[-1]
        n_blocks = -(-n_seg // head_dim)
        padded = torch.nn.functional.pad(self.col_assign, (0, n_blocks * head_dim - n_seg))
        value_blocks = [padded[:, None, :, b * head_dim : (b + 1) * head_dim].expand(bsz, n_kv, t_len, head_dim)
                        for b in range(n_blocks)]  # each (B, Hkv, T, D)
        for start in range(0, r_total, chunk):
            idx = self.rows[:, start : start + chunk]  # (B, Rc)
            rc = idx.shape[1]
            q_rows = torch.gather(query, 2, idx[:, None, :, None].expand(bsz, n_heads, rc, head_dim)).float()
            if attention_mask is None:  # pure causal (the mask builder skipped it)
                allowed = kv_pos[None, None, None, :] <= idx[:, None, :, None]  # (B, 1, Rc, T)
            else:
                m = attention_mask
                if m.shape[2] == 1:
                    rows_m = m.expand(bsz, m.shape[1], rc, m.shape[-1])
                else:
                    rows_m = torch.gather(m, 2, idx[:, None, :, None].expand(bsz, m.shape[1], rc, m.shape[-1]))
                rows_m = rows_m[..., :t_len]
                allowed = rows_m if rows_m.dtype == torch.bool else None
                additive = None if rows_m.dtype == torch.bool else rows_m.float()
            if softcap is None:
                mask_arg = allowed if (attention_mask is None or additive is None) else additive
                blocks = [torch.nn.functional.scaled_dot_product_attention(
                    q_rows, keys, v, attn_mask=mask_arg, scale=scaling, enable_gqa=groups > 1).sum(dim=1)
                    for v in value_blocks]  # each (B, Rc, D), summed over heads
                seg = torch.cat(blocks, dim=-1)[..., :n_seg]
            else:
                k_rep = keys.repeat_interleave(groups, dim=1) if groups > 1 else keys
                scores = torch.matmul(q_rows, k_rep.transpose(2, 3)) * scaling  # (B, H, Rc, T)
                scores = torch.tanh(scores / softcap) * softcap
                if attention_mask is None or additive is None:
                    scores.masked_fill_(~allowed, float("-inf"))
                else:
                    scores += additive
                probs = torch.softmax(scores, dim=-1).sum(dim=1)  # (B, Rc, T), summed over heads
                seg = torch.bmm(probs, self.col_assign)
            # Unused row slots (shorter sequences) may point at padding, whose softmax is NaN: zero them.
            seg = torch.where(self.row_valid[:, start : start + chunk, None], seg, 0.0)
            self.sums[:, self.slot[module.layer_idx]] += torch.bmm(
                self.row_assign[:, :, start : start + chunk], seg).double()
        self.n_heads = n_heads


def _capture_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """sdpa forward, plus segment reduction of the needed rows when a capture is active."""
    collector = _ACTIVE.get()
    if collector is not None and getattr(module, "layer_idx", None) in collector.layers:
        if getattr(module, "sinks", None) is not None:
            raise NotImplementedError("attention sinks are not supported by the capture")
        with torch.no_grad():
            collector.observe(module, query, key, attention_mask, kwargs.get("scaling") or query.shape[-1] ** -0.5,
                              kwargs.get("softcap"))
    softcap = kwargs.pop("softcap", None)
    if softcap is not None:  # sdpa has no softcap: use the eager formula for the output
        from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

        if attention_mask is not None and attention_mask.dtype == torch.bool:  # eager adds the mask
            attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~attention_mask, torch.finfo(query.dtype).min)
        elif attention_mask is None:
            t_len = query.shape[2]
            causal = torch.ones(t_len, key.shape[2], dtype=torch.bool, device=query.device).tril()
            attention_mask = torch.zeros(causal.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~causal, torch.finfo(query.dtype).min)[None, None]
        return eager_attention_forward(module, query, key, value, attention_mask, softcap=softcap, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capture_attention_forward)
AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, sdpa_mask)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's list of decoder layers (the ModuleList with `num_hidden_layers` entries)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for _, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return module
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__} (expected {n} layers)")


def _resolve_layers(model: torch.nn.Module, layers: str | Sequence[int]) -> list[int]:
    """The sorted layer indices `layers` (full_attention, all or indices) reads on `model`
    (`purecover.teacher.layers.resolve_layers`)."""
    return list(resolve_layers(model.config, layers).read)


@contextlib.contextmanager
def _attn_implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    configs = [m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "_attn_implementation")]
    previous = [c._attn_implementation for c in configs]
    try:
        for c in configs:
            c._attn_implementation = name
        yield
    finally:
        for c, p in zip(configs, previous):
            c._attn_implementation = p


def _backbone(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer without the LM head (logits over the vocabulary are never needed here)."""
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix else None
    return inner if isinstance(inner, torch.nn.Module) else model


def _offsets(attention_mask: torch.Tensor) -> list[int]:
    """Position of each sequence's first real token (left padding shifts spans by this)."""
    first = attention_mask.long().argmax(dim=1)
    return [int(x) for x in first]


@torch.no_grad()
def capture_segment_attention(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                              specs: Sequence[SegmentSpec], layers: str | Sequence[int] = "all",
                              max_chunk_bytes: int = 256 << 20, per_layer: bool = False) -> list[torch.Tensor]:
    """Mean segment attention per sequence of a batch.

    input_ids / attention_mask: (B, T), left or right padded. specs: one `SegmentSpec` per
    sequence, positions counted in the unpadded sequence. Returns one float64 tensor of shape
    (len(rows), len(cols)) per sequence: entry (x, y) = Attn(row segment x, column segment y),
    averaged over `layers` and all query heads. `layers`: ``all``, ``full_attention`` (the layers whose attention
    spans the whole sequence, from the model config) or layer indices (`purecover.teacher.layers`); a sliding-window
    layer is read through its own sliding mask, so what it cannot see counts as zero. `max_chunk_bytes` bounds the
    per-layer working memory of the row chunks. `per_layer=True` keeps the layers apart: each tensor is then
    (n_layers, len(rows), len(cols)), one slice per resolved layer in ascending order, and their mean over the first
    axis is what ``per_layer=False`` returns (one pass either way: `benchmarks/teacher_layers.py` reads every layer's
    signal from it).
    """
    if len(specs) != input_ids.shape[0]:
        raise ValueError(f"{len(specs)} segment specs for a batch of {input_ids.shape[0]}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    t_len = input_ids.shape[1]
    lengths = attention_mask.sum(dim=1).tolist()
    for i, spec in enumerate(specs):
        for a, e in (*spec.rows, *spec.cols):
            if not 0 <= a <= e <= lengths[i]:
                raise ValueError(f"sequence {i}: span [{a}, {e}) outside its {lengths[i]} tokens")
    chosen = _resolve_layers(model, layers)
    collector = _Collector(specs, _offsets(attention_mask), t_len, chosen, input_ids.device, max_chunk_bytes)
    stack = decoder_layers(model)
    last = stack[chosen[-1]]

    def stop(*_: Any) -> None:
        raise _StopForward

    handle = last.register_forward_hook(stop) if chosen[-1] < len(stack) - 1 else None
    token = _ACTIVE.set(collector)
    was_training = model.training
    model.eval()
    try:
        with _attn_implementation(model, CAPTURE_IMPLEMENTATION), contextlib.suppress(_StopForward):
            _backbone(model)(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    finally:
        _ACTIVE.reset(token)
        if handle is not None:
            handle.remove()
        model.train(was_training)
    missing = set(chosen) - collector.seen_layers
    if missing:
        raise RuntimeError(
            f"layers {sorted(missing)} never called the attention interface: {type(model).__name__} does not "
            "dispatch attention through transformers' AttentionInterface, so it cannot be captured"
        )
    results = []
    for i, spec in enumerate(specs):
        row_sizes = torch.tensor([e - a for a, e in spec.rows], dtype=torch.float64)
        col_sizes = torch.tensor([e - a for a, e in spec.cols], dtype=torch.float64)
        denom = row_sizes[:, None] * col_sizes[None, :] * collector.n_heads
        sums = collector.sums[i, :, : len(spec.rows), : len(spec.cols)].cpu()  # (L, rows, cols)
        mean = sums / denom if per_layer else sums.sum(dim=0) / (denom * len(chosen))
        mean[..., denom == 0] = math.nan
        results.append(mean)
    return results


def capture_token_lists(model: torch.nn.Module, sequences: Sequence[Sequence[int]], specs: Sequence[SegmentSpec],
                        pad_id: int, layers: str | Sequence[int] = "all", max_chunk_bytes: int = 256 << 20
                        ) -> list[torch.Tensor]:
    """`capture_segment_attention` of unpadded token-id lists, left-padded with `pad_id` into one batch on the
    model's device. Raises ValueError when a sequence is longer than the model's positions."""
    t_max = max(len(s) for s in sequences)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit and t_max > limit:
        raise ValueError(f"teacher sequence of {t_max} tokens exceeds the model's {limit} positions")
    ids = torch.full((len(sequences), t_max), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), t_max), dtype=torch.long)
    for i, s in enumerate(sequences):  # left padding
        ids[i, t_max - len(s) :] = torch.tensor(list(s))
        mask[i, t_max - len(s) :] = 1
    device = next(model.parameters()).device
    return capture_segment_attention(model, ids.to(device), mask.to(device), specs, layers=layers,
                                     max_chunk_bytes=max_chunk_bytes)


def reference_segment_attention(attentions: Sequence[torch.Tensor], attention_mask: torch.Tensor | None,
                                specs: Sequence[SegmentSpec], layers: str | Sequence[int] = "all") -> list[torch.Tensor]:
    """The same quantity from eager ``output_attentions`` (tuple of (B, H, T, T) per layer), in float64.

    `layers`: ``all`` or layer indices (no config here: resolve ``full_attention`` with
    `purecover.teacher.layers.resolve_layers` first)."""
    if isinstance(layers, str) and layers != "all":
        raise ValueError(f"reference_segment_attention takes 'all' or layer indices, got {layers!r} "
                         "(resolve it with purecover.teacher.layers.resolve_layers)")
    n_layers = len(attentions)
    chosen = list(range(n_layers)) if layers == "all" else sorted({int(i) % n_layers for i in layers})
    mean = torch.stack([attentions[i].double() for i in chosen]).mean(dim=0).mean(dim=1)  # (B, T, T)
    bsz, t_len = mean.shape[0], mean.shape[-1]
    offsets = _offsets(attention_mask) if attention_mask is not None else [0] * bsz
    out = []
    for i, spec in enumerate(specs):
        off = offsets[i]
        m = torch.full((len(spec.rows), len(spec.cols)), math.nan, dtype=torch.float64)
        for x, (a, b) in enumerate(spec.rows):
            for y, (c, d) in enumerate(spec.cols):
                if b > a and d > c:
                    m[x, y] = mean[i, off + a : off + b, off + c : off + d].mean()
        out.append(m)
    del t_len
    return out
