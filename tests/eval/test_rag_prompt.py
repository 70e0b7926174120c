"""The QA prompt: passages in the given order, answer-only instruction, StrategyQA yes/no, closed book."""

from __future__ import annotations

from purecover.eval.rag_prompt import qa_messages, render_qa_prompt
from purecover.records import CandidateDoc

DOCS = [CandidateDoc(title="Tollbridge", text="The river Mirren\nflows through it."),
        CandidateDoc(title="", text="Untitled.")]


def test_documents_in_selector_order_then_question():
    system, user = qa_messages("Which river?", list(reversed(DOCS)), "hotpotqa")
    assert user == ("Document 1: Untitled.\nDocument 2 (Title: Tollbridge): The river Mirren flows through it.\n\n"
                    "Question: Which river?")
    assert "answer only" in system and "documents below" in system


def test_strategyqa_asks_for_yes_or_no():
    system, _ = qa_messages("Is water wet?", DOCS, "strategyqa")
    assert "yes or no only" in system and "answer only" not in system


def test_closed_book_has_no_documents():
    system, user = qa_messages("Which river?", [], "musique")
    assert user == "Question: Which river?"
    assert "documents" not in system


def test_plain_dicts_read_like_candidates():
    assert qa_messages("Which river?", [d.model_dump() for d in DOCS], "hotpotqa") == qa_messages(
        "Which river?", DOCS, "hotpotqa")


class _PlainTokenizer:
    chat_template = None


def test_rendering_without_a_chat_template_is_plain_text():
    text = render_qa_prompt(_PlainTokenizer(), "Which river?", DOCS[:1], "hotpotqa")
    system, user = qa_messages("Which river?", DOCS[:1], "hotpotqa")
    assert text == f"{system}\n\n{user}\n\n"
