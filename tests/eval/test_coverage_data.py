"""CoverageBench-style topics and nugget qrels."""

from __future__ import annotations

import json

import pytest

from purecover.data import DataFormatError
from purecover.eval.coverage_data import (
    load_coverage_data,
    load_nugget_qrels,
    load_topics,
    run_nuggets,
    topic_pool,
)
from purecover.eval.selection_metrics import alpha_ndcg, strecall


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def topics_file(tmp_path):
    return _jsonl(tmp_path / "topics.jsonl", [
        {"topic_id": "t1", "query": "q one", "nuggets": ["first", "second", "third"]},
        "",
        {"topic_id": 2, "query": "q two", "nuggets": [{"id": "n1", "text": "a"}, {"id": 7, "text": "b"}]},
    ])


def test_load_topics(topics_file):
    topics = load_topics(topics_file)
    assert list(topics) == ["t1", "2"]
    assert topics["t1"].nugget_ids == ["0", "1", "2"]
    assert topics["t1"].nuggets["1"] == "second"
    assert topics["2"].nugget_ids == ["n1", "7"] and topics["2"].query == "q two"


def test_trec_qrels_and_worked_example(tmp_path, topics_file):
    # the REFERENCES worked example: A = {1,2}, B = {1}, C = {3}, D = {} as nuggets "0", "1", "2"
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("# topic nugget doc rel\n"
                     "t1 0 A 1\nt1 1 A 2\nt1 0 B 1\nt1 2 C 1\nt1 1 B 0\n\nt1 0 D 0\n2 n1 X 1\n", encoding="utf-8")
    data = load_coverage_data(topics_file, qrels)
    assert data.qrels[("t1", "A")] == {"0", "1"}
    assert data.qrels[("t1", "B")] == {"0"}
    assert data.qrels[("t1", "D")] == set()  # judged, no nugget
    assert data.qrels[("2", "X")] == {"n1"}
    run = data.run_nuggets("t1", ["B", "A", "D", "C"])
    assert [round(alpha_ndcg(run, k), 6) for k in (1, 2, 3, 4)] == [0.5, 0.739812, 0.675613, 0.825106]
    assert strecall(run, 2, data.topics["t1"].nugget_ids) == pytest.approx(2 / 3)
    # the judged pool of t1 is the same four documents, so the full-pool ideal is the same
    assert alpha_ndcg(run, 4, ideal_pool=data.pool("t1")) == pytest.approx(alpha_ndcg(run, 4))
    assert run_nuggets(data.qrels, "t1", ["unjudged"]) == [set()]
    assert len(topic_pool(data.qrels, "2")) == 1


def test_jsonl_qrels(tmp_path):
    path = _jsonl(tmp_path / "qrels.jsonl", [
        {"topic_id": "t1", "doc_id": "d1", "nugget_id": "0", "relevance": 1},
        {"topic_id": "t1", "doc_id": "d1", "nugget_id": 1, "relevance": 0.5},
        {"topic_id": "t1", "doc_id": "d2", "nugget_id": "0", "relevance": 0},
    ])
    assert load_nugget_qrels(path) == {("t1", "d1"): {"0", "1"}, ("t1", "d2"): set()}


@pytest.mark.parametrize("rows, field, line", [
    (["{not json"], None, 1),
    ([{"query": "q", "nuggets": []}], "topic_id", 1),
    ([{"topic_id": "t", "nuggets": []}], "query", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": "abc"}], "nuggets", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": [3]}], "nuggets[0]", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": [{"text": "x"}]}], "nuggets[0].id", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": [{"id": "a"}]}], "nuggets[0].text", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}],
     "nuggets[1]", 1),
    ([{"topic_id": "t", "query": "q", "nuggets": []}, {"topic_id": "t", "query": "q", "nuggets": []}],
     "topic_id", 2),
    ([{"topic_id": "t", "query": "q", "nuggets": []}, "", "[1, 2]"], None, 3),
])
def test_topics_errors(tmp_path, rows, field, line):
    path = _jsonl(tmp_path / "topics.jsonl", rows)
    with pytest.raises(ValueError) as err:
        load_topics(path)
    assert isinstance(err.value, DataFormatError)
    assert err.value.field == field
    assert str(path) in str(err.value) and f"line {line}" in str(err.value)


@pytest.mark.parametrize("text, field, line", [
    ("t1 0 A 1\nt1 0 A\n", "relevance", 2),
    ("t1 0\n", "doc_id", 1),
    ("t1 0 A 1 extra\n", None, 1),
    ("t1 0 A high\n", "relevance", 1),
    ('{"topic_id": "t1", "doc_id": "A", "nugget_id": "0"}\n', "relevance", 1),
    ('{"topic_id": "t1", "doc_id": "A", "nugget_id": "0", "relevance": true}\n', "relevance", 1),
    ('{"topic_id": "t1", "nugget_id": "0", "relevance": 1}\n', "doc_id", 1),
    ('{"topic_id": "t1", "doc_id": ["A"], "nugget_id": "0", "relevance": 1}\n', "doc_id", 1),
    ('{"topic_id": "t1", "doc_id": "A", "nugget_id": "0", "relevance": 1}\nt1 0 A 1\n', None, 2),
])
def test_qrels_errors(tmp_path, text, field, line):
    path = tmp_path / "qrels"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_nugget_qrels(path)
    assert isinstance(err.value, DataFormatError)
    assert err.value.field == field
    assert str(path) in str(err.value) and f"line {line}" in str(err.value)


def test_qrels_checked_against_topics(tmp_path, topics_file):
    topics = load_topics(topics_file)
    unknown_topic = tmp_path / "a.txt"
    unknown_topic.write_text("t1 0 A 1\nt9 0 A 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: field 'topic_id'"):
        load_nugget_qrels(unknown_topic, topics)
    unknown_nugget = tmp_path / "b.txt"
    unknown_nugget.write_text("t1 5 A 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1: field 'nugget_id'.*no nugget '5'"):
        load_nugget_qrels(unknown_nugget, topics)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_topics(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError):
        load_nugget_qrels(tmp_path / "nope.txt")
