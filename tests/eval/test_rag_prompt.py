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


def test_eval_prompt_file_replaces_the_parts_it_holds(tmp_path):
    from purecover.config import load_recipe
    from purecover.eval.rag_prompt import RagPrompt

    path = tmp_path / "answer.txt"
    path.write_text("[[reply]]\nOne word.\n\n[[document]]\n<{i}> {title} | {text}\n\n[[user]]\n"
                    "Q: {question}\n{documents}\n", encoding="utf-8")
    prompt = RagPrompt.from_config(load_recipe(None, [f"eval.prompt_file={path}"]).eval)
    system, user = qa_messages("Which river?", DOCS, "hotpotqa", prompt)
    assert system == "Answer the question using the documents below. One word."
    assert user == "Q: Which river?\n<1> Tollbridge | The river Mirren flows through it.\nDocument 2: Untitled."
    assert qa_messages("Is it?", DOCS, "strategyqa", prompt)[0].endswith("Reply with yes or no only, with no "
                                                                          "explanation.")  # ours kept
    assert qa_messages("Which river?", [], "hotpotqa", prompt) == ("Answer the question. One word.",
                                                                  "Question: Which river?")
    assert prompt.record() == {"file": "answer.txt", "sha256": prompt.prompt.sha256}
    default = RagPrompt.from_config(load_recipe(None, []).eval)
    assert default == RagPrompt.default() and default.record()["file"] == "rag_answer.txt"
    assert default.sha256 != prompt.sha256
    assert render_qa_prompt(_PlainTokenizer(), "Which river?", DOCS, "hotpotqa", prompt) == f"{system}\n\n{user}\n\n"
