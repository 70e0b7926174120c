"""Scoring many replies after one prompt: the replies laid out as one prefix tree (docs/concepts/method.md#the-student).

All orderings of a subset share prefixes, so they are laid out as one tree (shared prefixes
once: 530 tokens for the 120 orderings of |S| = 5) and scored in a single no-grad forward over
the prompt's key/value cache. Each tree token sees the whole prompt and its own ancestors.

Layout (`tree_layout`): built once per *shape* of the orderings (the orderings relabelled
0..m-1 in order of first appearance, so the permutations of every subset of a size share one
layout), cached, and
held as tensors: per tree token its symbol (an element's identifier or the separator), its
position offset after the prompt (its number of ancestors), its ancestors-or-self (padded), and
per ordering the (row, symbol) pairs whose log-probabilities sum to the reply's log-likelihood
(row -1: the prompt's last position, which predicts the reply's first token). The sum is one
gather: log p = logit[row, token] − logsumexp(logits[row]).

Attention (`score_tree`). Fast path, for models whose attention goes through transformers'
AttentionInterface (Qwen2, Llama and most current models): the model's attention
implementation is switched, for this forward only, to `tree_attention`, which computes each
layer's attention in two exact parts and merges them by their log-sum-exp:

  prompt part  every tree token attends to all prompt keys: dense, no mask (on CPU torch's
               flash kernel, which returns the log-sum-exp; elsewhere plain float32 matmuls),
               with the query heads of a key/value group stacked so that keys are never
               repeated. In the first layer, tree tokens with the same (token, position) have
               the same query (checked bitwise): this part runs once per such group (29
               queries instead of 530 for |S| = 5) and is copied to its members;
  tree part    every tree token attends to its ≤ 2|S| − 1 ancestors-or-self, gathered by index
               (not a dense (n, n) masked block).

Same values as one forward per ordering up to float rounding (~1e-6); nothing is approximated.
The prompt's keys/values are read from the cache (detached) and the tree forward runs without
a cache, so the caller's cache, which may carry the training graph, is neither copied nor
modified. Fallback (attention dropout, soft-capping or sinks, a sliding window shorter than the
prompt + reply, a model whose attention does not go through the interface, detected by counting
the calls): the dense method, a 4-D additive mask (tree tokens × (prompt + tree); with the
sliding window applied where it binds) over a detached copy of the cache.

The switch of attention implementation is shared with the best reply's training forward, whose kernel lives
in `purecover.train.reply_attention` (which also lists the transformers internals both rely on).
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .reply_attention import attention_implementation

__all__ = ["TREE_ATTENTION", "TreeLayout", "score_tree", "tree_attention", "tree_layout"]

TREE_ATTENTION = "purecover_prefix_tree"


@dataclass(frozen=True)
class TreeLayout:
    """One prefix tree of replies, over symbols 0..m-1 (elements), m (separator), m+1 (end of turn).

    node_sym (n,), node_offset (n,): each tree token's symbol and position offset after the prompt;
    ancestors (n, A) (padded with the token itself) and ancestor_valid (n, A); term_row (P, L) (-1: the
    prompt's last position; padded with 0) and term_sym (P, L) and term_valid (P, L): the terms of
    each ordering's log-likelihood; n_terms (P,). group (n,): the tokens grouped by (symbol, offset),
    which enter the model identically; group_reps (u,): one token per group.
    """

    m: int
    node_sym: torch.Tensor
    node_offset: torch.Tensor
    ancestors: torch.Tensor
    ancestor_valid: torch.Tensor
    term_row: torch.Tensor
    term_sym: torch.Tensor
    term_valid: torch.Tensor
    n_terms: torch.Tensor
    group_reps: torch.Tensor
    group: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.node_sym.shape[0])

    @functools.cached_property
    def visible(self) -> torch.Tensor:
        """(n, n) bool: tree token i may see tree token j (j is i or an ancestor of i)."""
        out = torch.zeros(self.n, self.n, dtype=torch.bool)
        rows = torch.arange(self.n)[:, None].expand_as(self.ancestors)
        out[rows[self.ancestor_valid], self.ancestors[self.ancestor_valid]] = True
        return out


def _build_layout(orders: tuple[tuple[int, ...], ...], m: int) -> TreeLayout:
    sep, end = m, m + 1
    syms: list[int] = []
    parent: list[int] = []
    nodes: dict[tuple[int, ...], tuple[int, int | None]] = {}
    paths: list[list[tuple[int, int]]] = []
    for order in orders:
        if not order:
            paths.append([(-1, end)])
            continue
        terms: list[tuple[int, int]] = []
        prev = -1
        for j, k in enumerate(order):
            last = j == len(order) - 1
            prefix = order[: j + 1]
            if prefix not in nodes or (not last and nodes[prefix][1] is None):
                if prefix in nodes:
                    i_id = nodes[prefix][0]
                else:
                    i_id = len(syms)
                    syms.append(k)
                    parent.append(prev)
                i_sep = None
                if not last:
                    i_sep = len(syms)
                    syms.append(sep)
                    parent.append(i_id)
                nodes[prefix] = (i_id, i_sep)
            i_id, i_sep = nodes[prefix]
            terms.append((prev, k))
            if last:
                terms.append((i_id, end))
            else:
                terms.append((i_id, sep))
                prev = i_sep  # type: ignore[assignment]
        paths.append(terms)
    ancestors: list[list[int]] = []
    for i, p in enumerate(parent):
        ancestors.append((ancestors[p] if p >= 0 else []) + [i])
    n = len(syms)
    width = max((len(a) for a in ancestors), default=1)
    anc = torch.tensor([a + [i] * (width - len(a)) for i, a in enumerate(ancestors)], dtype=torch.long)
    anc_valid = torch.tensor([[True] * len(a) + [False] * (width - len(a)) for a in ancestors], dtype=torch.bool)
    length = max(len(t) for t in paths)
    term_row = torch.tensor([[r for r, _ in t] + [0] * (length - len(t)) for t in paths], dtype=torch.long)
    term_sym = torch.tensor([[s for _, s in t] + [end] * (length - len(t)) for t in paths], dtype=torch.long)
    term_valid = torch.tensor([[True] * len(t) + [False] * (length - len(t)) for t in paths], dtype=torch.bool)
    keys = list(zip(syms, (len(a) - 1 for a in ancestors)))
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    slot = {key: j for j, key in enumerate(first)}
    return TreeLayout(m=m, node_sym=torch.tensor(syms, dtype=torch.long),
                      node_offset=torch.tensor([len(a) - 1 for a in ancestors], dtype=torch.long),
                      ancestors=anc.reshape(n, width), ancestor_valid=anc_valid.reshape(n, width),
                      term_row=term_row, term_sym=term_sym, term_valid=term_valid,
                      n_terms=term_valid.sum(-1), group_reps=torch.tensor(list(first.values()), dtype=torch.long),
                      group=torch.tensor([slot[key] for key in keys], dtype=torch.long))


@functools.lru_cache(maxsize=128)
def _cached_layout(orders: tuple[tuple[int, ...], ...], m: int) -> TreeLayout:
    return _build_layout(orders, m)


def tree_layout(orderings: Sequence[Sequence[int]]) -> tuple[TreeLayout, list[int]]:
    """The prefix-tree layout of `orderings` (non-empty list; each a sequence of element ids) and the
    elements in symbol order (symbol i is elements[i]). Cached per relabelled shape."""
    if not orderings:
        raise ValueError("no orderings to score")
    elements = list(dict.fromkeys(k for o in orderings for k in o))  # in order of first appearance
    index = {k: i for i, k in enumerate(elements)}
    relabelled = tuple(tuple(index[k] for k in o) for o in orderings)
    return _cached_layout(relabelled, len(elements)), elements


# --------------------------------------------------------------------------------------------- attention


class _Unsupported(Exception):
    """The fast tree attention does not apply to this model (the caller falls back to the dense mask)."""


@dataclass
class _TreeState:
    cache: Any
    ancestors: torch.Tensor  # (n, A) on the device
    ancestor_invalid: torch.Tensor  # (n, 1, A): padding
    t_len: int
    max_position: int  # of the tree tokens (a sliding window binds when it is <= this distance)
    groups: tuple[torch.Tensor, torch.Tensor] | None = None  # representatives (u,), group of each token (n,)
    calls: int = 0


_STATE: contextvars.ContextVar[_TreeState | None] = contextvars.ContextVar("purecover_tree_state", default=None)


def _prompt_kv(cache: Any, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(cache, "layers"):
        entry = cache.layers[layer]
        return entry.keys, entry.values
    return cache.key_cache[layer], cache.value_cache[layer]  # older DynamicCache


def _dense_attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                              flash: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Unmasked attention (B, G, L, D) x (B, G, T, D) -> output (B, G, L, D) and float32 log-sum-exp (B, G, L).

    flash (default: on CPU where torch has it): torch's CPU flash kernel, which returns the log-sum-exp;
    otherwise plain float32 matmuls."""
    if flash is None:
        flash = q.device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    if flash:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=scale)
        return out, lse.float()
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    lse = scores.logsumexp(-1)
    out = torch.matmul((scores - lse[..., None]).exp(), v.float())
    return out.to(q.dtype), lse


def _tree_attention_math(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         state: _TreeState, scaling: float | None) -> torch.Tensor:
    b, h, n, d = query.shape
    kv = key.shape[1]
    if b != 1 or h % kv or n != state.ancestors.shape[0]:
        raise _Unsupported(f"query {tuple(query.shape)}, key {tuple(key.shape)}")
    g = h // kv
    scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(d)
    kp, vp = _prompt_kv(state.cache, module.layer_idx)
    if kp.shape[-2] != state.t_len:
        raise _Unsupported(f"cache length {kp.shape[-2]} != prompt length {state.t_len}")
    # prompt part: the g query heads of a key/value head stacked along the sequence (no repeated keys, no mask).
    # Where tokens with the same (token, position) have bitwise-equal queries (the first layer), once per group.
    q_prompt, group = query, None
    if state.groups is not None and state.groups[0].shape[0] < n:
        reps, group = state.groups
        q_prompt = query.index_select(2, reps)
        if not torch.equal(q_prompt.index_select(2, group), query):
            q_prompt, group = query, None
    u = q_prompt.shape[2]
    out_p, lse_p = _dense_attention_with_lse(q_prompt.reshape(1, kv, g * u, d), kp.detach().to(query.dtype),
                                             vp.detach().to(query.dtype), scale)
    out_p, lse_p = out_p.reshape(kv, g, u, d), lse_p.reshape(kv, g, u)
    if group is not None:
        out_p, lse_p = out_p.index_select(2, group), lse_p.index_select(2, group)
    # tree part: each token's ancestors-or-self (A of them, padded), gathered by index; batched over (n, kv)
    # (the projections leave q/k/v token-major, so these transposes are free views)
    n_anc = state.ancestors.shape[1]
    flat = state.ancestors.reshape(-1)
    ka = key[0].transpose(0, 1).reshape(n, kv * d).index_select(0, flat).view(n, n_anc, kv, d)
    va = value[0].transpose(0, 1).reshape(n, kv * d).index_select(0, flat).view(n, n_anc, kv, d)
    ka = ka.transpose(1, 2).reshape(n * kv, n_anc, d)
    va = va.transpose(1, 2).reshape(n * kv, n_anc, d)
    qt = query[0].transpose(0, 1).reshape(n * kv, g, d)
    scores = torch.bmm(qt, ka.transpose(1, 2)).float().mul_(scale)  # (n*kv, g, A)
    scores.view(n, kv * g, n_anc).masked_fill_(state.ancestor_invalid, float("-inf"))
    top = scores.amax(-1, keepdim=True)  # finite: every token sees itself
    probs = scores.sub_(top).exp_()
    z = probs.sum(-1)
    out_t = torch.bmm(probs.to(va.dtype), va).float().div_(z[..., None]).view(n, kv, g, d)
    lse_t = z.log_().add_(top[..., 0]).view(n, kv, g)
    # merge: softmax over both parts = the parts' outputs weighted by their shares of the total exp-sum
    out_p, lse_p = out_p.permute(2, 0, 1, 3), lse_p.permute(2, 0, 1)  # (n, kv, g, ·) views
    share_p = torch.sigmoid(lse_p.float() - lse_t)[..., None]
    out = torch.lerp(out_t, out_p.float(), share_p)  # (n, kv, g, d), contiguous
    return out.reshape(1, n, h, d).to(query.dtype)  # (1, n, h, d), like sdpa/eager


def tree_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs: Any) -> tuple[torch.Tensor, None]:
    """AttentionInterface function of the tree forward inside `score_tree` (see the module docstring).

    `attention_mask` is ignored (none is built for this implementation): the tree's visibility comes from
    the layout. Raises `_Unsupported` (the caller falls back to the dense mask) for attention dropout,
    soft-capping, sinks, or a sliding window that would hide part of the prompt."""
    state = _STATE.get()
    if state is None:
        raise RuntimeError(f"the {TREE_ATTENTION!r} attention only runs inside prefix_tree.score_tree")
    window = kwargs.get("sliding_window")
    if dropout or kwargs.get("softcap") is not None or getattr(module, "sinks", None) is not None \
            or getattr(module, "layer_idx", None) is None or (window is not None and state.max_position >= window):
        raise _Unsupported("attention dropout, soft-capping, sinks or a binding sliding window")
    state.calls += 1
    out = _tree_attention_math(module, query, key, value, state, scaling)
    state.groups = None  # after the first layer the tokens' hidden states differ
    return out, None


def _register() -> None:
    from transformers import AttentionInterface

    if TREE_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(TREE_ATTENTION, tree_attention)


def _n_layers(cache: Any) -> int:
    return len(cache.layers) if hasattr(cache, "layers") else len(cache.key_cache)


def _forward_fast(model: Any, cache: Any, t_len: int, layout: TreeLayout, toks: torch.Tensor,
                  device: torch.device) -> torch.Tensor | None:
    """Logits (n, V) of the tree tokens by `tree_attention`; None where it does not apply."""
    _register()
    state = _TreeState(cache=cache, ancestors=layout.ancestors.to(device),
                       ancestor_invalid=~layout.ancestor_valid.to(device)[:, None], t_len=t_len,
                       max_position=t_len + int(layout.node_offset.max()),
                       groups=(layout.group_reps.to(device), layout.group.to(device)))
    position_ids = (layout.node_offset + t_len).to(device)[None]
    with attention_implementation(model, TREE_ATTENTION):
        token = _STATE.set(state)
        try:
            logits = model(input_ids=toks[None], position_ids=position_ids, use_cache=False).logits[0]
        except _Unsupported:
            return None
        finally:
            _STATE.reset(token)
    if state.calls != _n_layers(cache):  # some layer did not go through the interface: its attention was wrong
        return None
    return logits


def _sliding_window(model: Any) -> tuple[int | None, bool]:
    """The model's sliding window (None: none) and whether it also has full-attention layers."""
    config = getattr(model, "config", None)
    window = getattr(config, "sliding_window", None)
    types = set(getattr(config, "layer_types", None) or ())
    if not window or getattr(config, "use_sliding_window", True) is False or (types and "sliding_attention" not in types):
        return None, False
    return int(window), "full_attention" in types


def _forward_dense(model: Any, cache: Any, t_len: int, layout: TreeLayout, toks: torch.Tensor,
                   device: torch.device) -> torch.Tensor:
    """Logits (n, V) of the tree tokens with a 4-D additive mask over a detached copy of the cache. With a
    sliding window, the mask applies it and covers the prompt positions the cache kept (a sliding-window
    cache keeps only the last ones); with both layer types, one mask per type."""
    from transformers import DynamicCache

    dtype = next(model.parameters()).dtype
    n_layers = _n_layers(cache)
    lengths = [_prompt_kv(cache, i)[0].shape[-2] for i in range(n_layers)]
    q_pos = layout.node_offset + t_len
    window, mixed = _sliding_window(model)

    def build(length: int, windowed: bool) -> torch.Tensor:
        visible = torch.cat([torch.ones(layout.n, length, dtype=torch.bool), layout.visible], dim=1)
        if windowed:
            k_pos = torch.cat([torch.arange(t_len - length, t_len), q_pos])
            visible &= q_pos[:, None] - k_pos[None, :] < window
        return _additive(visible, dtype, device)

    mask: Any
    if window is not None and mixed:
        types = list(model.config.layer_types)[:n_layers]
        first = {kind: lengths[types.index(kind)] for kind in ("full_attention", "sliding_attention")}
        if any(lengths[i] != first[kind] for i, kind in enumerate(types)):
            raise ValueError(f"prompt cache lengths differ within a layer type: {lengths}")
        mask = {kind: build(first[kind], kind == "sliding_attention") for kind in first}
    else:
        if len(set(lengths)) != 1:
            raise ValueError(f"prompt cache lengths differ between layers: {lengths}")
        mask = build(lengths[0], window is not None)
    scratch = DynamicCache()
    for i in range(n_layers):
        k, v = _prompt_kv(cache, i)
        scratch.update(k.detach(), v.detach(), i)
    return model(input_ids=toks[None], past_key_values=scratch, attention_mask=mask, position_ids=q_pos.to(device)[None],
                 use_cache=True).logits[0]


def _additive(visible: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, n, T+n) additive mask: 0 where visible, the dtype's minimum elsewhere."""
    visible = visible.to(device)
    return torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill(~visible, torch.finfo(dtype).min)[None, None]


@torch.no_grad()
def score_tree(model: Any, cache: Any, t_len: int, lp_first: torch.Tensor, orderings: Sequence[Sequence[int]],
               symbol_ids: Sequence[int], separator_id: int, end_id: int, device: torch.device,
               dense: bool | None = None) -> torch.Tensor:
    """Mean token NLL (P,) float32 of each ordering's reply, all replies laid out as one prefix tree over
    `cache` (the prompt's key/value cache of length t_len; not modified).

    lp_first: (V,) log-probabilities at the prompt's last position. symbol_ids[k]: the token of element
    k (elements are the ids in the orderings). dense: force the dense-mask method (True) or the fast one
    (False: raise if it does not apply); default: fast where it applies.
    """
    layout, elements = tree_layout(orderings)
    sym_tok = torch.tensor([symbol_ids[k] for k in elements] + [separator_id, end_id], dtype=torch.long)
    lp_first = lp_first.float()
    if layout.n:
        toks = sym_tok[layout.node_sym].to(device)
        logits = None
        if not dense:
            logits = _forward_fast(model, cache, t_len, layout, toks, device)
            if logits is None and dense is False:
                raise RuntimeError("the prefix-tree attention does not apply to this model")
        if logits is None:
            logits = _forward_dense(model, cache, t_len, layout, toks, device)
        logits = logits.float()
    rows = layout.term_row.to(device)
    toks_t = sym_tok[layout.term_sym].to(device)
    term_lp = lp_first[toks_t]
    if layout.n:
        r = rows.clamp(min=0)
        picked = logits[r, toks_t]
        # log-sum-exp per row, in place (the logits are not needed after the gather; no (n, V) temporary)
        top = logits.amax(-1)
        lse = logits.sub_(top[:, None]).exp_().sum(-1).log_().add_(top)
        term_lp = torch.where(rows < 0, term_lp, picked - lse[r])
    term_lp = term_lp.double().masked_fill(~layout.term_valid.to(device), 0.0)
    return (-term_lp.sum(-1) / layout.n_terms.to(device)).float().cpu()
