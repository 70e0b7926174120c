"""The doc id of a candidate, with one rule for candidates that carry none (select output, evaluation)."""

from __future__ import annotations

from typing import Any

__all__ = ["candidate_doc_id"]


def candidate_doc_id(doc: Any, position: int) -> str:
    """`doc`'s ``doc_id`` (a dict's key or a record's field, e.g. a `purecover.records.CandidateDoc`) as a
    string; when it has none (or is a plain string), its 1-based position ``str(position + 1)``, `position`
    being the 0-based index in ``docs``.
    """
    value = doc.get("doc_id") if isinstance(doc, dict) else None if isinstance(doc, str) else getattr(doc, "doc_id", None)
    return str(position + 1) if value is None or value == "" else str(value)
