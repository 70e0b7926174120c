"""LANCER-style requirement signal (DESIGN §3.6): sub-questions and 0..5 answerability ratings.

The teacher writes `n` sub-questions for the question, then rates every (document,
sub-question) pair from 0 to 5. Rating parse rule: the first integer in the reply, kept if it
is in 0..5, otherwise 0. Optionally the expected rating Σ r·p(r) / Σ p(r) over the
probabilities of the tokens "0".."5" at the first reply position replaces the parsed integer.
The prompts adapt LANCER's report-request setting to a single question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..models.chat import render_chat
from .backends import GenerationBackend

__all__ = ["expected_rating", "parse_rating", "parse_subquestions", "rate_documents", "rating_prompt",
           "subquestion_prompt", "write_subquestions"]

_SYSTEM = "You are a careful assistant who breaks questions into the information they require."
_INT = re.compile(r"-?\d+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)\]:]|q\d+[.):]|sub-?question\s*\d*[.):]?)\s*", re.IGNORECASE)


def subquestion_prompt(tokenizer: Any, question: str, n: int) -> str:
    user = (f"Write {n} sub-questions whose answers are needed to answer the question below. Each "
            f"sub-question asks for one piece of information. Write exactly {n} lines, numbered 1. to {n}., "
            f"and nothing else.\n\nQuestion: {question.strip()}")
    return render_chat(tokenizer, _SYSTEM, user).text


def parse_subquestions(reply: str, question: str, n: int) -> tuple[list[str], str | None]:
    """The first `n` non-empty lines without numbering; padded with the question itself (reason given)."""
    lines = []
    for raw in reply.splitlines():
        line = _BULLET.sub("", raw).strip()
        if line:
            lines.append(line)
    subs = lines[:n]
    reason = None
    if len(subs) < n:
        reason = f"{len(subs)} of {n} sub-questions parsed; padded with the question"
        subs += [question.strip()] * (n - len(subs))
    return subs, reason


def rating_prompt(tokenizer: Any, subquestion: str, doc: dict[str, Any]) -> str:
    title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
    body = f"{title}\n{text}" if title else text
    user = ("Rate how well the document answers the sub-question, from 0 to 5: 0 = unrelated, 1 = on topic but no "
            "answer, 2 = a hint, 3 = a partial answer, 4 = an answer with minor gaps, 5 = a complete, explicit "
            f"answer. Reply with the number only.\n\nDocument:\n{body}\n\nSub-question: {subquestion}")
    return render_chat(tokenizer, None, user).text


def parse_rating(reply: str) -> int:
    """First integer of the reply if it lies in 0..5, else 0."""
    m = _INT.search(reply)
    if not m:
        return 0
    digits = m.group(0).lstrip("-")
    # int() refuses numbers over 4300 digits: convert the last 9; a non-zero digit before them is out of range.
    if any(int(d) for d in digits[:-9]):
        return 0
    value = int(digits[-9:])
    if m.group(0).startswith("-"):
        value = -value
    return value if 0 <= value <= 5 else 0


def expected_rating(probabilities: Sequence[float], fallback: float) -> float:
    """Σ r·p(r) / Σ p(r) over r = 0..5; `fallback` when the six probabilities are all zero."""
    total = float(sum(probabilities))
    if total <= 0:
        return float(fallback)
    value = sum(r * p for r, p in enumerate(probabilities)) / total
    return min(5.0, max(0.0, value))  # rounding can land a hair outside 0..5 (e.g. 5.000000000000001)


def digit_token_ids(tokenizer: Any) -> list[int]:
    """Token ids of "0".."5"; each must be a single token."""
    ids = []
    for d in "012345":
        enc = tokenizer(d, add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise ValueError(f"the digit {d!r} is not a single token for this tokenizer; expected_rating needs it")
        ids.append(enc[0])
    return ids


def write_subquestions(backend: GenerationBackend, tokenizer: Any, questions: Sequence[str], n: int,
                       max_new_tokens: int = 128) -> list[tuple[list[str], str | None]]:
    replies = backend.generate([subquestion_prompt(tokenizer, q, n) for q in questions], max_new_tokens)
    return [parse_subquestions(r, q, n) for r, q in zip(replies, questions)]


def rate_documents(backend: GenerationBackend, tokenizer: Any, subquestions: Sequence[str],
                   docs: Sequence[dict[str, Any]], expected: bool = False) -> list[list[float]]:
    """Ratings (K1 × n): parsed integers, or expected ratings when `expected` is true."""
    prompts = [rating_prompt(tokenizer, sq, d) for d in docs for sq in subquestions]
    replies = backend.generate(prompts, max_new_tokens=4)
    parsed = [float(parse_rating(r)) for r in replies]
    if expected:
        probs = backend.token_probabilities(prompts, digit_token_ids(tokenizer))
        parsed = [expected_rating(p, fallback=v) for p, v in zip(probs, parsed)]
    n = len(subquestions)
    return [parsed[i * n : (i + 1) * n] for i in range(len(docs))]
