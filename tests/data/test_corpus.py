from __future__ import annotations

import pytest

from purecover.data import DataFormatError, load_examples
from purecover.data.corpus import Doc, content_doc_id, corpus_from_examples, load_corpus_jsonl, question_docs
from tests.conftest import hotpot_record, write_json, write_jsonl


def test_content_ids_are_stable_and_shared_corpus_dedups(tmp_path):
    path = write_json(tmp_path / "h.json", [hotpot_record("q1"), hotpot_record("q2")])
    exs = load_examples("hotpotqa", path)
    corpus = corpus_from_examples(exs)
    assert len(corpus) == 3  # both questions have the same three paragraphs
    own = question_docs(exs[0])
    assert [d.doc_id for d in own] == [d.doc_id for d in corpus.docs]
    assert own[0].doc_id == content_doc_id("Ada Brill", "Ada Brill was born in Tollbridge. She built clocks.")
    assert corpus.position(own[2].doc_id) == 2


def test_fingerprint_changes_with_content():
    a = corpus_from_examples(load_examples("hotpotqa", "demo", limit=2))
    b = corpus_from_examples(load_examples("hotpotqa", "demo", limit=3))
    assert a.fingerprint == corpus_from_examples(load_examples("hotpotqa", "demo", limit=2)).fingerprint
    assert a.fingerprint != b.fingerprint


def test_corpus_jsonl_both_layouts(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "1", "title": "Tollbridge", "text": "A market town."},
        {"id": 2, "contents": '"Corven"\nA fishing village.'},
        {"id": "3", "contents": "No title line at all."},
    ])
    corpus = load_corpus_jsonl(path)
    assert [(d.doc_id, d.title, d.text) for d in corpus.docs] == [
        ("1", "Tollbridge", "A market town."), ("2", "Corven", "A fishing village."), ("3", "", "No title line at all.")]
    assert corpus.title_index["corven"] == ["2"]
    assert Doc("x", "T", "body").contents == "T\nbody"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"id": "1", "text": "a"}, {"id": "1", "text": "b"}], "line 2: field 'id': duplicate passage id '1'"),
        ([{"title": "t", "text": "a"}], "line 1: field 'id or doc_id or _id': missing"),
        ([{"id": "1", "title": "t", "text": "   "}], "line 1: field 'text': is empty"),
        ([{"id": "1", "title": "t", "text": 5}], "field 'text': expected a string, got int"),
    ],
)
def test_bad_corpus_rows(tmp_path, rows, message):
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(DataFormatError, match=message):
        load_corpus_jsonl(path)


def test_bad_corpus_rows_skipped_and_counted(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "a"}, {"id": "2"}, {"id": "3", "text": "c"}])
    invalid = []
    corpus = load_corpus_jsonl(path, skip_invalid=True, invalid=invalid)
    assert [d.doc_id for d in corpus.docs] == ["1", "3"]
    assert [(r.location, r.field) for r in invalid] == [("line 2", "text")]
