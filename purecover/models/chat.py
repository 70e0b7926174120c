"""Render a (system, user) exchange as the prompt text a causal LM continues, and map spans into it."""

from __future__ import annotations

from typing import Any

__all__ = ["ChatPrompt", "render_chat"]


class ChatPrompt:
    """A rendered prompt. `text` ends where the assistant's reply starts; `user_offset` is the
    character position of the user message inside `text` (to map spans of the message)."""

    def __init__(self, text: str, user_offset: int) -> None:
        self.text = text
        self.user_offset = user_offset

    def shift(self, span: tuple[int, int]) -> tuple[int, int]:
        """A character span of the user message, as a span of `text`."""
        return span[0] + self.user_offset, span[1] + self.user_offset


def render_chat(tokenizer: Any, system: str | None, user: str) -> ChatPrompt:
    """Use the tokenizer's chat template when it has one; otherwise a plain-text layout.

    Raises ValueError if the template alters the user message (spans could not be mapped).
    """
    template = getattr(tokenizer, "chat_template", None)
    if template:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        offset = text.find(user)
        if offset < 0:
            raise ValueError("the tokenizer's chat template changes the user message; cannot locate document spans")
        return ChatPrompt(text, offset)
    head = f"{system}\n\n" if system else ""
    return ChatPrompt(f"{head}{user}\n\n", len(head))
