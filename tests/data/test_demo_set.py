"""The bundled demo set is valid HotpotQA, large enough, and our own multi-hop questions."""

from __future__ import annotations

import json
from collections import Counter

from purecover.data import demo_path, load_examples


def test_demo_set_shape():
    raw = json.loads(demo_path().read_text(encoding="utf-8"))
    exs = load_examples("hotpotqa", "demo")
    assert len(exs) == len(raw) >= 30
    types = Counter(e.meta["type"] for e in exs)
    assert types["bridge"] >= 10 and types["comparison"] >= 5
    texts_by_title: dict[str, str] = {}
    for ex in exs:
        assert 8 <= len(ex.paragraphs) <= 10
        assert len(ex.supporting_titles) == 2
        for p in ex.paragraphs:  # a title means one paragraph everywhere
            assert texts_by_title.setdefault(p.title, p.text) == p.text
        answer = ex.answers[0]
        if answer not in ("yes", "no"):
            assert any(answer in p.text for p in ex.supporting_paragraphs), ex.qid
    assert len({e.qid for e in exs}) == len(exs)
