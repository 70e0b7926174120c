"""Which attention layers the capture reads (``teacher.layers``), resolved from the teacher's model config.

Many models mix full-attention layers with sliding-window layers (Gemma-2/3, Mistral-style
``sliding_window``, Qwen2 configs with ``use_sliding_window`` and ``max_window_layers``). A sliding layer
with a window of w tokens lets the query at position q see only the keys q - w + 1 .. q, so from reasoning
steps written after a long prompt it cannot see most documents: its attention to them is zero by
construction, not evidence. Averaging such layers in dilutes (on Gemma-3-270M, all but ruins) the labels.

``teacher.layers`` (`purecover.config.TeacherConfig.layers`):

* ``full_attention`` (the default): only the layers whose attention spans the whole sequence. For a
  model without sliding-window layers this is every layer (Qwen2.5, Llama: the same labels as ``all``).
  A model with no full-attention layer at all is an error naming its model type.
* ``all``: every layer. On a model with sliding-window layers this is allowed but warned about, once per
  stage run (`logging.warning`, naming the sliding layers and their window), and the questions whose
  reasoning starts beyond the window are counted (`purecover.records.LayersRead.beyond_window`).
* a list of indices (negative ones count from the end): exactly those layers. A chosen layer whose window
  does not reach from the first reasoning step back to the first document is refused before the expensive
  work (`LayerWindowError`, naming the layer, its window and the distance).

The reach rule: with d the distance in tokens from the first token of the first reasoning step to the first
token of the first document (d = step start - document start), a layer of window w cannot see that
document token from any step when d >= w. Before generation the steps' position is not known yet, so the
stages first check the distance to where the reply starts (`reply_distance`, a lower bound: the first step
starts a few tokens later), then the label stage checks the exact distance of every question's built
sequence before its capture.

Per-layer windows come from the config as transformers 5 builds it: ``layer_types`` (``full_attention``,
``sliding_attention`` with ``sliding_window``, ``chunked_attention`` with ``attention_chunk_size``); a
config without ``layer_types`` is all sliding when it has an integer ``sliding_window`` (Mistral) unless
``use_sliding_window`` is false, and Qwen2's ``max_window_layers`` then says where the sliding layers start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..models.prompt_tokens import encode_prompt
from ..records import CandidateDoc, LayersRead
from .prompts import ReasoningPrompt, build_attention_prompt, char_span_to_tokens

__all__ = [
    "FULL_ATTENTION",
    "LayerPlan",
    "LayerWindowError",
    "attention_windows",
    "load_layer_plan",
    "reach_report",
    "reply_distance",
    "resolve_layers",
    "resolved_layers_fingerprint",
    "sequence_distance",
]

log = logging.getLogger(__name__)

FULL_ATTENTION = "full_attention"
_FULL = object()  # marker: this layer's attention spans the whole sequence


class LayerWindowError(ValueError):
    """An explicitly chosen layer's attention window does not reach from the reasoning steps to the documents.

    Raised before the expensive work; the label stage lets it through instead of recording it per question.
    """


@dataclass(frozen=True)
class LayerPlan:
    """``teacher.layers`` resolved for one model.

    `setting`: the recipe value (``full_attention``, ``all`` or a list of indices). `model_type`: the config's
    ``model_type``. `windows`: one entry per decoder layer (length ``num_hidden_layers``): the attention
    window in tokens (a query sees itself and the window - 1 tokens before it), or None when the layer's
    attention spans the whole sequence. `kinds`: each layer's type (``full_attention``,
    ``sliding_attention``, ...). `read`: the sorted layer indices the capture averages.
    """

    setting: str | tuple[int, ...]
    model_type: str
    kinds: tuple[str, ...]
    windows: tuple[int | None, ...]
    read: tuple[int, ...]

    @property
    def explicit(self) -> bool:
        """Whether the layers were listed by index (a too-short window is then an error, not a warning)."""
        return not isinstance(self.setting, str)

    @property
    def num_layers(self) -> int:
        return len(self.windows)

    def sliding(self) -> list[int]:
        """The read layers whose attention is limited to a window (sorted indices)."""
        return [i for i in self.read if self.windows[i] is not None]

    def shortest_window(self) -> int | None:
        """The smallest window among the read layers, in tokens; None when every read layer sees everything."""
        windows = [self.windows[i] for i in self.sliding()]
        return min(w for w in windows if w is not None) if windows else None

    def blind(self, distance: int) -> list[int]:
        """The read layers that cannot see a token `distance` tokens back (window <= distance)."""
        return [i for i in self.sliding() if (w := self.windows[i]) is not None and w <= distance]

    def describe_sliding(self) -> str:
        """``layers 0, 1, 3 (sliding_attention, window 512 tokens)``: the read sliding layers, grouped by window."""
        groups: dict[tuple[str, int], list[int]] = {}
        for i in self.sliding():
            w = self.windows[i]
            assert w is not None
            groups.setdefault((self.kinds[i], w), []).append(i)
        parts = [f"layer{'s' if len(idx) > 1 else ''} {', '.join(map(str, idx))} ({kind}, window {w} tokens)"
                 for (kind, w), idx in groups.items()]
        return "; ".join(parts)

    def check_reach(self, distance: int, where: str, exact: bool = True) -> None:
        """For explicitly listed layers: raise `LayerWindowError` when a chosen layer's window is at most
        `distance` (tokens from the first document to the first reasoning step of `where`, e.g. a question id).
        `exact`: whether `distance` is the step's own position (else the reply's start, a lower bound).
        Nothing for ``full_attention`` / ``all`` (``all`` is warned about by `reach_report`)."""
        if not self.explicit:
            return
        blind = self.blind(distance)
        if not blind:
            return
        first = blind[0]
        others = f" (also layers {', '.join(map(str, blind[1:]))})" if len(blind) > 1 else ""
        measured = ("its first reasoning step starts" if exact
                    else "its reply (so its first reasoning step) starts at least")
        raise LayerWindowError(
            f"teacher.layers: layer {first} of {self.model_type} is a {self.kinds[first]} layer with a window of "
            f"{self.windows[first]} tokens{others}, but in {where} {measured} {distance} tokens after the first "
            f"document, so that layer cannot see the documents from the steps; remove it from teacher.layers or "
            f"use teacher.layers: full_attention (the model's full-attention layers: "
            f"{_indices(self.full_layers())})")

    def full_layers(self) -> list[int]:
        """Every layer of the model whose attention spans the whole sequence."""
        return [i for i, k in enumerate(self.kinds) if k == FULL_ATTENTION]

    def record(self, beyond_window: int | None = None) -> LayersRead:
        """The `LayersRead` record the stages write (`beyond_window`: questions counted by `reach_report`)."""
        shortest = self.shortest_window()
        optional = {"beyond_window": beyond_window} if beyond_window is not None else {}
        return LayersRead(setting=self.setting if isinstance(self.setting, str) else list(self.setting),
                          model_type=self.model_type, num_layers=self.num_layers, read=list(self.read),
                          sliding=self.sliding(), window=shortest, **optional)


def _indices(idx: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, idx)) + "]"


def _text_config(config: Any) -> Any:
    """The decoder's config (a multimodal model's ``text_config``; the config itself otherwise)."""
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if callable(getter) else config


def attention_windows(config: Any) -> tuple[list[str], list[int | None]]:
    """Each decoder layer's attention type and window, from a transformers model config.

    Returns (kinds, windows), both of length ``num_hidden_layers``: kinds are transformers' layer types
    (``full_attention``, ``sliding_attention``, ``chunked_attention``, ...), windows the tokens a query can
    see (itself included) or None for a whole-sequence (or non-attention) layer.
    """
    text = _text_config(config)
    model_type = getattr(text, "model_type", None) or type(text).__name__
    n = getattr(text, "num_hidden_layers", None)
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueError(f"teacher.layers: the {model_type} config has no num_hidden_layers")
    if n < 1:
        raise ValueError(f"teacher.layers: the {model_type} config has num_hidden_layers {n}: no layer to read")
    window = getattr(text, "sliding_window", None)
    if getattr(text, "use_sliding_window", True) is False:  # Qwen2-style switch (transformers 5 applies it too)
        window = None
    types = getattr(text, "layer_types", None)
    if types is None:
        if window is None:
            kinds = [FULL_ATTENTION] * n
        else:  # Mistral: every layer slides; Qwen2 (older configs): layers from max_window_layers on
            first = getattr(text, "max_window_layers", 0) if hasattr(text, "use_sliding_window") else 0
            kinds = ["sliding_attention" if i >= int(first or 0) else FULL_ATTENTION for i in range(n)]
    else:
        kinds = [str(t) for t in types]
        if len(kinds) != n:
            raise ValueError(f"teacher.layers: the {model_type} config lists {len(kinds)} layer_types for "
                             f"{n} layers")
    windows: list[int | None] = []
    for i, kind in enumerate(kinds):
        if kind == "sliding_attention":
            if not isinstance(window, int):
                raise ValueError(f"teacher.layers: layer {i} of {model_type} is sliding_attention but the config "
                                 f"has no integer sliding_window ({window!r})")
            windows.append(int(window))
        elif kind == "chunked_attention":  # attends within chunks of attention_chunk_size: reaches at most that far
            chunk = getattr(text, "attention_chunk_size", None)
            if not isinstance(chunk, int):
                raise ValueError(f"teacher.layers: layer {i} of {model_type} is chunked_attention but the config "
                                 f"has no integer attention_chunk_size ({chunk!r})")
            windows.append(int(chunk))
        else:
            windows.append(None)
    return kinds, windows


def resolve_layers(config: Any, setting: str | Sequence[int]) -> LayerPlan:
    """``teacher.layers`` (`setting`) resolved against a model config (module docstring): the layers read.

    Errors (ValueError naming ``teacher.layers``): an unknown string, indices out of range, and
    ``full_attention`` on a model without a full-attention layer (naming the model type).
    """
    kinds, windows = attention_windows(config)
    text = _text_config(config)
    model_type = str(getattr(text, "model_type", None) or type(text).__name__)
    n = len(kinds)
    if isinstance(setting, str):
        if setting == "all":
            read = list(range(n))
        elif setting == FULL_ATTENTION:
            read = [i for i, k in enumerate(kinds) if k == FULL_ATTENTION]
            if not read:
                found = sorted(set(kinds))
                raise ValueError(
                    f"teacher.layers: full_attention: the {model_type} model has no full-attention layer (its "
                    f"{n} layers are {', '.join(found)}"
                    + (f", window {min(w for w in windows if w is not None)} tokens" if any(windows) else "")
                    + "); list the layers to read explicitly, e.g. teacher.layers: [-1] (layers whose window is "
                    "shorter than the distance from the first document to the first reasoning step are refused)")
        else:
            raise ValueError(f"teacher.layers must be full_attention, all or a list of layer indices, got {setting!r}")
        stored: str | tuple[int, ...] = setting
    else:
        read = sorted({int(i) + n if int(i) < 0 else int(i) for i in setting})
        if not read or read[0] < 0 or read[-1] >= n:
            raise ValueError(f"teacher.layers: layer indices {list(setting)} out of range for a model with {n} layers")
        stored = tuple(int(i) for i in setting)
    return LayerPlan(setting=stored, model_type=model_type, kinds=tuple(kinds), windows=tuple(windows),
                     read=tuple(read))


def load_layer_plan(model: str, setting: str | Sequence[int], trust_remote_code: bool = False,
                    local_files_only: bool = False) -> LayerPlan:
    """`resolve_layers` on the config of `model` (Hub id or local directory): only config.json is read."""
    from transformers import AutoConfig

    from ..models.loading import check_model_path

    config = AutoConfig.from_pretrained(check_model_path(model), trust_remote_code=trust_remote_code,
                                        local_files_only=local_files_only)
    return resolve_layers(config, setting)


def resolved_layers_fingerprint(model: str, setting: str | Sequence[int], trust_remote_code: bool = False) -> str:
    """The layers `setting` reads on `model`, as a short string for config hashes: ``read:[5, 11, 17]``;
    ``unresolved`` without a locally available config (nothing is downloaded) or when resolution fails (the
    stage itself then raises the error)."""
    try:
        plan = load_layer_plan(model, setting, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):  # no local config, or one that does not resolve
        return "unresolved"
    return f"read:{list(plan.read)}"


def reply_distance(tokenizer: Any, question: str, docs: Sequence[CandidateDoc],
                   prompt: ReasoningPrompt | None = None) -> int | None:
    """Tokens from the first document's first token to where the reply starts, in the reasoning prompt of
    (`question`, `docs`); a lower bound of the distance to the first reasoning step. None without a document."""
    text, doc_chars = build_attention_prompt(tokenizer, question, docs, prompt)
    spans = [s for s in doc_chars if s[1] > s[0]]
    if not spans:
        return None
    ids, _, offsets = encode_prompt(tokenizer, text, offsets=True)
    assert offsets is not None
    start, _ = char_span_to_tokens(offsets, spans[0])
    return len(ids) - start


def sequence_distance(step_spans: Sequence[tuple[int, int]], doc_spans: Sequence[tuple[int, int]]) -> int | None:
    """Tokens from the first document's first token to the first reasoning step's first token (token spans of
    one built sequence, ``[start, end)``); None without a non-empty step or document."""
    steps = [a for a, b in step_spans if b > a]
    docs = [a for a, b in doc_spans if b > a]
    return steps[0] - docs[0] if steps and docs else None


def reach_report(plan: LayerPlan, distances: Sequence[tuple[str, int | None]], exact: bool = False,
                 warn: bool = True) -> int | None:
    """Apply the reach rule to (where, distance) pairs (module docstring) before the expensive work.

    Explicitly listed layers: `LayerPlan.check_reach` on each (raises `LayerWindowError` for the first
    question out of reach). ``all`` reading sliding layers: one `logging.warning` (when `warn`) naming them
    and their window, with the count. Returns how many distances are at least the shortest window of the read
    layers (None when no read layer has a window, so nothing is counted).
    """
    shortest = plan.shortest_window()
    if shortest is None:
        return None
    for where, d in distances:
        if d is not None:
            plan.check_reach(d, where, exact=exact)
    beyond = sum(1 for _, d in distances if d is not None and d >= shortest)
    if warn and not plan.explicit:
        log.warning(
            "teacher.layers: %s averages the sliding-window layers of %s into the labels: %s. From the reasoning "
            "steps these layers cannot see documents more than their window back; in %d of %d sequences the "
            "reasoning starts at least %d tokens after the first document. Use teacher.layers: full_attention "
            "(the default: layers %s) unless you mean to average them in.",
            plan.setting, plan.model_type, plan.describe_sliding(), beyond, len(distances), shortest,
            _indices(plan.full_layers()))
    return beyond
