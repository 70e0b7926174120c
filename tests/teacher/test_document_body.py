"""The teacher's prompts render documents with the shared passage rule, exactly as before (calibration
template keys and LANCER rating prompts depend on it)."""

from __future__ import annotations

import pytest

from purecover.data.passage import doc_passage_text
from purecover.records import CandidateDoc
from purecover.teacher.prompts import document_body

DOCS = [{"title": "Tollbridge", "text": "A market town on the Mirren river."},
        {"title": "", "text": "An untitled fact."},
        {"title": None, "text": "  Another untitled fact.  "},
        {"title": "  Padded title ", "text": "\nPadded text.\n"},
        {"title": "   ", "text": "Whitespace-only title."},
        {"text": "No title key."}]


@pytest.mark.parametrize("doc", DOCS)
def test_document_body_is_the_shared_rule_and_unchanged(doc):
    title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
    former = f"{title}\n{text}" if title else text
    assert document_body(CandidateDoc(**doc)) == doc_passage_text(doc) == former
