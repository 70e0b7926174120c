"""Render a (system, user) exchange as the prompt text a causal LM continues, and map spans into it.

Every prompt text is tokenised with ``add_special_tokens=False`` (`purecover.models.generation`, the
selector prompt, the teacher's offsets), so the text itself carries every special token the model needs:
the chat template's own (it writes the BOS where the model wants one), or, in the plain layout used
without a template, the tokenizer's BOS token at the very start (`bos_prefix`). Base models trained
with a BOS at the start of every document (Gemma, Llama, Mistral) degenerate without it.

The text is a `PromptText` that records where those template tokens are, and every prompt builder tokenises
it with `purecover.models.prompt_tokens.encode_prompt`: a control token's text inside the messages (a passage
holding ``<|im_end|>``) stays plain text.
"""

from __future__ import annotations

from typing import Any

from .prompt_tokens import PromptText, template_control_spans

__all__ = ["ChatPrompt", "bos_prefix", "render_chat"]


class ChatPrompt:
    """A rendered prompt. `text` ends where the assistant's reply starts (a `PromptText`: it knows which control
    tokens the template wrote); `user_offset` is the character position of the user message inside `text` (to
    map spans of the message)."""

    def __init__(self, text: PromptText, user_offset: int) -> None:
        self.text = text
        self.user_offset = user_offset

    def shift(self, span: tuple[int, int]) -> tuple[int, int]:
        """A character span of the user message, as a span of `text`."""
        return span[0] + self.user_offset, span[1] + self.user_offset


def bos_prefix(tokenizer: Any) -> str:
    """The text the plain layout starts with: the tokenizer's BOS token when it has one with an id, else "".

    The prompt is tokenised without special tokens, so the tokenizer never adds a BOS of its own (even one
    whose post-processor would, like Llama's): the token in the text is the only one.
    """
    bos = getattr(tokenizer, "bos_token", None)
    if not isinstance(bos, str) or not bos or getattr(tokenizer, "bos_token_id", None) is None:
        return ""
    return bos


def render_chat(tokenizer: Any, system: str | None, user: str) -> ChatPrompt:
    """Use the tokenizer's chat template when it has one; otherwise a plain-text layout, which starts with
    the tokenizer's BOS token when it has one (`bos_prefix`).

    Raises ValueError if the template alters the user message (spans could not be mapped).
    """
    template = getattr(tokenizer, "chat_template", None)
    if template:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        offset = text.find(user)
        if offset < 0:
            raise ValueError("the tokenizer's chat template changes the user message; cannot locate document spans")
        data = [(offset, offset + len(user))]
        if system and (at := text.find(system)) >= 0:
            data.append((at, at + len(system)))
        return ChatPrompt(PromptText(text, template_control_spans(tokenizer, text, data)), offset)
    bos = bos_prefix(tokenizer)
    head = bos + (f"{system}\n\n" if system else "")
    return ChatPrompt(PromptText(f"{head}{user}\n\n", ((0, len(bos)),) if bos else ()), len(head))
