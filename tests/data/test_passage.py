"""The one passage rendering rule (`purecover.data.passage`) and where it is used."""

from __future__ import annotations

import pytest

from purecover.data.corpus import Doc, question_docs
from purecover.data.loaders import ExampleSource, demo_path
from purecover.data.passage import doc_passage_text, passage_text
from purecover.data.samples import SAMPLE_FILES

CASES = [
    (("Paris", "Paris is in France."), "Paris\nParis is in France."),
    (("", "Untitled fact."), "Untitled fact."),
    ((None, "Untitled fact."), "Untitled fact."),
    (("   ", "Blank title."), "Blank title."),
    ((" Padded ", "  text with spaces \n"), "Padded\ntext with spaces"),
    (("Title", ""), "Title\n"),
    (("Title", None), "Title\n"),
    ((None, None), ""),
    (("Multi word title", "Line one.\nLine two."), "Multi word title\nLine one.\nLine two."),
]


@pytest.mark.parametrize(("parts", "expected"), CASES)
def test_passage_text_rule(parts, expected):
    title, text = parts
    assert passage_text(title, text) == expected
    # the rule the selector prompt, the teacher's prompts and the eval baselines always applied
    t, x = (title or "").strip(), (text or "").strip()
    assert passage_text(title, text) == (f"{t}\n{x}" if t else x)


@pytest.mark.parametrize(("parts", "expected"), CASES)
def test_doc_dict_variant(parts, expected):
    title, text = parts
    assert doc_passage_text({"doc_id": "d", "title": title, "text": text, "score": 1.0}) == expected
    if title is None:
        assert doc_passage_text({"text": text}) == expected


def test_doc_contents_follow_the_rule():
    assert Doc("d1", "Paris", "Paris is in France.").contents == "Paris\nParis is in France."
    assert Doc("d2", "", "Untitled.").contents == "Untitled."
    assert Doc("d3", "Padded ", " text").contents == "Padded\ntext"


@pytest.mark.samples
@pytest.mark.parametrize("dataset", [*SAMPLE_FILES, "demo"])
def test_real_passages_render_as_before(sample_file, dataset):
    """No real passage has whitespace around its title or text, so the former renderings of the
    corpus (`title\\ntext` unstripped) and of the teacher's embedding estimator (joined, then
    stripped) equal the rule on every one of them."""
    source = ExampleSource("hotpotqa", demo_path()) if dataset == "demo" else ExampleSource(dataset, sample_file(dataset))
    n = 0
    for example in source:
        for doc in question_docs(example):
            rule = passage_text(doc.title, doc.text)
            assert doc.contents == rule == (f"{doc.title}\n{doc.text}" if doc.title else doc.text)
            assert rule == f"{doc.title or ''}\n{doc.text}".strip()
            n += 1
    assert n > 300
