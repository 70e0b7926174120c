"""A lone UTF-16 surrogate escape ("\\ud800") in a dataset file is a located DataFormatError."""

from __future__ import annotations

import json

import pytest

from purecover.data import readers
from purecover.data.errors import DataFormatError
from purecover.data.loaders import ExampleSource
from tests.conftest import hotpot_record

# json.dumps writes a lone surrogate as the 6-character escape \ud800, exactly what such files hold.
LONE = "Who \ud800 built the clocks?"


def _check(err: DataFormatError, path, location: str, field: str) -> None:
    assert err.source == str(path)
    assert err.location == location
    assert err.field == field
    msg = str(err)
    assert msg.startswith(f"{path}:{location}: field {field!r}: holds a lone surrogate \\ud800 at character 4")
    assert "fix or remove it in the file" in msg


def test_jsonl_reader_names_file_line_and_field(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [hotpot_record("q1"), hotpot_record("q2", question=LONE)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert "\\ud800" in path.read_text(encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        list(readers.iter_records(path))
    _check(info.value, path, "line 2", "question")


def test_json_array_reader_names_record_and_nested_field(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "_CHUNK", 11)  # the escape may be cut by the buffer edge
    record = hotpot_record("q2")
    record["context"][1][1][1] = LONE
    path = tmp_path / "data.json"
    path.write_text(json.dumps([hotpot_record("q1"), record], indent=1), encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        list(readers.iter_json_array(path))
    assert info.value.location.startswith("record 1 (line ")
    assert info.value.field == "context[1][1][1]"
    assert "lone surrogate \\ud800" in str(info.value)


def test_example_source_stops_with_the_error_by_default(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([hotpot_record("q1"), hotpot_record("q2", answer="\udfff")]), encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        list(ExampleSource("hotpotqa", path))
    assert info.value.location == "record 1 (line 1)" and info.value.field == "answer"
    assert "lone surrogate \\udfff at character 0" in str(info.value)


def test_example_source_skip_invalid_counts_it(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [hotpot_record("q1"), hotpot_record("q2", question=LONE), hotpot_record("q3")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    source = ExampleSource("hotpotqa", path, skip_invalid=True)
    assert [e.qid for e in source] == ["q1", "q3"]
    assert source.n_read == 3
    assert [(r.location, r.field) for r in source.invalid] == [("line 2", "question")]
    assert "lone surrogate" in source.invalid[0].problem


def test_surrogate_pairs_and_escaped_backslashes_are_fine(tmp_path):
    path = tmp_path / "data.jsonl"
    # a valid pair (one emoji), and the literal text \ud800 (escaped backslash)
    rows = [hotpot_record("q1", question="Which clock? \U0001F600"), hotpot_record("q2", answer="\\ud800")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert "\\ud83d\\ude00" in path.read_text(encoding="utf-8")
    examples = list(ExampleSource("hotpotqa", path))
    assert examples[0].question.endswith("\U0001F600")
    assert examples[1].answers == ["\\ud800"]


def test_lone_surrogate_in_a_key():
    with pytest.raises(DataFormatError, match=r"field 'meta.<key>': holds a lone surrogate \\ud800"):
        readers.check_lone_surrogates({"meta": {"a\ud800": 1}}, "f.json", "line 1")


def test_corpus_jsonl_lone_surrogate_is_named_or_skipped_and_counted(tmp_path):
    from purecover.data.corpus import load_corpus_jsonl

    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "a", "title": "A", "text": "fine"}\n{"id": "b", "title": "B", "text": "bad \\ud800 x"}\n'
                    '{"id": "c", "title": "C", "text": "also fine"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl.*line 2.*'text'.*lone surrogate"):
        load_corpus_jsonl(path)
    invalid = []
    corpus = load_corpus_jsonl(path, skip_invalid=True, invalid=invalid)
    assert len(corpus) == 2 and len(invalid) == 1 and invalid[0].location == "line 2"
