"""Prompt layout and span mapping: spans decode to exactly the document, step and answer texts."""

from __future__ import annotations

import itertools

import pytest

from purecover.models.generation import Generated
from purecover.records import CandidateDoc
from purecover.teacher.prompts import (
    ReasoningPrompt,
    build_reasoning_prompt,
    build_teacher_sequence,
    canonical_reply,
    char_span_to_tokens,
    reasoning_replies,
    template_key,
)

DOCS = [
    CandidateDoc(doc_id="a", title="Tollbridge", text="Tollbridge is a market town on the Mirren."),
    CandidateDoc(doc_id="b", title="", text="Ada Brill was born in Tollbridge in 1841."),
    CandidateDoc(doc_id="c", title="Café Ölm", text="A café with ünïcode — and “quotes”."),
]


@pytest.fixture(scope="module")
def tok(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


def test_prompt_uses_chat_template_and_lists_documents(tok):
    prompt, spans = build_reasoning_prompt(tok, "Which river flows through Ada Brill's birthplace?", DOCS)
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")
    assert "[1] Tollbridge\n" in prompt and "[2] Ada Brill" in prompt and "[Step N]:" in prompt
    assert [prompt[a:b] for a, b in spans] == [
        "Tollbridge\nTollbridge is a market town on the Mirren.", "Ada Brill was born in Tollbridge in 1841.",
        "Café Ölm\nA café with ünïcode — and “quotes”."]


def test_plain_prompt_without_chat_template(tok):
    tok_plain = type(tok).from_pretrained(tok.name_or_path)
    tok_plain.chat_template = None
    prompt, spans = build_reasoning_prompt(tok_plain, "Q?", DOCS[:1])
    assert not prompt.startswith("<|im_start|>") and prompt[spans[0][0] : spans[0][1]].startswith("Tollbridge\n")
    assert template_key(tok_plain) != template_key(tok)


def test_canonical_reply_spans():
    text, steps, answer = canonical_reply(["First fact.", "Second fact."], "Mirren")
    assert text == "[Step 1]: First fact.\n[Step 2]: Second fact.\n[Answer]: Mirren"
    assert [text[a:b] for a, b in steps] == ["First fact.", "Second fact."]
    assert text[answer[0] : answer[1]] == "Mirren"


def test_token_spans_decode_to_the_segments(tok):
    prompt, spans = build_reasoning_prompt(tok, "Which river?", DOCS)
    seq = build_teacher_sequence(tok, prompt, spans, ["Ada Brill was born in Tollbridge.", "The Mirren flows there."],
                                 "the Mirren")
    assert seq.input_ids == tok(seq.text, add_special_tokens=False)["input_ids"]

    def decode(span):
        return tok.decode(seq.input_ids[span[0] : span[1]])

    assert decode(seq.doc_spans[0]).strip() == "Tollbridge\nTollbridge is a market town on the Mirren."
    assert decode(seq.doc_spans[2]).strip() == "Café Ölm\nA café with ünïcode — and “quotes”."
    assert [decode(s).strip() for s in seq.step_spans] == ["Ada Brill was born in Tollbridge.",
                                                           "The Mirren flows there."]
    assert decode(seq.answer_span).strip() == "the Mirren"
    # The identifier labels are outside the document spans.
    assert "[1]" not in decode(seq.doc_spans[0]) and "[Step" not in decode(seq.step_spans[0])
    # Spans are ordered and disjoint.
    flat = [*seq.doc_spans, *seq.step_spans, seq.answer_span]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(flat))


def test_char_span_to_tokens_edges():
    offsets = [(0, 3), (3, 4), (4, 9), (9, 9), (9, 12)]
    assert char_span_to_tokens(offsets, (3, 9)) == (1, 3)
    assert char_span_to_tokens(offsets, (2, 5)) == (0, 3)  # overlapping tokens are included
    assert char_span_to_tokens(offsets, (9, 9)) == (3, 3)  # empty span: empty token range
    with pytest.raises(ValueError, match="covers no token"):
        char_span_to_tokens(offsets, (12, 15))


def test_format_example_is_added_after_the_prompt_and_recorded(tok):
    """teacher.format_example: our worked example closes the user message (after the question), the document
    spans stay where they were, and the recorded wording (file name, hash) says it was used."""
    from types import SimpleNamespace

    plain = ReasoningPrompt.from_config(SimpleNamespace(format_example=False))
    example = ReasoningPrompt.from_config(SimpleNamespace(format_example=True))
    p0, s0 = build_reasoning_prompt(tok, "Q?", DOCS, plain)
    p1, s1 = build_reasoning_prompt(tok, "Q?", DOCS, example)
    assert s1 == s0 and p1[: s1[-1][1]] == p0[: s0[-1][1]]
    user = p1[p1.index("Question: Q?"):]
    assert "[Step 1]: The Silent Harbour was written by Mara Olen." in user and "[Answer]: Norland" in user
    assert "Silent Harbour" not in p0
    assert example.record().file == "reasoning.txt + reasoning_example.txt" and plain.record().file == "reasoning.txt"
    assert example.sha256 != plain.sha256


class _Recording:
    """A backend that replies with fixed texts and keeps the stop predicate it was given."""

    def __init__(self, texts):
        self.texts, self.stop_when = texts, None

    def generate_detailed(self, prompts, max_new_tokens, stop_when=None):
        self.stop_when = stop_when
        return [Generated(t, False) for t in self.texts[: len(prompts)]]


def test_reasoning_replies_keep_the_prefix_and_stop_at_a_closed_answer(tok):
    from types import SimpleNamespace

    backend = _Recording([" Ada was born in Tollbridge.\n[Answer]: Mirren\n"])
    record = SimpleNamespace(question="Which river?", docs=DOCS)
    (reply,) = reasoning_replies(backend, tok, [record], ReasoningPrompt.default(), "[Step 1]:", 64)
    assert reply == Generated("[Step 1]: Ada was born in Tollbridge.\n[Answer]: Mirren\n", False)
    stop = backend.stop_when  # judged on prefix + text: the prefix's step marker counts
    assert stop(" Ada was born in Tollbridge.\n[Answer]: Mirren\n")
    assert not stop(" Ada was born in Tollbridge.\n[Answer]: Mir")  # the answer line is still growing
    assert not stop(" Ada was born in Tollbridge.\n[Answer]:\n")  # the answer comes on the next line
    assert stop(" Ada was born in Tollbridge.\n[Answer]:\nMirren\n")
    assert stop(" Ada was born in Tollbridge. [Answer]: Mirren\n")
    assert not stop(" Answer the question step by step.\n")
