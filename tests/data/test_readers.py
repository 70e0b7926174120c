from __future__ import annotations

import json

import pytest

from purecover.data import readers
from purecover.data.errors import DataFormatError


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Force buffer refills inside strings, numbers and between records."""
    monkeypatch.setattr(readers, "_CHUNK", 7)


@pytest.mark.parametrize("indent", [None, 1])
def test_json_array_streams_every_record(tmp_path, tiny_chunks, indent):
    data = [{"a": i, "s": "x" * i, "n": [1.5, 22222, -3e5], "t": True} for i in range(25)] + [12345, "str", None]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data, indent=indent))
    got = list(readers.iter_json_array(path))
    assert [obj for _, obj in got] == data
    assert got[3][0].startswith("record 3 (line ")


def test_json_array_line_numbers(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n {"a": 1},\n {"a": 2},\n\n {"a": 3}\n]\n')
    assert [loc for loc, _ in readers.iter_json_array(path)] == [
        "record 0 (line 2)", "record 1 (line 3)", "record 2 (line 5)"]


def test_empty_array(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(" [ ] ")
    assert list(readers.iter_json_array(path)) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"a": 1}, {"a": 2', r"record 1 \(line 1\).*truncated"),
        ('[{"a": 1}, {"a": 2}', "record 2.*truncated"),
        ('[{"a": 1} {"a": 2}]', "expected ',' or ']'"),
        ('{"a": 1}', "expected a JSON array"),
        ("", "expected a JSON array"),
    ],
)
def test_bad_json_arrays(tmp_path, tiny_chunks, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message) as err:
        list(readers.iter_json_array(path))
    assert str(path) in str(err.value)


def test_jsonl_names_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n')
    it = readers.iter_jsonl(path)
    assert next(it) == ("line 1", {"a": 1})
    with pytest.raises(DataFormatError, match=r"a.jsonl:line 3: invalid JSON"):
        next(it)


def test_iter_records_detects_format(tmp_path):
    a = tmp_path / "a.json"
    a.write_text('\n  [{"x": 1}]')
    b = tmp_path / "b.jsonl"
    b.write_text('{"x": 1}\n{"x": 2}\n')
    assert [o for _, o in readers.iter_records(a)] == [{"x": 1}]
    assert [o for _, o in readers.iter_records(b)] == [{"x": 1}, {"x": 2}]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(readers.iter_records(tmp_path / "none.json"))
