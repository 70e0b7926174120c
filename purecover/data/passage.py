"""How a passage is rendered as one string: the single rule every stage uses.

A passage is its title and its text on two lines, or its text alone when it has no title:
``passage_text("Paris", "Paris is the capital of France.") == "Paris\\nParis is the capital of France."``.
Both parts are stripped of surrounding whitespace first, and a title that is empty after
stripping counts as no title. The retrievers index this string, the teacher's prompts and the
selector prompt show it, and the embedding estimator and the eval baselines embed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["doc_passage_text", "passage_text"]


def passage_text(title: str | None, text: str | None) -> str:
    """``title\\ntext`` with both parts stripped; ``text`` alone when the title is empty or missing."""
    title, text = (title or "").strip(), (text or "").strip()
    return f"{title}\n{text}" if title else text


def doc_passage_text(doc: Mapping[str, Any]) -> str:
    """`passage_text` of a document dict (``{"title", "text", ...}``; either key may be missing or null)."""
    return passage_text(doc.get("title"), doc.get("text"))
