"""The QA prompt of the RAG evaluation: the selected passages, in selector order, then the question.

The wording is ``purecover/prompts/rag_answer.txt`` (`purecover.prompts.load_prompt`), made of parts;
``eval.prompt_file`` replaces some or all of them (`RagPrompt.from_config`). Ours reads:

System message (every dataset but StrategyQA)::

    Answer the question using the documents below. Reply with the answer only: a short phrase
    (an entity, a date, a number, or yes/no), with no explanation and no full sentence.

StrategyQA's system message asks for ``yes`` or ``no`` only (the ``yes_no_reply`` part in place of
``reply``). The user message lists the passages as ``Document 1 (Title: <title>): <text>`` lines
(``document``; ``untitled_document`` for a passage without a title) in the order the selector
returned them, then ``Question: <question>`` (``user``). With no passage (the ``none`` method, closed
book) the ``closed_book_system`` and ``closed_book_user`` parts apply. A title is stripped and a
text's whitespace runs become single spaces before they fill a line. The text is rendered with the
generator's chat template (`purecover.models.chat.render_chat`), so the same prompt goes to the HF
and vLLM backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models.chat import render_chat
from ..prompts import Prompt, load_prompt
from ..records import CandidateDoc

__all__ = ["RagPrompt", "qa_messages", "render_qa_prompt"]

Doc = CandidateDoc | Mapping[str, Any]  # a candidate, or a plain ``{title, text}`` (the demo tokenizer's texts)


@dataclass(frozen=True)
class RagPrompt:
    """The answer prompt's wording (a loaded ``rag_answer`` prompt)."""

    prompt: Prompt

    @classmethod
    def default(cls) -> RagPrompt:
        """Ours: ``purecover/prompts/rag_answer.txt``."""
        return cls(load_prompt("rag_answer"))

    @classmethod
    def from_config(cls, cfg: Any) -> RagPrompt:
        """From ``eval.prompt_file`` (null: ours); a file that cannot be used is a TemplateError naming it."""
        path = getattr(cfg, "prompt_file", None)
        return cls(load_prompt("rag_answer", path)) if path else cls.default()

    @property
    def sha256(self) -> str:
        """sha256 (hex) of the wording used (every part)."""
        return self.prompt.sha256

    def record(self) -> dict[str, str]:
        """What an evaluation records about the wording: the file's name (rag_answer.txt: ours) and `sha256`."""
        return {"file": Path(self.prompt.source).name, "sha256": self.sha256}

    def system(self, dataset: str, with_documents: bool) -> str:
        reply = self.prompt.render("yes_no_reply" if dataset == "strategyqa" else "reply")
        return self.prompt.render("system" if with_documents else "closed_book_system", reply=reply)

    def document_line(self, i: int, doc: Doc) -> str:
        raw_title, raw_text = (doc.get("title"), doc.get("text")) if isinstance(doc, Mapping) else (doc.title, doc.text)
        title = (raw_title or "").strip()
        text = " ".join((raw_text or "").split())
        if title:
            return self.prompt.render("document", i=i, title=title, text=text)
        return self.prompt.render("untitled_document", i=i, text=text)

    def messages(self, question: str, docs: Sequence[Doc], dataset: str) -> tuple[str, str]:
        """(system, user) messages for `question` with `docs` in the given order."""
        lines = [self.document_line(i, d) for i, d in enumerate(docs, start=1)]
        q = question.strip()
        user = (self.prompt.render("user", documents="\n".join(lines), question=q) if lines
                else self.prompt.render("closed_book_user", question=q))
        return self.system(dataset, bool(lines)), user


def qa_messages(question: str, docs: Sequence[Doc], dataset: str,
                prompt: RagPrompt | None = None) -> tuple[str, str]:
    """(system, user) messages for `question` with `docs` (candidates, or ``{title, text}``) in the given order;
    `prompt`: the wording (ours when None)."""
    return (prompt or RagPrompt.default()).messages(question, docs, dataset)


def render_qa_prompt(tokenizer: Any, question: str, docs: Sequence[Doc], dataset: str,
                     prompt: RagPrompt | None = None) -> str:
    """The full prompt text (chat template applied, generation prompt appended)."""
    system, user = qa_messages(question, docs, dataset, prompt)
    return render_chat(tokenizer, system, user).text
