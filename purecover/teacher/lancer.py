"""LANCER-style requirement signal (docs/concepts/method.md#lancer-signal): sub-questions and 0..5 answerability ratings.

The teacher writes `n` sub-questions for the question, then rates every (document, sub-question)
pair from 0 to 5: the document is judged against the question joined with the sub-question
(both are shown), on LANCER's six-level answerability scale. Rating parse rule: the first integer
in the reply, kept if it is in 0..5, otherwise 0 (an `int`). Optionally the expected rating
Σ r·p(r) / Σ p(r) over the probabilities of the tokens "0".."5" at the first reply position
replaces the parsed integer (a `float`).

Sources: the rubric (levels 0..5 by relevance, completeness and accuracy to the question), the
joining of the request with each sub-question, and the sub-question instructions follow LANCER
(Ju, Landry, Yang, Verberne, Yates, "LANCER: LLM Reranking for Nugget Coverage", 2026; code:
DylanJoo/LANCER, `prompts/neuclir.py` `prompt_rating_gen` / `prompt_subquestion_gen` and
`augmentation/gen_ratings.py`; the same rubric is in DylanJoo/crux, `crux/prompts/crux.py`).
The wording is ours, in ``purecover/prompts/`` (``lancer_subquestion.txt``, ``lancer_system.txt``,
``lancer_rating.txt``, read by `purecover.prompts.load_prompt`); LANCER's report request becomes a
question. Other wordings (LANCER's original included) can be supplied as template files, see
`load_template`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..models.chat import render_chat
from ..prompts import PROMPTS, TemplateError, check_template_text, load_prompt
from ..records import CandidateDoc
from .prompts import document_body

if TYPE_CHECKING:  # the backends pull in torch; this module stays light (purecover.config checks templates with it)
    from ..models.generation import GenerationBackend

__all__ = ["RATING_TEMPLATE", "SUBQUESTION_TEMPLATE", "TEMPLATE_FIELDS", "TemplateError", "check_template",
           "digit_token_ids", "expected_rating", "load_template", "parse_rating",
           "parse_subquestions", "rate_documents", "rating_prompt", "subquestion_prompt", "write_subquestions"]

TemplateKind = Literal["rating", "subquestion"]

_PROMPT_NAMES: dict[str, str] = {"rating": "lancer_rating", "subquestion": "lancer_subquestion"}

# Placeholders each template must use, and may only use.
TEMPLATE_FIELDS: dict[str, tuple[str, ...]] = {kind: PROMPTS[name].parts[""].required
                                               for kind, name in _PROMPT_NAMES.items()}

_SYSTEM = load_prompt("lancer_system").text

SUBQUESTION_TEMPLATE = load_prompt("lancer_subquestion").text

RATING_TEMPLATE = load_prompt("lancer_rating").text

_INT = re.compile(r"-?\d+")
_BULLET = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)\]:]|q\d+[.):]|sub-?question\s*\d*[.):]?)\s*", re.IGNORECASE)


# ---------------------------------------------------------------------------- templates


def check_template(text: str, kind: TemplateKind, source: str) -> str:
    """`text` if it uses every placeholder of `kind` and no other; else TemplateError naming `source`."""
    return check_template_text(text, PROMPTS[_PROMPT_NAMES[kind]].parts[""], source, f"the {kind} template")


def load_template(path: str | Path, kind: TemplateKind) -> str:
    """Read a UTF-8 template file (used as read, final newline included) and check its placeholders
    (`TEMPLATE_FIELDS[kind]`)."""
    return load_prompt(_PROMPT_NAMES[kind], path).text


# ---------------------------------------------------------------------------- prompts


def subquestion_prompt(tokenizer: Any, question: str, n: int, template: str | None = None) -> str:
    """The sub-question prompt; a custom `template` is the whole user message (no system message)."""
    user = (template or SUBQUESTION_TEMPLATE).format(question=question.strip(), n=n)
    return render_chat(tokenizer, None if template else _SYSTEM, user).text


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


def rating_prompt(tokenizer: Any, question: str, subquestion: str, doc: CandidateDoc,
                  template: str | None = None) -> str:
    """Rate `doc` against the question joined with `subquestion` (LANCER's 0..5 answerability scale)."""
    user = (template or RATING_TEMPLATE).format(question=question.strip(), subquestion=subquestion.strip(),
                                                document=document_body(doc))
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
                       max_new_tokens: int = 128, template: str | None = None) -> list[tuple[list[str], str | None]]:
    """Sub-questions (and a padding reason or None) for each question."""
    replies = backend.generate([subquestion_prompt(tokenizer, q, n, template) for q in questions], max_new_tokens)
    return [parse_subquestions(r, q, n) for r, q in zip(replies, questions)]


def rate_documents(backend: GenerationBackend, tokenizer: Any, question: str, subquestions: Sequence[str],
                   docs: Sequence[CandidateDoc], expected: bool = False,
                   template: str | None = None) -> list[list[int]] | list[list[float]]:
    """Ratings (K1 × n) of every document against `question` joined with each sub-question.

    Parsed integers (`int`), or with `expected` the expected ratings (`float`) from the digit
    probabilities, falling back to the parsed integer when the six digits carry no mass.
    """
    prompts = [rating_prompt(tokenizer, question, sq, d, template) for d in docs for sq in subquestions]
    replies = backend.generate(prompts, max_new_tokens=4)
    parsed: list[int] = [parse_rating(r) for r in replies]
    values: list[int] | list[float] = parsed
    if expected:
        probs = backend.token_probabilities(prompts, digit_token_ids(tokenizer))
        values = [expected_rating(p, fallback=v) for p, v in zip(probs, parsed)]
    n = len(subquestions)
    return [values[i * n : (i + 1) * n] for i in range(len(docs))]
