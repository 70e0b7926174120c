"""The teacher's goal-oriented reasoning prompt and the token spans the capture needs.

The prompt lists the candidates as ``[1] Title`` + newline + text (numbers: the teacher is not
bound to single-token identifiers), then the question, and asks for at most five lines
``[Step N]: ...`` followed by ``[Answer]: ...``. After parsing, the reply is rewritten in
canonical form (`canonical_reply`) and the capture runs on prompt + canonical reply, so every
span is known by construction and mapped to tokens through the tokenizer's offsets.

Spans (DESIGN §3.1): a document span covers its title and text (not the ``[k]`` label); a
step span the text after ``[Step n]: ``; the answer span the text after ``[Answer]: ``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..data.passage import doc_passage_text
from ..models.chat import render_chat

__all__ = [
    "REASONING_INSTRUCTIONS",
    "SYSTEM_PROMPT",
    "TeacherSequence",
    "build_reasoning_prompt",
    "build_teacher_sequence",
    "canonical_reply",
    "char_span_to_tokens",
    "document_body",
    "template_key",
]

SYSTEM_PROMPT = "You are a careful research assistant who answers multi-hop questions from documents."

REASONING_INSTRUCTIONS = (
    "Answer the question using the documents. Work toward the answer step by step: write at most 5 "
    "short reasoning steps, one per line, each starting with \"[Step N]:\" and stating one fact from the "
    "documents (or one inference) that brings you closer to the answer. Then write one line starting "
    "with \"[Answer]:\" followed by the final answer only, as a short phrase (yes or no for yes/no questions)."
)


def template_key(tokenizer: Any = None) -> str:
    """Hash of everything that shapes the prompt layout (instructions, layout, chat template)."""
    h = hashlib.sha256()
    h.update(SYSTEM_PROMPT.encode())
    h.update(REASONING_INSTRUCTIONS.encode())
    h.update(b"layout-v1")
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    h.update((template or "plain").encode() if isinstance(template, str) else str(template).encode())
    return h.hexdigest()[:16]


def document_body(doc: dict[str, Any]) -> str:
    """A document as the teacher's prompts show it: title and text on two lines (the text alone without a title)."""
    return doc_passage_text(doc)


def _user_message(question: str, docs: Sequence[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """The user message and each document's (title + text) character span inside it."""
    parts = [REASONING_INSTRUCTIONS, "\n\nDocuments:\n"]
    pos = sum(len(p) for p in parts)
    spans = []
    for k, d in enumerate(docs, start=1):
        label = f"[{k}] "
        body = document_body(d)
        start = pos + len(label)
        spans.append((start, start + len(body)))
        chunk = f"{label}{body}\n"
        parts.append(chunk)
        pos += len(chunk)
    parts.append(f"\nQuestion: {question.strip()}")
    return "".join(parts), spans


def build_reasoning_prompt(tokenizer: Any, question: str, docs: Sequence[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered prompt (ending where the reply starts) and the document character spans in it."""
    user, spans = _user_message(question, docs)
    chat = render_chat(tokenizer, SYSTEM_PROMPT, user)
    return chat.text, [chat.shift(s) for s in spans]


def canonical_reply(steps: Sequence[str], answer: str) -> tuple[str, list[tuple[int, int]], tuple[int, int]]:
    """``[Step n]: ...`` lines and the ``[Answer]: ...`` line, with the step and answer character spans."""
    text = ""
    step_spans = []
    for n, step in enumerate(steps, start=1):
        label = f"[Step {n}]: "
        start = len(text) + len(label)
        text += label + step + "\n"
        step_spans.append((start, start + len(step)))
    label = "[Answer]: "
    start = len(text) + len(label)
    text += label + answer
    return text, step_spans, (start, start + len(answer))


def char_span_to_tokens(offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> tuple[int, int]:
    """Token range ``[first, last + 1)`` of the tokens overlapping the character span (empty → (i, i))."""
    a, b = span
    if b <= a:
        for i, (s, _) in enumerate(offsets):
            if s >= a:
                return i, i
        return len(offsets), len(offsets)
    first = last = None
    for i, (s, e) in enumerate(offsets):
        if e > a and s < b and e > s:
            if first is None:
                first = i
            last = i
    if first is None or last is None:
        raise ValueError(f"character span {span} covers no token")
    return first, last + 1


@dataclass
class TeacherSequence:
    """Prompt + canonical reply as token ids, with token spans (positions in `input_ids`)."""

    input_ids: list[int]
    doc_spans: list[tuple[int, int]]
    step_spans: list[tuple[int, int]]
    answer_span: tuple[int, int]
    text: str


def build_teacher_sequence(tokenizer: Any, prompt: str, doc_char_spans: Sequence[tuple[int, int]],
                           steps: Sequence[str], answer: str) -> TeacherSequence:
    """Tokenise prompt + canonical reply once and map every span through the offsets."""
    reply, step_chars, answer_chars = canonical_reply(steps, answer)
    text = prompt + reply
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    base = len(prompt)
    return TeacherSequence(
        input_ids=list(enc["input_ids"]),
        doc_spans=[char_span_to_tokens(offsets, s) for s in doc_char_spans],
        step_spans=[char_span_to_tokens(offsets, (a + base, b + base)) for a, b in step_chars],
        answer_span=char_span_to_tokens(offsets, (answer_chars[0] + base, answer_chars[1] + base)),
        text=text,
    )
