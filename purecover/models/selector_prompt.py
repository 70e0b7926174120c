"""The student's selection prompt: the question and the K1 candidates, each behind an identifier.

User message layout (rendered with the tokenizer's chat template when it has one)::

    <instructions>

    Question: <question>

    Passages:
    A: <title>
    <text>
    B: ...

    Question: <question>

The question comes first so that every passage is read knowing it (the model is causal) and
again at the end, next to the reply. Each passage body (title + text) is cut to
`max_passage_tokens` tokens; identifiers are never cut. The reply is the identifiers of the
selected passages, one per line, most useful first, then the end-of-turn token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from ..data.passage import doc_passage_text, passage_text
from ..records import CandidateDoc
from .chat import render_chat
from .identifiers import IdentifierScheme

__all__ = ["SELECTOR_INSTRUCTIONS", "SELECTOR_SYSTEM", "SelectorPrompt", "build_selector_prompt", "end_token_id",
           "prompt_template"]

SELECTOR_SYSTEM = "You select the passages that a reader needs to answer a question."
SELECTOR_INSTRUCTIONS = (
    "Below are passages, each introduced by an identifier. Reply with the identifiers of every passage "
    "needed to answer the question, one per line, most useful first, and nothing else."
)
LAYOUT_VERSION = "selector-layout-v1"


def prompt_template() -> dict[str, str]:
    """What defines the prompt (stored in selector_config.json so a deployed selector is self-describing)."""
    text = SELECTOR_SYSTEM + SELECTOR_INSTRUCTIONS + LAYOUT_VERSION
    return {"system": SELECTOR_SYSTEM, "instructions": SELECTOR_INSTRUCTIONS, "layout": LAYOUT_VERSION,
            "hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


@dataclass
class SelectorPrompt:
    """A rendered prompt: its text, token ids and how many passages it lists."""

    text: str
    input_ids: list[int]
    n_docs: int


def _truncate(tokenizer: Any, body: str, max_tokens: int) -> str:
    ids = tokenizer(body, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return body
    return tokenizer.decode(ids[:max_tokens]).strip()


def _passage(doc: CandidateDoc | Mapping[str, JsonValue]) -> str:
    """The passage a candidate is shown as (`purecover.data.passage`): a `CandidateDoc` or its JSON form."""
    if isinstance(doc, CandidateDoc):
        return passage_text(doc.title, doc.text)
    return doc_passage_text(doc)


def build_selector_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc | Mapping[str, JsonValue]],
                          scheme: IdentifierScheme, max_passage_tokens: int = 192) -> SelectorPrompt:
    """Render the prompt for `docs` (`CandidateDoc` records, or dicts with ``title``/``text`` as in
    candidates.jsonl); `scheme` must be checked for len(docs)."""
    if len(docs) > len(scheme.token_ids):
        raise ValueError(f"{len(docs)} passages but the identifier scheme is bound to {len(scheme.token_ids)}")
    lines = []
    for label, d in zip(scheme.labels, docs):
        body = _truncate(tokenizer, _passage(d), max_passage_tokens)
        lines.append(f"{label}: {body}")
    q = question.strip()
    user = f"{SELECTOR_INSTRUCTIONS}\n\nQuestion: {q}\n\nPassages:\n" + "\n".join(lines) + f"\n\nQuestion: {q}"
    text = render_chat(tokenizer, SELECTOR_SYSTEM, user).text
    return SelectorPrompt(text=text, input_ids=tokenizer(text, add_special_tokens=False)["input_ids"],
                          n_docs=len(docs))


def end_token_id(tokenizer: Any) -> int:
    """The token that ends the reply: the chat template's end of turn (``<|im_end|>`` for Qwen), else EOS."""
    for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if (isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id
                and tokenizer.convert_ids_to_tokens(tid) == token):
            return tid
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no end-of-turn or EOS token")
    return tokenizer.eos_token_id
