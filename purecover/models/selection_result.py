"""What a selection returns, and how a candidate is read: no torch, so that the remote client
(`purecover.serve.client`) and the framework adapters' ``from_url`` work with httpx alone.
`purecover.models.selector` re-exports both names."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ..records import CandidateDoc

__all__ = ["NonFiniteScoresError", "SelectionResult", "SelectionRow", "as_candidate_doc", "check_finite_scores"]


class SelectionRow(TypedDict):
    """`SelectionResult.to_record`: a selections.jsonl record without the doc ids (docs/concepts/file-formats.md)."""

    qid: str
    selected: list[int]
    logits: list[float]
    probabilities: list[float]
    score_space: str


class NonFiniteScoresError(RuntimeError):
    """A selector scored some candidate with NaN or an infinity: its weights (the model's or the score head's) are
    broken, and no threshold can select from such scores."""


def check_finite_scores(rows: Sequence[Sequence[float]], source: str) -> None:
    """Raise `NonFiniteScoresError` naming `source` (the selector) when a score of `rows` (one list of candidate
    scores per question, in batch order) is NaN or infinite."""
    for i, row in enumerate(rows):
        bad = [j for j, v in enumerate(row) if not math.isfinite(float(v))]
        if bad:
            shown = ", ".join(f"{j + 1} ({float(row[j])})" for j in bad[:5]) + (" ..." if len(bad) > 5 else "")
            raise NonFiniteScoresError(
                f"{source}: the selector's scores are not finite numbers for question {i} of its batch, at "
                f"{len(bad)} of {len(row)} candidates (1-based: {shown}); finite-but-huge weights (in the model or "
                "the score head) overflow to these. Nothing was selected: check or re-export the selector")


@dataclass
class SelectionResult:
    """One question's selection: kept candidate positions (best first) and the scores of all candidates.

    `logits`: the scores in `score_space` ("logit": the readout's logits; "logprob": log-probabilities
    renormalised over the present identifiers), in candidate order.
    """

    indices: list[int]
    logits: list[float]
    probabilities: list[float]
    score_space: str = "logit"

    def to_record(self, qid: str) -> SelectionRow:
        """The selections.jsonl record (docs/concepts/file-formats.md), plus ``score_space``."""
        return {"qid": qid, "selected": list(self.indices), "logits": list(self.logits),
                "probabilities": list(self.probabilities), "score_space": self.score_space}



def as_candidate_doc(doc: Any, position: int) -> CandidateDoc:
    """A candidate as a `CandidateDoc` (title and text): a str is the text; a mapping or another object needs a
    ``text`` string and may have a ``title`` (a string or None)."""
    if isinstance(doc, CandidateDoc):
        return doc
    if isinstance(doc, str):
        return CandidateDoc(title="", text=doc)
    if isinstance(doc, Mapping):
        text, title = doc.get("text"), doc.get("title")
    else:
        text, title = getattr(doc, "text", None), getattr(doc, "title", None)
    if not isinstance(text, str):
        raise TypeError(f"candidate {position}: expected a dict with a 'text' string (and optional 'title'), an "
                        f"object with a 'text' attribute or a str, got {type(doc).__name__}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"candidate {position}: 'title' must be a str or None, got {type(title).__name__}")
    return CandidateDoc(title=title, text=text)
