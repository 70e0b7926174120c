"""The selector prompt renders passages with the shared rule (`purecover.data.passage`), exactly as
before that rule was shared: exported selectors were trained on this rendering."""

from __future__ import annotations

from purecover.data.passage import doc_passage_text
from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt

DOCS = [{"doc_id": "a", "title": "Tollbridge", "text": "A market town on the Mirren river."},
        {"doc_id": "b", "title": "", "text": "An untitled fact about clocks."},
        {"doc_id": "c", "title": None, "text": "  Another untitled fact.  "},
        {"doc_id": "d", "title": "  Padded title ", "text": "\nPadded text.\n"},
        {"doc_id": "e", "title": "   ", "text": "Whitespace-only title."}]


def _former_body(d: dict) -> str:
    """The selector prompt's own rendering before the shared rule (kept here as the reference)."""
    title, text = (d.get("title") or "").strip(), (d.get("text") or "").strip()
    return f"{title}\n{text}" if title else text



def test_passage_lines_unchanged(tokenizer):
    scheme = IdentifierScheme("letters").check(tokenizer, len(DOCS))
    prompt = build_selector_prompt(tokenizer, "Where is Tollbridge?", DOCS, scheme, max_passage_tokens=192)
    lines = [f"{label}: {_former_body(d)}" for label, d in zip(scheme.labels, DOCS)]
    assert "Passages:\n" + "\n".join(lines) + "\n\nQuestion: Where is Tollbridge?" in prompt.text
    assert [doc_passage_text(d) for d in DOCS] == [_former_body(d) for d in DOCS]
