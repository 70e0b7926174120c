"""Tokenise a rendered prompt so that only its chat template writes control tokens.

A passage, a question or a model's reply is data: if it holds the text of a control token (``<|im_end|>``,
``<|im_start|>``, ``<start_of_turn>``, the BOS ...), tokenising the rendered prompt whole would turn that text
into the real token, and a passage could fake the end of the user's turn and the start of the assistant's.

`render_chat` (`purecover.models.chat`) therefore returns its text as a `PromptText`: a ``str`` that also
carries the character spans of the control tokens the template wrote (`control_spans`). `encode_prompt`
tokenises such a text in pieces split at those spans: each span becomes its token, and the text between
them is tokenised with ``split_special_tokens=True``, so a control token's text inside a message stays plain
text. A tokenizer splits its input at control tokens before it tokenises the rest, so for a prompt whose data
holds no control-token text the ids are exactly those of tokenising it whole (tests compare both on the real
tokenizers). A plain ``str`` (no recorded spans) is tokenised as the tokenizer would, every control token real.

Control tokens: the tokenizer's special added tokens (``added_tokens_decoder`` entries marked special, and
its named special tokens). Non-special added tokens (Qwen's ``<tool_call>``) are not turn boundaries and are
tokenised as the tokenizer does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["PromptText", "control_token_pattern", "encode_plain", "encode_prompt", "extend_prompt",
           "template_control_spans"]


class PromptText(str):
    """A rendered prompt's text, with the ``[start, end)`` character spans of the control tokens its chat
    template wrote (`control_spans`, ascending). Slicing or joining gives a plain ``str``; `extend` appends data
    (a reply) and keeps the spans."""

    control_spans: tuple[tuple[int, int], ...]

    def __new__(cls, text: str, control_spans: Sequence[tuple[int, int]] = ()) -> PromptText:
        obj = super().__new__(cls, text)
        obj.control_spans = tuple((int(a), int(b)) for a, b in control_spans)
        return obj

    def extend(self, data: str) -> PromptText:
        """This prompt followed by `data` (text whose control-token strings stay plain text)."""
        return PromptText(str(self) + data, self.control_spans)


def extend_prompt(prompt: str, data: str) -> str:
    """`prompt` followed by `data` (a reply, a reply prefix): a `PromptText` keeps its template's spans, and the
    appended text is data; a plain ``str`` is concatenated as it is."""
    return prompt.extend(data) if isinstance(prompt, PromptText) else prompt + data


def control_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The strings of `tokenizer`'s control tokens (module docstring)."""
    found = {str(t.content) for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
             if getattr(t, "special", False) and str(t.content)}
    found |= {str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or []) if str(t)}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def control_token_pattern(tokenizer: Any) -> re.Pattern[str] | None:
    """A regex matching any control token of `tokenizer`, longest first; None when it has none."""
    tokens = control_tokens(tokenizer)
    return re.compile("|".join(map(re.escape, tokens))) if tokens else None


def template_control_spans(tokenizer: Any, text: str, data_spans: Sequence[tuple[int, int]]
                           ) -> tuple[tuple[int, int], ...]:
    """The control tokens of `text` that lie outside every span of `data_spans` (the messages' contents): the
    ones the template wrote."""
    pattern = control_token_pattern(tokenizer)
    if pattern is None:
        return ()
    return tuple((m.start(), m.end()) for m in pattern.finditer(text)
                 if not any(m.start() < b and a < m.end() for a, b in data_spans))


def encode_plain(tokenizer: Any, text: str, offsets: bool = False) -> dict[str, Any]:
    """`text` tokenised as plain text (no special tokens added, control-token strings kept as text): the
    tokenizer's encoding (``input_ids``, and ``offset_mapping`` when `offsets`)."""
    if not text:
        return {"input_ids": [], **({"offset_mapping": []} if offsets else {})}
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=offsets)


def _token_id(tokenizer: Any, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid < 0:
        raise ValueError(f"the tokenizer has no id for its control token {token!r}")
    return tid


def encode_prompt(tokenizer: Any, text: str, cuts: Sequence[int] = (), offsets: bool = False
                  ) -> tuple[list[int], list[int], list[tuple[int, int]] | None]:
    """(token ids, the index of the last token before each of `cuts`, the character span of each token or None)
    of `text` tokenised without added special tokens, in pieces that end at each of `cuts` (ascending
    character offsets) and at the template's control tokens (`PromptText.control_spans`; a plain ``str``: every
    control token in it). `offsets`: also each token's ``(start, end)`` characters in `text`."""
    spans = getattr(text, "control_spans", None)
    if spans is None:
        pattern = control_token_pattern(tokenizer)
        spans = tuple((m.start(), m.end()) for m in pattern.finditer(text)) if pattern else ()
    text = str(text)
    if any(not 0 <= a < b <= len(text) for a, b in spans):
        raise ValueError(f"control-token spans {list(spans)} do not fit a text of {len(text)} characters")
    bounds = sorted({*(c for c in cuts), *(p for s in spans for p in s)})
    span_at = dict(spans)
    ids: list[int] = []
    spans_out: list[tuple[int, int]] = []
    positions: list[int] = []
    cut_set = set(cuts)
    start = 0
    for end in [*bounds, len(text)]:
        if end < start:
            continue
        if start in span_at and span_at[start] <= end:
            ids.append(_token_id(tokenizer, text[start:span_at[start]]))
            spans_out.append((start, span_at[start]))
            start = span_at[start]
        if end > start:
            enc = encode_plain(tokenizer, text[start:end], offsets)
            ids += enc["input_ids"]
            if offsets:
                spans_out += [(a + start, b + start) for a, b in enc["offset_mapping"]]
            start = end
        if end in cut_set:
            positions.append(len(ids) - 1)
    return ids, positions, (spans_out if offsets else None)
