"""The QA prompt of the RAG evaluation: the selected passages, in selector order, then the question.

System message (every dataset but StrategyQA)::

    Answer the question using the documents below. Reply with the answer only: a short phrase
    (an entity, a date, a number, or yes/no), with no explanation and no full sentence.

StrategyQA's system message asks for ``yes`` or ``no`` only. The user message lists the passages
as ``Document 1 (Title: <title>): <text>`` lines in the order the selector returned them, then
``Question: <question>``. With no passage (the ``none`` method, closed book) the system message
drops the documents clause. The text is rendered with the generator's chat template
(`purecover.models.chat.render_chat`), so the same prompt goes to the HF and vLLM backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models.chat import render_chat
from ..records import CandidateDoc

__all__ = ["qa_messages", "render_qa_prompt"]

_ANSWER_ONLY = ("Reply with the answer only: a short phrase (an entity, a date, a number, or yes/no), "
                "with no explanation and no full sentence.")
_YES_NO_ONLY = "Reply with yes or no only, with no explanation."


def _system(dataset: str, with_documents: bool) -> str:
    head = "Answer the question using the documents below." if with_documents else "Answer the question."
    return f"{head} {_YES_NO_ONLY if dataset == 'strategyqa' else _ANSWER_ONLY}"


Doc = CandidateDoc | Mapping[str, Any]  # a candidate, or a plain ``{title, text}`` (the demo tokenizer's texts)


def _document_line(i: int, doc: Doc) -> str:
    raw_title, raw_text = (doc.get("title"), doc.get("text")) if isinstance(doc, Mapping) else (doc.title, doc.text)
    title = (raw_title or "").strip()
    text = " ".join((raw_text or "").split())
    return f"Document {i} (Title: {title}): {text}" if title else f"Document {i}: {text}"


def qa_messages(question: str, docs: Sequence[Doc], dataset: str) -> tuple[str, str]:
    """(system, user) messages for `question` with `docs` (candidates, or ``{title, text}``) in the given order."""
    lines = [_document_line(i, d) for i, d in enumerate(docs, start=1)]
    body = ("\n".join(lines) + "\n\n") if lines else ""
    return _system(dataset, bool(lines)), f"{body}Question: {question.strip()}"


def render_qa_prompt(tokenizer: Any, question: str, docs: Sequence[Doc], dataset: str) -> str:
    """The full prompt text (chat template applied, generation prompt appended)."""
    system, user = qa_messages(question, docs, dataset)
    return render_chat(tokenizer, system, user).text
