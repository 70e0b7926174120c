"""Parse the teacher's reply into reasoning steps and an answer, with documented fallbacks.

Accepted: ``[Step 1]: ...``, ``Step 1: ...``, ``**Step 1.** ...``, ``(Step 1) - ...`` (any case,
any spacing), a step continuing over several lines, text before the first step or after the
answer (ignored), ``[Answer]: ...``, ``Answer: ...`` or ``Final answer: ...`` (if the answer
line is empty, the next non-empty line is the answer). At most `max_steps` steps are kept.

Fallbacks (``status = "fallback"``, `reason` says which; counted by the labelling job):
1. no step markers but some text → the text's sentences (up to `max_steps`) become the steps;
2. no answer marker → the last step is used as the answer;
3. no step text at all → the question is the only step ("empty reply" or, when only an
   answer was given, "no reasoning steps"); the answer is kept, or empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ParsedReply", "parse_reply"]

_STEP = re.compile(r"^[\W_]*step\s*(\d+)\s*[\]\)\*]*\s*(?:[:.\-–—]+\s*)?\**\s*(.*)$", re.IGNORECASE)
# "[\s*]*" rather than "\s*\**\s*": adjacent optional runs backtrack in polynomial time on "Answer" + spaces.
_ANSWER = re.compile(r"^\W*(?:final\s+)?answer[\s*]*(?:[\]\)][\s*]*)?[:\-–—]\**\s*(.*)$", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass
class ParsedReply:
    """Steps, answer, and whether a fallback was needed (`status` ok/fallback, `reason`)."""

    steps: list[str]
    answer: str
    status: str = "ok"
    reason: str | None = None


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip("*").strip())


def parse_reply(reply: str, question: str, max_steps: int = 5) -> ParsedReply:
    """Steps and answer of one reply (see module docstring for the rules)."""
    steps: list[str] = []
    answer: str | None = None
    reasons: list[str] = []
    fallback = False
    current: list[str] | None = None
    awaiting_answer = False
    before_steps: list[str] = []
    for raw in reply.splitlines():
        line = raw.strip()
        if awaiting_answer:
            if line:
                answer = _clean(line)
                break
            continue
        m_answer = _ANSWER.match(line)
        if m_answer:
            if current is not None:
                steps.append(_clean(" ".join(current)))
                current = None
            answer = _clean(m_answer.group(1))
            if not answer:
                awaiting_answer = True
                answer = None
                continue
            break
        m_step = _STEP.match(line)
        if m_step:
            if current is not None:
                steps.append(_clean(" ".join(current)))
            current = [m_step.group(2)]
        elif current is not None:
            if line:
                current.append(line)
        elif line:
            before_steps.append(line)
    if current is not None:
        steps.append(_clean(" ".join(current)))
    steps = [s for s in steps if s]
    if not steps:
        text = " ".join(before_steps).strip()
        sentences = [_clean(s) for s in _SENTENCE.split(text) if _clean(s)]
        if sentences:
            steps = sentences[:max_steps]
            reasons.append(f"no [Step N] lines: used {len(steps)} sentence(s) of the reply as steps")
            fallback = True
    if len(steps) > max_steps:
        reasons.append(f"{len(steps)} steps: kept the first {max_steps}")
        steps = steps[:max_steps]
    if not steps:
        what = "no reasoning steps" if answer else "empty reply"
        return ParsedReply(steps=[_clean(question)], answer=answer or "", status="fallback",
                           reason=f"{what}: used the question as the only step")
    if answer is None:
        answer = steps[-1]
        reasons.append("no [Answer] line: used the last step as the answer")
        fallback = True
    return ParsedReply(steps=steps, answer=answer, status="fallback" if fallback else "ok",
                       reason="; ".join(reasons) or None)
