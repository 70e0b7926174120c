"""Property-based fuzzing of the teacher-output parsers: they never raise and keep their contracts.

`parse_reply` documents fallbacks (never an exception) for any reply; well-formed replies
(``[Step n]: ...`` + ``[Answer]: ...`` in any of the accepted spellings, with noise around them)
round-trip, and so does `canonical_reply`, whose spans slice to the step and answer texts.
LANCER: `parse_rating` is the first integer if in 0..5 else 0, `parse_subquestions` always returns
`n` items (padded, with a reason), `expected_rating` stays in [0, 5].
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from purecover.teacher.lancer import expected_rating, parse_rating, parse_subquestions
from purecover.teacher.parsing import FOREIGN_SHARE, ParsedReply, foreign_share, parse_reply
from purecover.teacher.prompts import canonical_reply

FUZZ = settings(max_examples=150, deadline=None)

_CHARS = st.characters(codec="utf-8")
any_text = st.text(_CHARS, max_size=200) | st.lists(
    st.sampled_from(["[Step 1]:", "Step 2.", "**Step 3.**", "(Step 4) -", "[Answer]:", "Answer:", "Final answer -",
                     "\n", "\r\n", " ", "*", "x", "Yes.", "\u2028", "\x85", "step", "42", "  \t"]),
    max_size=30).map("".join)
questions = st.text(_CHARS, max_size=30)

# One "clean" phrase: what `_clean` leaves alone (single spaces, no '*' or whitespace at the ends).
_WORD_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc"))
word = st.text(_WORD_CHARS, min_size=1, max_size=6).filter(lambda w: not any(c.isspace() for c in w))
phrase = st.lists(word, min_size=1, max_size=5).map(" ".join).filter(
    lambda s: s[0] not in "*])-:.–—" and not s.endswith("*"))
# Mostly words in the question's (Latin) script, some in any: steps mostly in another script are the language
# fallback (tests/teacher/test_parsing.py), which the round trips below leave out with `assume`.
latin_word = st.text(st.characters(codec="utf-8", max_codepoint=0x24F, exclude_categories=("Zs", "Zl", "Zp", "Cc")),
                     min_size=1, max_size=6).filter(lambda w: not any(c.isspace() for c in w))
mixed_phrase = st.lists(st.one_of(latin_word, latin_word, latin_word, word), min_size=1, max_size=5).map(
    " ".join).filter(lambda s: s[0] not in "*])-:.–—" and not s.endswith("*"))


def _no_marker(text: str) -> bool:
    folded = text.casefold()
    return "step" not in folded and "answer" not in folded


noise_line = st.text(_CHARS, max_size=30).filter(_no_marker)
plain_phrase = mixed_phrase.filter(_no_marker)


def check_contract(parsed: ParsedReply, max_steps: int) -> None:
    assert isinstance(parsed, ParsedReply)
    assert 1 <= len(parsed.steps) <= max_steps
    assert parsed.status in ("ok", "fallback")
    assert parsed.status == "ok" or parsed.reason
    for text in [*parsed.steps, parsed.answer]:
        assert isinstance(text, str) and text == text.strip()
        assert all(c == " " or not c.isspace() for c in text) and "  " not in text


@FUZZ
@given(reply=any_text, question=questions, max_steps=st.integers(1, 8))
def test_parse_reply_never_raises(reply: str, question: str, max_steps: int) -> None:
    check_contract(parse_reply(reply, question, max_steps), max_steps)


STEP_STYLES = ["[Step {n}]: ", "Step {n}: ", "**Step {n}.** ", "(Step {n}) - ", "step {n} — ", "  [STEP {n}]:\t"]
ANSWER_STYLES = ["[Answer]: ", "Answer: ", "Final answer: ", "**Answer:** ", "  [answer] - ", "[Answer]:\n\n  "]


@FUZZ
@given(
    steps=st.lists(st.lists(plain_phrase, min_size=1, max_size=2), min_size=1, max_size=7),
    answer=mixed_phrase,
    style=st.tuples(st.sampled_from(STEP_STYLES), st.sampled_from(ANSWER_STYLES)),
    preamble=st.lists(noise_line, max_size=3),
    gaps=st.lists(st.sampled_from(["", "   ", "\t"]), min_size=7, max_size=7),
    trailer=any_text,
    max_steps=st.integers(1, 8),
)
def test_well_formed_reply_round_trips(steps: list[list[str]], answer: str, style: tuple[str, str],
                                       preamble: list[str], gaps: list[str], trailer: str, max_steps: int) -> None:
    """Steps (possibly continued on a second line) and the answer come back exactly; noise is ignored."""
    step_style, answer_style = style
    # steps in another script than the question's are the language fallback (tested in test_parsing.py)
    assume(foreign_share(" ".join([*(" ".join(p) for p in steps), answer]), "the question?") <= FOREIGN_SHARE)
    lines = list(preamble)
    for n, (parts, gap) in enumerate(zip(steps, gaps), start=1):
        lines.append(step_style.format(n=n) + parts[0])
        lines += parts[1:]
        if gap:
            lines.append(gap)  # blank lines inside the reasoning are skipped
    lines.append(answer_style + answer)
    reply = "\n".join(lines) + "\n" + trailer
    parsed = parse_reply(reply, "the question?", max_steps)
    check_contract(parsed, max_steps)
    want = [" ".join(parts) for parts in steps]
    assert parsed.steps == want[:max_steps] and parsed.answer == answer
    assert parsed.status == "ok"
    assert (parsed.reason is None) == (len(want) <= max_steps)


@FUZZ
@given(steps=st.lists(mixed_phrase, min_size=1, max_size=5), answer=mixed_phrase)
def test_canonical_reply_spans_and_round_trip(steps: list[str], answer: str) -> None:
    assume(foreign_share(" ".join([*steps, answer]), "q?") <= FOREIGN_SHARE)
    text, step_spans, answer_span = canonical_reply(steps, answer)
    for (a, b), step in zip(step_spans, steps, strict=True):
        assert 0 <= a <= b <= len(text) and text[a:b] == step
    a, b = answer_span
    assert 0 <= a <= b == len(text) and text[a:b] == answer
    parsed = parse_reply(text, "q?", max_steps=5)
    assert (parsed.steps, parsed.answer, parsed.status) == (steps, answer, "ok")


@FUZZ
@given(text=any_text, question=questions)
def test_answer_only_and_empty_replies_fall_back_to_the_question(text: str, question: str) -> None:
    """No step text: the question is the only step, the answer is kept (or empty)."""
    parsed = parse_reply(f"[Answer]: {text}", question, 5)
    assert parsed.status == "fallback" and parsed.steps == [re.sub(r"\s+", " ", question.strip().strip("*").strip())]
    blank = parse_reply("\n \t\n" * len(text), question, 5)
    assert blank.steps == parsed.steps and blank.answer == "" and blank.reason.startswith("empty reply")


# ---------------------------------------------------------------- LANCER


@FUZZ
@given(reply=any_text)
def test_parse_rating_is_in_range_for_any_text(reply: str) -> None:
    value = parse_rating(reply)
    assert isinstance(value, int) and 0 <= value <= 5


no_digits = st.text(st.characters(codec="utf-8", exclude_categories=("Nd",), exclude_characters="-"), max_size=20)


@FUZZ
@given(prefix=no_digits, number=st.integers() | st.integers(-7, 7), zeros=st.integers(0, 3), suffix=any_text)
def test_parse_rating_takes_the_first_integer(prefix: str, number: int, zeros: int, suffix: str) -> None:
    assume(not suffix[:1].isdecimal())
    literal = ("-" if number < 0 else "") + "0" * zeros + str(abs(number))
    assert parse_rating(prefix + literal + suffix) == (number if 0 <= number <= 5 else 0)


def test_parse_rating_with_a_number_too_long_for_int() -> None:
    """``"1" * 5000`` raised ValueError (int() refuses more than 4300 digits)."""
    assert parse_rating("1" * 5000) == 0
    assert parse_rating("-" + "9" * 5000) == 0
    assert parse_rating("0" * 5000 + "3 stars") == 3
    assert parse_rating("rating: " + "0" * 5000) == 0


@FUZZ
@given(reply=any_text, question=questions, n=st.integers(0, 8))
def test_parse_subquestions_never_raises(reply: str, question: str, n: int) -> None:
    subs, reason = parse_subquestions(reply, question, n)
    assert len(subs) == n and all(isinstance(s, str) for s in subs)
    k = n if reason is None else int(reason.split(" of ")[0])  # "{k} of {n} sub-questions parsed; padded ..."
    assert k <= n and subs[k:] == [question.strip()] * (n - k)
    assert all(s and s == s.strip() for s in subs[:k])


# Not starting like a bullet or number itself ("-", "(", a digit, "q1:", "sub-question").
item = phrase.filter(lambda s: s[0] not in "-*•(" and not s[0].isdecimal() and s.casefold()[0] not in "qs")


@FUZZ
@given(items=st.lists(item, max_size=6), question=questions, n=st.integers(0, 8),
       numbering=st.sampled_from(["{i}. ", "{i}) ", "- ", "* ", "Q{i}: ", "Sub-question {i}: ", "", "  ({i}) "]),
       blank=st.sampled_from(["", "\n", "\n  \n"]))
def test_numbered_subquestions_round_trip(items: list[str], question: str, n: int, numbering: str,
                                          blank: str) -> None:
    reply = "\n".join(numbering.format(i=i) + item + blank for i, item in enumerate(items, start=1))
    subs, reason = parse_subquestions(reply, question, n)
    assert subs[: min(n, len(items))] == items[:n]
    assert subs[len(items):] == [question.strip()] * (n - len(items))
    assert (reason is None) == (len(items) >= n)


probability = st.floats(0, 1) | st.sampled_from([0.0, 5e-324, 1e-310, 1.0]) | st.floats(0, 1e-300)


@FUZZ
@given(probs=st.lists(probability, min_size=6, max_size=6), fallback=st.floats(0, 5))
def test_expected_rating_stays_in_range(probs: list[float], fallback: float) -> None:
    value = expected_rating(probs, fallback)
    assert 0.0 <= value <= 5.0
    if sum(probs) == 0:
        assert value == fallback


@FUZZ
@given(k=st.integers(0, 5), p=st.floats(1e-300, 1))
def test_expected_rating_of_a_single_digit(k: int, p: float) -> None:
    probs = [0.0] * 6
    probs[k] = p
    assert expected_rating(probs, 0.0) == pytest.approx(k)


def test_expected_rating_rounding_does_not_exceed_five() -> None:
    """Summation rounding gave 5.000000000000001 for this vector."""
    probs = [0.0, 2e-323, 4e-323, 0.0, 1.5e-323, 0.22180150686525069]
    assert expected_rating(probs, 0.0) == 5.0


@pytest.mark.parametrize("line", ["Answer" + " " * 3000 + "x", "answer" + " *" * 1500 + " x", "Final answer ] " * 300])
def test_answer_marker_regex_is_linear(line: str) -> None:
    """``Answer`` + 400 spaces and no colon took ~10 s (nested whitespace runs backtracked)."""
    start = time.perf_counter()
    parsed = parse_reply(line + "\n[Step 1]: s\n[Answer]: a", "q?")
    assert time.perf_counter() - start < 1.0
    assert parsed.answer == "a"
