"""Parse the teacher's reply into reasoning steps and an answer, with documented fallbacks.

Accepted step forms (`ParsedReply.form`):

* ``steps``: ``[Step 1]: ...``, ``Step 1: ...``, ``**Step 1.** ...``, ``(Step 1) - ...`` (any case, any spacing);
* ``numbered``: when no line has a step marker, a numbered list, ``1. ...`` or ``2) ...`` (what small models
  write when they drop the marker).

A step marker may follow a list number (``1. **Step 1:** ...``). A step may continue over several lines; code-fence
lines (```) are skipped; text before the first step and after the answer is ignored. The answer is
the text of an ``[Answer]: ...``, ``Answer: ...`` or ``Final answer: ...`` line (if that line is empty, the next
non-empty line), also when the marker sits at the end of a step line. Without an answer line, the answer comes from
the last step: its ``the answer is X`` clause if it has one, else the whole step (status ok: the steps are the
reply's own). At most `max_steps` steps are kept.

Fallbacks (``status = "fallback"``; `code` names which, `reason` says what was done; the labelling job counts them
by code, `REPLY_ISSUES`):

* ``empty``: nothing but blanks and punctuation → the question is the only step, the answer empty;
* ``language``: the reply's letters are mostly in another script than the question's (e.g. a reply in Chinese to
  an English question) → the question is the only step;
* ``copied``: half of the steps or more are sentences of the prompt's worked example (``example``; small models copy it) → the
  question is the only step;
* ``no_steps``: no step lines → the reply's sentences (up to `max_steps`) become the steps (form ``sentences``),
  or, when only an answer was given, the question is the only step (form ``question``);
* ``unclosed``: the reply reached the token limit (``finished=False``) before an answer line → its complete steps
  are kept (the last one, cut off, is dropped when there are others) and the answer comes from the last of them.

`ParsedReply.usable`: the steps are the reply's own step lines (forms ``steps`` and ``numbered``, in the question's
script), which is what the parse rate of benchmarks/own_steps.py counts.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["REPLY_ISSUES", "ParsedReply", "answer_closed", "foreign_share", "parse_reply"]

REPLY_ISSUES = ("empty", "language", "copied", "no_steps", "unclosed")

_STEP = re.compile(r"^[\W_]*(?:\d{1,2}[.)][\W_]*)?step\s*(\d+)\s*[\]\)\*]*\s*(?:[:.\-–—]+\s*)?\**\s*(.*)$",
                   re.IGNORECASE)
# "[\s*]*" rather than "\s*\**\s*": adjacent optional runs backtrack in polynomial time on "Answer" + spaces.
_ANSWER = re.compile(r"^\W*(?:final\s+)?answer[\s*]*(?:[\]\)][\s*]*)?[:\-–—]\**\s*(.*)$", re.IGNORECASE)
# an answer marker at the end of a step line: "... Paris. [Answer]: France"
_TRAILING_ANSWER = re.compile(r"\[\s*(?:final\s+)?answer\s*\]\s*[:\-–—]?", re.IGNORECASE)
_NUMBERED = re.compile(r"^\**\s*(\d{1,2})\s*[.)]\**\s+(\S.*)$")
# "the answer is X" inside the last step (no answer line)
_ANSWER_CLAUSE = re.compile(r"\b(?:the\s+)?(?:final\s+)?answer\s+(?:is|was|would\s+be)\s*:?\s*(.+)$", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+|\n+")  # an initial ("W. McElroy") ends no sentence
FOREIGN_SHARE = 0.5  # a reply whose letters are more than this share in another script is in another language
MIN_LETTERS = 12  # fewer letters than this: too little text to judge the language


@dataclass
class ParsedReply:
    """Steps, answer, and whether a fallback was needed (`status` ok/fallback, `code` one of `REPLY_ISSUES` or None,
    `reason` in words); `form`: where the steps came from (steps, numbered, sentences, question)."""

    steps: list[str]
    answer: str
    status: str = "ok"
    reason: str | None = None
    code: str | None = None
    form: str = "steps"

    @property
    def usable(self) -> bool:
        """The steps are the reply's own step lines, in the question's language."""
        return self.form in ("steps", "numbered") and self.code in (None, "unclosed")


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip("*").strip())


def _latin(ch: str) -> bool:
    return ord(ch) < 0x250 or unicodedata.name(ch, "").startswith("LATIN")


def foreign_share(text: str, question: str) -> float:
    """The share of `text`'s letters written in a script other than Latin when `question`'s letters are mostly Latin
    (0 when the question is not, or `text` has fewer than `MIN_LETTERS` letters)."""
    q_letters = [c for c in question if c.isalpha()]
    if q_letters and sum(not _latin(c) for c in q_letters) > len(q_letters) / 2:
        return 0.0
    letters = [c for c in text if c.isalpha()]
    if len(letters) < MIN_LETTERS:
        return 0.0
    return sum(not _latin(c) for c in letters) / len(letters)


def _answer_from(step: str) -> str:
    m = _ANSWER_CLAUSE.search(step)
    answer = _clean(m.group(1)).rstrip(".") if m else ""
    return answer or step


def _scan(lines: list[str], marker: re.Pattern[str]) -> tuple[list[str], str | None, list[str], bool]:
    """Steps by `marker` (its group 2: the step's text), the answer line's text (None: none), the lines before the
    first step, and whether an answer marker was seen."""
    steps: list[str] = []
    answer: str | None = None
    current: list[str] | None = None
    before: list[str] = []
    awaiting = seen = False
    for raw in lines:
        line = raw.strip()
        if line.startswith("```"):  # a code fence around the reply (coder models): not text
            continue
        if awaiting:
            if line:
                answer = _clean(line)
                break
            continue
        m_answer = _ANSWER.match(line)
        m_step = None if m_answer else marker.match(line)
        tail = None
        if m_answer is None and (m_step is not None or current is not None):
            text = m_step.group(2) if m_step is not None else line
            cut = _TRAILING_ANSWER.search(text)
            if cut is not None:  # "[Step 2]: ... [Answer]: X": the step, then the answer
                text, tail = text[: cut.start()], text[cut.end():]
            if m_step is not None:
                if current is not None:
                    steps.append(_clean(" ".join(current)))
                current = [text]
            elif line:
                current.append(text)  # type: ignore[union-attr]
        elif m_answer is None and line:
            before.append(line)
        if m_answer is not None or tail is not None:
            seen = True
            if current is not None:
                steps.append(_clean(" ".join(current)))
                current = None
            answer = _clean(m_answer.group(1) if m_answer is not None else tail or "")
            if not answer:
                awaiting, answer = True, None
                continue
            break
    if current is not None:
        steps.append(_clean(" ".join(current)))
    return [s for s in steps if s], answer, before, seen


def _copied(steps: list[str], example: str | None) -> bool:
    """Whether half of `steps` or more are found, word for word (case and spacing aside), in the worked `example`."""
    if not example:
        return False
    text = _clean(example).casefold()
    return 2 * sum(_clean(s).casefold() in text for s in steps) >= len(steps)


def parse_reply(reply: str, question: str, max_steps: int = 5, finished: bool | None = None,
                example: str | None = None) -> ParsedReply:
    """Steps and answer of one reply (the rules: the module docstring). `finished`: whether the reply ended by
    itself (end of sequence or a stop) rather than at the token limit; None: not known (taken as finished).
    `example`: the worked example of the format the prompt showed (``teacher.format_example``), None: none."""
    question_step = [_clean(question)]
    if not re.sub(r"[\W_]+", "", reply):
        return ParsedReply(question_step, "", "fallback", "empty reply: used the question as the only step",
                           "empty", "question")
    lines = reply.splitlines()
    form = "steps"
    steps, answer, before, seen = _scan(lines, _STEP)
    if not steps:
        numbered, n_answer, _, n_seen = _scan(lines, _NUMBERED)
        if numbered:
            form, steps, answer, seen = "numbered", numbered, n_answer, n_seen
    notes: list[str] = []
    code = None
    if not steps:
        text = " ".join(before).strip()
        sentences = [_clean(s) for s in _SENTENCE.split(text) if _clean(s)]
        if not sentences:
            what = "no reasoning steps" if answer else "empty reply"
            return ParsedReply(question_step, answer or "", "fallback", f"{what}: used the question as the only step",
                               "no_steps" if answer else "empty", "question")
        form, code = "sentences", "no_steps"
        steps = sentences[:max_steps]
        notes.append(f"no [Step N] lines: used {len(steps)} sentence(s) of the reply as steps")
    share = foreign_share(" ".join([*steps, answer or ""]), question)
    if share > FOREIGN_SHARE:
        return ParsedReply(question_step, "", "fallback",
                           f"reply in another language ({share:.0%} of its letters in another script than the "
                           "question's): used the question as the only step", "language", "question")
    if form in ("steps", "numbered") and _copied(steps, example):
        return ParsedReply(question_step, "", "fallback", "the reply copies the prompt's worked example: used the "
                           "question as the only step", "copied", "question")
    if form == "numbered":
        notes.append("steps from a numbered list (no [Step N] markers)")
    if answer is None and finished is False and not seen:
        if code is None:
            code = "unclosed"
        if len(steps) > 1 and len(steps) <= max_steps:
            steps = steps[:-1]
            notes.append("the reply reached the token limit before an [Answer] line: dropped its last, cut-off "
                         "step")
        else:
            notes.append("the reply reached the token limit before an [Answer] line")
    if len(steps) > max_steps:
        notes.append(f"{len(steps)} steps: kept the first {max_steps}")
        steps = steps[:max_steps]
    if answer is None:
        answer = _answer_from(steps[-1])
        notes.append("no [Answer] line: the answer is " + ("the last step's 'the answer is' clause"
                                                          if answer != steps[-1] else "the last step"))
    return ParsedReply(steps, answer, "fallback" if code else "ok", "; ".join(notes) or None, code, form)


def answer_closed(text: str) -> bool:
    """Whether `text` (a reply being generated) already holds a complete answer: an answer line with its text (or
    the non-empty line after an empty one, or an answer marker at the end of a step line), followed by a line break.
    What the teacher's generation stops at: `parse_reply` ignores everything after it."""
    awaiting = False
    for raw in text.split("\n")[:-1]:  # the last line may still be growing
        line = raw.strip()
        if awaiting:
            if _clean(line):
                return True
            continue
        m_answer = _ANSWER.match(line)
        if m_answer is not None:
            if _clean(m_answer.group(1)):
                return True
            awaiting = True
            continue
        cut = _TRAILING_ANSWER.search(line)
        if cut is not None and _clean(line[cut.end():]):
            return True
    return False
