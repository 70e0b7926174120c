"""Parsing the teacher's reply into steps and an answer, with the documented fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purecover.teacher.parsing import ParsedReply, parse_reply

Q = "Which river flows through the town where Ada Brill was born?"


# ---------------------------------------------------------------------------- canonical form


def test_canonical_reply():
    reply = "[Step 1]: Ada Brill was born in Tollbridge.\n[Step 2]: The Mirren flows through Tollbridge.\n[Answer]: Mirren"
    r = parse_reply(reply, Q)
    assert isinstance(r, ParsedReply)
    assert r.steps == ["Ada Brill was born in Tollbridge.", "The Mirren flows through Tollbridge."]
    assert r.answer == "Mirren"
    assert r.status == "ok"
    assert r.reason is None


def test_step_text_keeps_inner_punctuation_and_collapses_spaces():
    r = parse_reply("[Step 1]:   A:  b - c.   \n[Answer]:  x   y ", Q)
    assert r.steps == ["A: b - c."]
    assert r.answer == "x y"


def test_step_numbers_need_not_be_consecutive_or_single_digit():
    r = parse_reply("Step 10: ten\nStep 3: three\nAnswer: x", Q)
    assert r.steps == ["ten", "three"]
    assert r.status == "ok"


# ---------------------------------------------------------------------------- tolerant variants


@pytest.mark.parametrize(
    "reply",
    [
        "[step 1]: one\n[STEP 2]: two\n[answer]: x",
        "Step 1: one\nStep 2: two\nAnswer: x",
        "**Step 1:** one\n**Step 2:** two\n**Answer:** x",
        "**Step 1.** one\n**Step 2.** two\n**Answer:** x",
        "Step 1 - one\nStep 2 - two\nAnswer - x",
        "step 1. one\nstep 2. two\nanswer: x",
        "Step 1) one\nStep 2) two\nAnswer: x",
        "[Step 1] one\n[Step 2] two\n[Answer]: x",
        "  [Step 1]:  one\n\t[Step 2]:two\n   [Answer] : x",
        "Step 1 : one\nStep 2 :- two\n(Answer) - x",
        "step1: one\nstep2: two\nanswer: x",
        "Step 1 – one\nStep 2 — two\nAnswer — x",
        "### Step 1: one\n### Step 2: two\n### Answer: x",
    ],
)
def test_marker_variants(reply):
    r = parse_reply(reply, Q)
    assert r.steps == ["one", "two"]
    assert r.answer == "x"
    assert (r.status, r.reason) == ("ok", None)


def test_mixed_marker_styles_in_one_reply():
    r = parse_reply("**Step 1:** first\nStep 2 - second\nstep 3. third\n[Answer]: z", Q)
    assert r.steps == ["first", "second", "third"]
    assert r.answer == "z"
    assert r.status == "ok"


@pytest.mark.parametrize("marker", ["(Step {n}) - ", "[Step {n}] : ", "[Step {n}] - "])
def test_bracketed_marker_followed_by_spaced_separator(marker):
    reply = marker.format(n=1) + "one\n" + marker.format(n=2) + "two\nAnswer: x"
    r = parse_reply(reply, Q)
    assert r.steps == ["one", "two"]


def test_multi_line_steps_are_joined():
    reply = "[Step 1]: Ada Brill\nwas born in\n\n   Tollbridge.\n[Step 2]: The Mirren\nflows there.\n[Answer]: Mirren"
    r = parse_reply(reply, Q)
    assert r.steps == ["Ada Brill was born in Tollbridge.", "The Mirren flows there."]
    assert r.answer == "Mirren"
    assert r.status == "ok"


def test_preamble_is_ignored():
    reply = "Sure! Let me think about this carefully.\nHere is my reasoning:\n\n[Step 1]: one\n[Answer]: x"
    r = parse_reply(reply, Q)
    assert r.steps == ["one"]
    assert r.answer == "x"
    assert r.status == "ok"


def test_text_after_the_answer_is_ignored():
    reply = "[Step 1]: one\n[Answer]: x\nI hope this helps!\n[Step 2]: not a step\n[Answer]: y"
    r = parse_reply(reply, Q)
    assert r.steps == ["one"]
    assert r.answer == "x"
    assert r.status == "ok"


@pytest.mark.parametrize("marker", ["Final answer:", "Final Answer:", "**Final answer:**", "[Answer]:", "Answer:"])
def test_answer_on_the_next_non_empty_line(marker):
    reply = f"[Step 1]: one\n{marker}\n\n   Paris  \nmore text"
    r = parse_reply(reply, Q)
    assert r.steps == ["one"]
    assert r.answer == "Paris"
    assert r.status == "ok"


def test_final_answer_inline():
    r = parse_reply("Step 1: one\nFinal answer: Paris, France", Q)
    assert r.answer == "Paris, France"
    assert r.steps == ["one"]


def test_answer_marker_ends_the_last_multiline_step():
    r = parse_reply("[Step 1]: one\ncontinued\nAnswer: x", Q)
    assert r.steps == ["one continued"]
    assert r.answer == "x"


def test_words_starting_like_markers_are_not_markers():
    # "Steps" and "Answers" are not markers: no step lines → sentence fallback
    r = parse_reply("Steps are needed here. Answers come later.", Q)
    assert r.status == "fallback"
    assert r.steps == ["Steps are needed here.", "Answers come later."]


# ---------------------------------------------------------------------------- fallbacks


def test_an_initial_does_not_end_a_sentence():
    r = parse_reply("Robert W. McElroy writes for America. It is a weekly.", Q)
    assert r.steps == ["Robert W. McElroy writes for America.", "It is a weekly."]


def test_no_step_markers_uses_sentences():
    reply = "Ada Brill was born in Tollbridge. The Mirren flows through it!\nSo the river is the Mirren.\n[Answer]: Mirren"
    r = parse_reply(reply, Q)
    assert r.steps == ["Ada Brill was born in Tollbridge.", "The Mirren flows through it!", "So the river is the Mirren."]
    assert r.answer == "Mirren"
    assert r.status == "fallback"
    assert "no [Step N] lines" in r.reason
    assert "3 sentence" in r.reason
    assert "no [Answer]" not in r.reason


def test_sentence_fallback_keeps_at_most_max_steps():
    reply = " ".join(f"Sentence number {i}." for i in range(10)) + "\nAnswer: x"
    r = parse_reply(reply, Q, max_steps=3)
    assert r.steps == ["Sentence number 0.", "Sentence number 1.", "Sentence number 2."]
    assert r.status == "fallback"


def test_no_answer_line_takes_the_last_step_as_the_answer():
    """Steps without an [Answer] line are the reply's own steps (status ok); the rule used is in the reason."""
    r = parse_reply("[Step 1]: one\n[Step 2]: the Mirren", Q)
    assert r.steps == ["one", "the Mirren"]
    assert r.answer == "the Mirren"
    assert (r.status, r.code, r.form, r.usable) == ("ok", None, "steps", True)
    assert r.reason is not None and "no [Answer]" in r.reason
    assert "no [Step N]" not in r.reason


def test_empty_answer_marker_at_end_takes_the_last_step():
    r = parse_reply("[Step 1]: one\n[Answer]:\n\n", Q)
    assert r.answer == "one"
    assert r.status == "ok"
    assert "no [Answer]" in r.reason


def test_no_markers_at_all_uses_both_fallbacks():
    r = parse_reply("The sky is blue. Grass is green.", Q)
    assert r.steps == ["The sky is blue.", "Grass is green."]
    assert r.answer == "Grass is green."
    assert (r.status, r.code, r.form, r.usable) == ("fallback", "no_steps", "sentences", False)
    assert "no [Step N] lines" in r.reason and "no [Answer]" in r.reason


@pytest.mark.parametrize("reply", ["", "   ", "\n\n\t\n", "***"])
def test_empty_reply_uses_the_question(reply):
    r = parse_reply(reply, "  What is   the capital?  ")
    assert r.steps == ["What is the capital?"]
    assert r.answer == ""
    assert r.status == "fallback"
    assert "empty reply" in r.reason


def test_answer_only_reply_uses_the_question_but_keeps_the_answer():
    r = parse_reply("[Answer]: Paris", Q)
    assert r.steps == [Q]
    assert r.answer == "Paris"
    assert r.status == "fallback"
    assert "question" in r.reason


def test_empty_step_markers_are_dropped():
    r = parse_reply("[Step 1]:\n[Step 2]: two\n[Step 3]: **\n[Answer]: x", Q)
    assert r.steps == ["two"]
    assert r.status == "ok"


# ---------------------------------------------------------------------------- max_steps


def test_more_than_max_steps_keeps_the_first():
    reply = "\n".join(f"[Step {i}]: s{i}" for i in range(1, 9)) + "\n[Answer]: a"
    r = parse_reply(reply, Q, max_steps=5)
    assert r.steps == ["s1", "s2", "s3", "s4", "s5"]
    assert r.answer == "a"
    assert r.status == "ok"
    assert r.reason is not None and "8 steps" in r.reason and "5" in r.reason


def test_exactly_max_steps_has_no_reason():
    reply = "\n".join(f"[Step {i}]: s{i}" for i in range(1, 4)) + "\n[Answer]: a"
    r = parse_reply(reply, Q, max_steps=3)
    assert r.steps == ["s1", "s2", "s3"]
    assert (r.status, r.reason) == ("ok", None)


def test_too_many_steps_and_no_answer():
    reply = "\n".join(f"[Step {i}]: s{i}" for i in range(1, 5))
    r = parse_reply(reply, Q, max_steps=2)
    assert r.steps == ["s1", "s2"]
    assert r.answer == "s2"  # the last *kept* step
    assert r.status == "ok"
    assert "4 steps" in r.reason and "no [Answer]" in r.reason


# ---------------------------------------------------------------------------- tolerant forms (small teachers)


def test_numbered_list_is_read_as_steps():
    reply = "Let me think.\n1. Ada Brill was born in Tollbridge.\n2) The Mirren flows through Tollbridge.\n[Answer]: Mirren"
    r = parse_reply(reply, Q)
    assert r.steps == ["Ada Brill was born in Tollbridge.", "The Mirren flows through Tollbridge."]
    assert (r.answer, r.status, r.code, r.form, r.usable) == ("Mirren", "ok", None, "numbered", True)
    assert "numbered list" in r.reason


def test_code_fences_and_numbered_step_markers():
    reply = "```\n1. **Step 1:** Ada was born in Tollbridge.\n2. **Step 2:** The Mirren flows there.\n```\nAnswer: Mirren"
    r = parse_reply(reply, Q)
    assert r.steps == ["Ada was born in Tollbridge.", "The Mirren flows there."]
    assert (r.answer, r.form, r.status, r.reason) == ("Mirren", "steps", "ok", None)


def test_numbered_lines_are_not_steps_when_step_markers_exist():
    r = parse_reply("1. a preamble line\n[Step 1]: Ada was born in Tollbridge.\n[Answer]: Mirren", Q)
    assert r.steps == ["Ada was born in Tollbridge."]
    assert r.form == "steps"


def test_answer_marker_at_the_end_of_a_step_line():
    r = parse_reply("[Step 1]: Ada was born in Tollbridge.\n[Step 2]: The Mirren flows there. [Answer]: Mirren\nMore.",
                    Q)
    assert r.steps == ["Ada was born in Tollbridge.", "The Mirren flows there."]
    assert (r.answer, r.status, r.reason) == ("Mirren", "ok", None)


def test_answer_clause_inside_the_last_step():
    r = parse_reply("[Step 1]: Ada was born in Tollbridge.\n[Step 2]: So the answer is the Mirren.", Q)
    assert r.answer == "the Mirren"
    assert r.steps[-1] == "So the answer is the Mirren."  # the step keeps its text
    assert r.status == "ok" and "'the answer is' clause" in r.reason


def test_unclosed_reply_drops_its_cut_off_step():
    reply = "[Step 1]: Ada was born in Tollbridge.\n[Step 2]: The Mirren flows through Toll"
    r = parse_reply(reply, Q, finished=False)
    assert r.steps == ["Ada was born in Tollbridge."]
    assert r.answer == "Ada was born in Tollbridge."
    assert (r.status, r.code, r.usable) == ("fallback", "unclosed", True)
    assert "token limit" in r.reason
    # the same text, finished by itself: both steps, no fallback
    done = parse_reply(reply, Q, finished=True)
    assert len(done.steps) == 2 and done.status == "ok"


def test_unclosed_reply_with_an_answer_line_is_not_a_fallback():
    r = parse_reply("[Step 1]: Ada was born in Tollbridge.\n[Answer]: Mirren", Q, finished=False)
    assert (r.status, r.code) == ("ok", None)


def test_unclosed_single_step_is_kept():
    r = parse_reply("[Step 1]: Ada was born in Toll", Q, finished=False)
    assert r.steps == ["Ada was born in Toll"]
    assert r.code == "unclosed"


def test_a_copied_worked_example_falls_back_to_the_question():
    example = "An example:\n[Step 1]: The Silent Harbour was written by Mara Olen.\n[Answer]: Norland"
    copied = "[Step 1]: The Silent Harbour was written by  Mara Olen.\n[Step 2]: Ada was born in Tollbridge.\n" \
             "[Step 3]: the silent harbour was written by mara olen.\n[Answer]: Norland"
    r = parse_reply(copied, Q, example=example)
    assert (r.steps, r.answer, r.code, r.usable) == ([Q], "", "copied", False)
    own = "[Step 1]: Ada was born in Tollbridge.\n[Step 2]: The Mirren flows there.\n[Step 3]: Mara Olen was not.\n" \
          "[Answer]: Mirren"
    assert parse_reply(own, Q, example=example).code is None  # a minority of copied words is not a copy
    assert parse_reply(copied, Q).code is None  # without the example, nothing to compare with


def test_reply_in_another_language_falls_back_to_the_question():
    reply = "[Step 1]: 艾达·布里尔出生在托尔布里奇。\n[Step 2]: 米伦河流经托尔布里奇。\n[Answer]: 米伦河"
    r = parse_reply(reply, Q)
    assert r.steps == [Q]
    assert (r.answer, r.status, r.code, r.form, r.usable) == ("", "fallback", "language", "question", False)
    assert "another language" in r.reason


def test_a_foreign_name_in_an_english_step_is_not_another_language():
    r = parse_reply("[Step 1]: The Mirren (米伦河) flows through Tollbridge, where Ada was born.\n[Answer]: Mirren", Q)
    assert (r.status, r.code) == ("ok", None)


def test_a_question_in_another_script_accepts_replies_in_it():
    q = "艾达·布里尔出生的城镇有哪条河流经？"
    r = parse_reply("[Step 1]: 艾达·布里尔出生在托尔布里奇。\n[Answer]: 米伦河", q)
    assert (r.status, r.code) == ("ok", None)


@pytest.mark.parametrize(("reply", "code"), [("", "empty"), ("  *** \n", "empty"), ("[Step 1]:\n[Answer]:", "empty"),
                                             ("[Answer]: Paris", "no_steps"), ("The sky is blue.", "no_steps")])
def test_each_fallback_has_its_code(reply, code):
    r = parse_reply(reply, Q, finished=True)
    assert (r.status, r.code, r.usable) == ("fallback", code, False)


# ---------------------------------------------------------------------------- properties


def _check(r: ParsedReply, max_steps: int) -> None:
    assert isinstance(r, ParsedReply)
    assert 1 <= len(r.steps) <= max_steps
    assert all(isinstance(s, str) and s.strip() for s in r.steps)
    assert isinstance(r.answer, str)
    assert r.status in {"ok", "fallback"}
    assert r.reason is None or isinstance(r.reason, str)
    if r.status == "fallback":
        assert r.reason


@settings(max_examples=300, deadline=None)
@given(reply=st.text(), max_steps=st.integers(1, 8))
def test_arbitrary_text_never_breaks(reply, max_steps):
    _check(parse_reply(reply, Q, max_steps=max_steps), max_steps)


_marker = st.sampled_from([
    "[Step {n}]: ", "Step {n}: ", "**Step {n}:** ", "Step {n} - ", "step {n}. ", "(Step {n}) ", "STEP{n})",
    "[Answer]: ", "Answer: ", "Final answer:", "**Answer:**", "answer -", "", "* ", "- ", "1. ",
])
_junk = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", " ", "*", "**", ":", "Paris.", "The river is blue. It flows!", "Step", "Answer",
                     "\u2028", "\r", "\x85", "step step 1:", "[Step]:", "?!."]),
)


@st.composite
def _structured_reply(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 14))):
        marker = draw(_marker).format(n=draw(st.integers(0, 12)))
        lines.append(marker + draw(_junk))
    return draw(st.sampled_from(["\n", "\r\n", "\n\n"])).join(lines)


@settings(max_examples=300, deadline=None)
@given(reply=_structured_reply(), max_steps=st.integers(1, 8))
def test_structured_mixes_never_break(reply, max_steps):
    _check(parse_reply(reply, Q, max_steps=max_steps), max_steps)


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.from_regex(r"[A-Za-z][A-Za-z ,]{0,20}[a-z]", fullmatch=True), min_size=1, max_size=8),
       answer=st.from_regex(r"[A-Za-z][A-Za-z ]{0,10}[a-z]", fullmatch=True), max_steps=st.integers(1, 8))
def test_canonical_round_trip(steps, answer, max_steps):
    reply = "".join(f"[Step {n}]: {s}\n" for n, s in enumerate(steps, 1)) + f"[Answer]: {answer}"
    r = parse_reply(reply, Q, max_steps=max_steps)
    norm = [" ".join(s.split()) for s in steps]
    assert r.steps == norm[:max_steps]
    assert r.answer == " ".join(answer.split())
    assert r.status == "ok"
    assert (r.reason is None) == (len(steps) <= max_steps)


# ---------------------------------------------------------------------------- real replies (saved)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "teacher_replies_qwen.jsonl"
# Replies of Qwen2.5-Coder-0.5B-Instruct to HotpotQA development questions (benchmarks/own_steps.py's parse part:
# `plain` is our prompt as it is, `prefix` the reply started on "[Step 1]:", `example` with our worked example of the
# format after the question; 160 new tokens), and what parsing them
# gives: (code, form, number of steps, answer or None when not checked, first step or None).
EXPECTED = {
    # one sentence without a marker ("Robert W. McElroy": an initial does not end a sentence)
    ("plain", "5a76b56d554299373536017b"): ("no_steps", "sentences", 1, None, None),
    ("plain", "5a7625e8554299109176e66a"): ("no_steps", "sentences", 1, None, None),  # the question echoed
    # the prompt's instructions echoed as steps: the form parses (a limit of parsing: content is the labels' job)
    ("plain", "5a72cee45542991f9a20c5a2"): (None, "steps", 5, None, "Read the first document"),
    ("prefix", "5a7625e8554299109176e66a"): (None, "steps", 3, "1865",
                                             "The King who made the 1925 Birthday Honours was George V."),
    ("prefix", "5a7574e25542996c70cfaf01"): (None, "steps", 5, "Ibn Arabi was born first.", None),
    ("prefix", "5a7605f85542994ccc91868d"): ("unclosed", "steps", 5, None, "Battle of Hürtgen Forest"),  # a loop
    ("prefix", "5a73a7c755429978a71e9068"): ("unclosed", "steps", 2, None, None),  # its cut-off step 3 dropped
    # `example` (teacher.format_example): the worked example copied word for word, as every one of the 12 was
    ("example", "5a714dea5542994082a3e7a9"): ("copied", "question", 1, "", None),
}


def _saved_replies() -> list[dict]:
    import json

    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def test_saved_real_replies_are_the_expected_ones():
    assert {(r["variant"], r["qid"]) for r in _saved_replies()} == set(EXPECTED)


@pytest.mark.parametrize("saved", _saved_replies(), ids=lambda r: f"{r['variant']}-{r['qid'][:8]}")
def test_real_reply_shapes(saved):
    code, form, n_steps, answer, first = EXPECTED[(saved["variant"], saved["qid"])]
    from purecover.prompts import load_prompt

    example = load_prompt("reasoning_example").text if saved["variant"].startswith("example") else None
    r = parse_reply(saved["reply"], saved["question"], 5, finished=saved["finished"], example=example)
    assert (r.code, r.form, len(r.steps)) == (code, form, n_steps)
    assert r.usable == (form in ("steps", "numbered"))
    assert (r.status == "ok") == (code is None)
    if answer is not None:
        assert r.answer == answer
    if first is not None:
        assert r.steps[0] == first
