"""LANCER-style sub-questions and answerability ratings (DESIGN §3.6), parsing and a real run on a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from purecover.data.samples import sample_data_dir
from purecover.teacher.lancer import (
    digit_token_ids,
    expected_rating,
    parse_rating,
    parse_subquestions,
    rate_documents,
    rating_prompt,
    subquestion_prompt,
    write_subquestions,
)

QUESTION = "Which river flows through the town where Ada Brill was born?"
DOCS = [
    {"doc_id": "a", "title": "Ada Brill", "text": "Ada Brill was born in Tollbridge. She built clocks."},
    {"doc_id": "b", "title": "Tollbridge", "text": "Tollbridge is a market town. The river Mirren flows through it."},
    {"doc_id": "c", "title": "", "text": "Corven is a fishing village with a lighthouse."},
]


# ---------------------------------------------------------------------------- parse_rating


@pytest.mark.parametrize(
    ("reply", "rating"),
    [
        ("4", 4),
        ("0", 0),
        ("5", 5),
        ("Rating: 4/5", 4),
        ("I would rate this a 3. Maybe 5.", 3),
        ("  2\n", 2),
        ("5.", 5),
        ("7", 0),
        ("10", 0),
        ("-1", 0),
        ("no digits here", 0),
        ("", 0),
        ("3.5", 3),
        ("Score=1", 1),
    ],
)
def test_parse_rating(reply, rating):
    assert parse_rating(reply) == rating
    assert isinstance(parse_rating(reply), int)


# ---------------------------------------------------------------------------- expected_rating


def test_expected_rating_weights():
    assert expected_rating([0, 0, 0, 0, 0, 1.0], fallback=0) == pytest.approx(5.0)
    assert expected_rating([1.0, 0, 0, 0, 0, 0], fallback=3) == pytest.approx(0.0)
    assert expected_rating([0, 0.5, 0, 0.5, 0, 0], fallback=0) == pytest.approx(2.0)
    p = [0.1, 0.2, 0.3, 0.2, 0.1, 0.1]
    assert expected_rating(p, fallback=0) == pytest.approx(sum(r * x for r, x in enumerate(p)))


def test_expected_rating_renormalises():
    # the six digits carry only part of the next-token mass: divide by their total
    assert expected_rating([0, 0.1, 0, 0, 0, 0.1], fallback=0) == pytest.approx(3.0)
    p = [0.01, 0.02, 0.0, 0.03, 0.0, 0.04]
    assert expected_rating(p, fallback=0) == pytest.approx((0.02 + 0.09 + 0.2) / 0.1)
    assert expected_rating([x * 1e-6 for x in p], fallback=0) == pytest.approx((0.02 + 0.09 + 0.2) / 0.1)


def test_expected_rating_all_zero_uses_fallback():
    assert expected_rating([0.0] * 6, fallback=4) == 4.0
    assert isinstance(expected_rating([0.0] * 6, fallback=4), float)
    assert expected_rating([0.0] * 6, fallback=0.0) == 0.0


# ---------------------------------------------------------------------------- parse_subquestions


def test_parse_subquestions_strips_numbering_and_bullets():
    reply = "1. Where was Ada Brill born?\n2) Which river flows through Tollbridge?"
    subs, reason = parse_subquestions(reply, QUESTION, 2)
    assert subs == ["Where was Ada Brill born?", "Which river flows through Tollbridge?"]
    assert reason is None


@pytest.mark.parametrize(
    "line",
    ["1. What is X?", "(1) What is X?", "1) What is X?", "1: What is X?", "- What is X?", "* What is X?",
     "• What is X?", "Q1: What is X?", "q1. What is X?", "Sub-question 1: What is X?", "Subquestion: What is X?",
     "   3.   What is X?   "],
)
def test_parse_subquestions_bullet_styles(line):
    subs, reason = parse_subquestions(line, QUESTION, 1)
    assert subs == ["What is X?"]
    assert reason is None


def test_parse_subquestions_skips_blank_lines_and_keeps_plain_lines():
    subs, reason = parse_subquestions("\n\nWhere was she born?\n   \n\n2. What flows there?\n", QUESTION, 2)
    assert subs == ["Where was she born?", "What flows there?"]
    assert reason is None


def test_parse_subquestions_pads_with_the_question():
    subs, reason = parse_subquestions("1. Where was Ada Brill born?", "  " + QUESTION + " ", 3)
    assert subs == ["Where was Ada Brill born?", QUESTION, QUESTION]
    assert reason is not None and "1 of 3" in reason and "padded" in reason


def test_parse_subquestions_empty_reply():
    subs, reason = parse_subquestions("", QUESTION, 2)
    assert subs == [QUESTION, QUESTION]
    assert "0 of 2" in reason


def test_parse_subquestions_truncates_to_n():
    reply = "\n".join(f"{i}. sub {i}?" for i in range(1, 6))
    subs, reason = parse_subquestions(reply, QUESTION, 2)
    assert subs == ["sub 1?", "sub 2?"]
    assert reason is None


# ---------------------------------------------------------------------------- rate_documents (recording backend)


class RecordingBackend:
    """Replies from a function of the prompt; records what it was asked."""

    def __init__(self, reply, probs=None):
        self.reply = reply
        self.probs = probs
        self.generate_calls: list[tuple[list[str], int]] = []
        self.prob_calls: list[tuple[list[str], list[int]]] = []

    def generate(self, prompts, max_new_tokens):
        self.generate_calls.append((list(prompts), max_new_tokens))
        return [self.reply(p) for p in prompts]

    def token_probabilities(self, prompts, token_ids):
        self.prob_calls.append((list(prompts), list(token_ids)))
        return [self.probs(p) for p in prompts]

    def close(self):
        pass


class PlainTokenizer:
    """No chat template (plain layout); digits are single 'tokens' with ids 100..105."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [100 + int(c) if c.isdigit() else ord(c) for c in text]}


def test_rate_documents_layout_is_documents_by_subquestions():
    subs = ["Where was Ada Brill born?", "Which river flows through Tollbridge?"]

    def reply(prompt):  # rating = doc index + 3 * sub index, unique per pair
        d = next(i for i, doc in enumerate(DOCS) if doc["text"] in prompt)
        s = next(j for j, sq in enumerate(subs) if sq in prompt)
        return f"{d + 3 * s} because"

    backend = RecordingBackend(reply)
    ratings = rate_documents(backend, PlainTokenizer(), subs, DOCS)
    assert ratings == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert len(backend.generate_calls) == 1
    prompts, max_new = backend.generate_calls[0]
    assert max_new <= 8  # a rating is a few tokens
    assert len(prompts) == len(DOCS) * len(subs)
    assert prompts[1] == rating_prompt(PlainTokenizer(), subs[1], DOCS[0])
    assert backend.prob_calls == []


def test_rate_documents_expected_uses_digit_probabilities():
    subs = ["s1?", "s2?"]
    probs = {0: [0, 0, 1.0, 0, 0, 0], 1: [0.0] * 6, 2: [0, 0, 0, 0, 0.2, 0.2]}

    def doc_index(prompt):
        return next(i for i, doc in enumerate(DOCS) if doc["text"] in prompt)

    backend = RecordingBackend(lambda p: "3", lambda p: probs[doc_index(p)])
    ratings = rate_documents(backend, PlainTokenizer(), subs, DOCS, expected=True)
    # doc 0: all mass on "2"; doc 1: no mass → fallback to the parsed 3; doc 2: half 4, half 5
    assert ratings == [[2.0, 2.0], [3.0, 3.0], [4.5, 4.5]]
    assert backend.prob_calls[0][1] == [100, 101, 102, 103, 104, 105]
    assert backend.prob_calls[0][0] == backend.generate_calls[0][0]


def test_digit_token_ids_rejects_multi_token_digits():
    class Splitting(PlainTokenizer):
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1, 2]}

    with pytest.raises(ValueError, match="single token"):
        digit_token_ids(Splitting())


def test_write_subquestions_with_recording_backend():
    backend = RecordingBackend(lambda p: "1. first?\n2. second?\n3. third?" if "Alpha" in p else "only one?")
    out = write_subquestions(backend, PlainTokenizer(), ["Alpha?", "Beta?"], n=2, max_new_tokens=33)
    assert out == [(["first?", "second?"], None), (["only one?", "Beta?"], "1 of 2 sub-questions parsed; padded "
                                                                           "with the question")]
    prompts, max_new = backend.generate_calls[0]
    assert max_new == 33
    assert prompts == [subquestion_prompt(PlainTokenizer(), q, 2) for q in ["Alpha?", "Beta?"]]
    assert "Write 2 sub-questions" in prompts[0] and "Alpha?" in prompts[0]


# ---------------------------------------------------------------------------- real tokenizer and tiny model


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    root = sample_data_dir()
    if root is None or not (root / "qwen2_tokenizer").is_dir():
        pytest.skip("Qwen2 tokenizer not found: expected <sample data>/qwen2_tokenizer "
                    "(../shared/data beside the repo, or PURECOVER_SAMPLE_DATA)")
    return root / "qwen2_tokenizer"


@pytest.fixture(scope="module")
def qwen_tok(tokenizer_dir):
    from purecover.models.loading import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))


@pytest.fixture(scope="module")
def tiny(tokenizer_dir, qwen_tok, tmp_path_factory):
    from purecover.models.loading import load_causal_lm
    from purecover.models.tiny import build_tiny_model
    from purecover.teacher.backends import HFGenerator

    out = build_tiny_model(tmp_path_factory.mktemp("tiny_lancer"), tokenizer_dir)
    model = load_causal_lm(str(out), dtype="float32", device="cpu")
    return HFGenerator(model, qwen_tok, batch_size=4), qwen_tok


def test_digit_token_ids_qwen2(qwen_tok):
    ids = digit_token_ids(qwen_tok)
    assert len(ids) == 6 and len(set(ids)) == 6
    assert [qwen_tok.decode([i]) for i in ids] == list("012345")
    assert ids == [qwen_tok.convert_tokens_to_ids(d) for d in "012345"]


def test_write_subquestions_tiny_model(tiny):
    backend, tok = tiny
    questions = [QUESTION, "Is Corven a fishing village?"]
    out = write_subquestions(backend, tok, questions, n=2, max_new_tokens=8)
    assert len(out) == 2
    for (subs, reason), q in zip(out, questions):
        assert len(subs) == 2
        assert all(isinstance(s, str) and s.strip() for s in subs)
        if reason is not None:
            assert "padded" in reason and subs[-1] == q


def test_rate_documents_tiny_model(tiny):
    backend, tok = tiny
    subs = ["Where was Ada Brill born?", "Which river flows through Tollbridge?"]
    docs = DOCS[1:]  # two documents: one with a title, one without
    ratings = rate_documents(backend, tok, subs, docs)
    assert len(ratings) == len(docs)
    assert all(len(row) == len(subs) for row in ratings)
    assert all(r in {0.0, 1.0, 2.0, 3.0, 4.0, 5.0} for row in ratings for r in row)

    expected = rate_documents(backend, tok, subs, docs, expected=True)
    assert len(expected) == len(docs) and all(len(row) == len(subs) for row in expected)
    flat = [r for row in expected for r in row]
    assert all(isinstance(r, float) and 0.0 <= r <= 5.0 for r in flat)
    # the softmax gives every digit some mass, so the expected ratings are not the parsed integers
    assert any(r != int(r) for r in flat)
    # and they are exactly the expected rating of the backend's digit probabilities
    prompts = [rating_prompt(tok, sq, d) for d in docs for sq in subs]
    probs = backend.token_probabilities(prompts, digit_token_ids(tok))
    want = [expected_rating(p, fallback=-1.0) for p in probs]
    assert flat == pytest.approx(want, rel=1e-5)
