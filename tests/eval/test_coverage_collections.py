"""Coverage collections (`purecover.eval.coverage_collections`): CoverageBench's and CRUX's layouts and the
bring-your-own form load into the same objects, through the real loaders; every malformed line is named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from purecover.eval.coverage_collections import (
    CoverageDataError,
    load_collection,
    read_judgments,
    read_nugget_qrels,
    read_ranked,
    read_topics,
)

TOPICS = [{"topic_id": "101", "query": "effects of the 2011 floods", "nuggets": ["crop losses", "evacuations"]},
          {"topic_id": "102", "query": "history of the canal", "nuggets": ["built in 1820"]}]
QRELS = "101 n1 docA 2\n101 n2 docB 1\n101 n1 docC 0\n102 n1 docD 1\n"


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def coveragebench_copy(root):
    """A local copy of the Hub dataset's layout: one configuration per folder, declared in the card."""
    (root / "cast2020").mkdir(parents=True)
    _write(root / "cast2020" / "test.jsonl", "".join(json.dumps(t) + "\n" for t in TOPICS))
    _write(root / "README.md", "---\nconfigs:\n- config_name: cast2020\n  data_files:\n  - split: test\n"
                               "    path: cast2020/test.jsonl\n---\n# a local copy\n")
    return root


def test_a_coveragebench_layout_loads_through_datasets(tmp_path):
    repo = coveragebench_copy(tmp_path / "coveragebench")
    qrels = _write(tmp_path / "cast2020.qrels", QRELS)
    collection = load_collection("coveragebench:cast2020", qrels, repo=str(repo))
    assert collection.topics["101"].nuggets == ("crop losses", "evacuations")
    assert collection.qrels == {"101": {"docA": {"n1": 2}, "docB": {"n2": 1}}, "102": {"docD": {"n1": 1}}}
    assert collection.nuggets_of("101") == {"n1", "n2"} and collection.judgments is None
    with pytest.raises(ValueError, match="unknown CoverageBench configuration 'cast2021'"):
        load_collection("coveragebench:cast2021", qrels, repo=str(repo))


def test_a_crux_layout_loads_sub_questions_and_judgments(tmp_path):
    topics = _write(tmp_path / "topics.jsonl", json.dumps(
        {"id": "multi_news-7", "question": "what happened", "subquestions": ["who", "when", "where"]}) + "\n")
    qrels = _write(tmp_path / "qrels.txt", "multi_news-7 0 d1 1\nmulti_news-7 1 d2 1\n")
    judge = _write(tmp_path / "judge.jsonl", json.dumps({"id": "multi_news-7", "docid": "d1", "rating": [5, 0, 2]})
                   + "\n" + json.dumps({"id": "multi_news-7", "docid": "d2", "ratings": [0, 4, 3]}) + "\n")
    collection = load_collection(topics, qrels, judge)
    assert collection.topics["multi_news-7"].nuggets == ("who", "when", "where")
    assert collection.judgments == {"multi_news-7": {"d1": (5, 0, 2), "d2": (0, 4, 3)}}


@pytest.mark.parametrize(("text", "message"), [
    ('{"topic_id": "1"}\n', "topics.jsonl:line 1: field 'query or question or title': missing"),
    ('{"topic_id": "1", "query": "q"}\n{"qid": "1", "query": "again"}\n',
     "topics.jsonl:line 2: field 'id': duplicate question id '1' (first at line 1)"),
    ('{"topic_id": "1", "query": "q", "nuggets": "one"}\n', "topics.jsonl:line 1: field 'nuggets': expected a list"),
    ('{"topic_id": "1", "query": "q", "nuggets": ["a", 2]}\n', "topics.jsonl:line 1: field 'nuggets[1]': expected a "
                                                                "string"),
    ('{"topic_id": "1", "query": "q"\n', "topics.jsonl:line 1: invalid JSON"),
    ('{"query": "q"}\n', "topics.jsonl:line 1: field 'topic_id or qid or id or query_id': missing"),
])
def test_bad_topics_name_file_line_and_field(tmp_path, text, message):
    """Topics are read by the data stage's loader (`purecover.data.loaders.coverage`), with its errors."""
    with pytest.raises(ValueError, match=re.escape(message)):
        read_topics(_write(tmp_path / "topics.jsonl", text))
    assert read_topics(_write(tmp_path / "ok.json", json.dumps(TOPICS)))["102"].query == "history of the canal"


@pytest.mark.parametrize(("text", "message"), [
    ("101 n1 docA\n", "q.txt:1: a qrels line has 4 columns"),
    ("101 n1 docA 1\n101 n1 docA high\n", "q.txt:2: field 'rel': 'high' is not an integer"),
    ("101 n1 docA 1\n\n101 n1 docA 2\n", "q.txt:3: field 'doc_id': 'docA' is judged twice for nugget 'n1'"),
    ("\n", "q.txt: holds no judgment"),
])
def test_bad_qrels_name_file_line_and_field(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_nugget_qrels(_write(tmp_path / "q.txt", text))


@pytest.mark.parametrize(("rows", "message"), [
    ([{"id": "1", "docid": "a", "ratings": [1, 2]}, {"id": "1", "docid": "b", "ratings": [1]}],
     "j.jsonl:2: field 'ratings': 1 ratings, but topic '1' has 2 sub-questions"),
    ([{"id": "1", "docid": "a", "ratings": [6]}], "j.jsonl:1: field 'ratings': must be a list of integers 0-5"),
    ([{"id": "1", "ratings": [1]}], "j.jsonl:1: field 'docid': missing"),
])
def test_bad_judgments_name_file_line_and_field(tmp_path, rows, message):
    with pytest.raises(CoverageDataError, match=message):
        read_judgments(_write(tmp_path / "j.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))


def test_runs_are_trec_files_by_rank_or_selections_as_written(tmp_path):
    trec = _write(tmp_path / "bm25.trec", "101 Q0 docB 2 1.5 bm25\n101 Q0 docA 1 2.5 bm25\n102 Q0 docD 1 1 bm25\n")
    assert read_ranked(trec) == {"101": ["docA", "docB"], "102": ["docD"]}
    sel = _write(tmp_path / "selections.jsonl", json.dumps({"qid": "101", "selected": [1, 0], "selected_doc_ids":
                                                            ["docB", "docA"], "logits": [], "probabilities": []}) + "\n")
    assert read_ranked(sel) == {"101": ["docB", "docA"]}
    byo = _write(tmp_path / "mine.jsonl", '{"qid": 101, "doc_ids": ["docA"]}\n{"qid": "101", "doc_ids": []}\n')
    with pytest.raises(CoverageDataError, match="mine.jsonl:2: field 'qid': question '101' appears twice"):
        read_ranked(byo)
    with pytest.raises(CoverageDataError, match="twice.jsonl:1: field 'doc_ids': lists a document twice"):
        read_ranked(_write(tmp_path / "twice.jsonl", '{"qid": "1", "doc_ids": ["a", "a"]}\n'))


def test_a_hub_datasets_qrels_file_is_fetched_through_the_hub_cache(tmp_path):
    """``hf://datasets/OWNER/NAME/PATH`` goes through huggingface_hub's own download and cache (here a cache laid
    out as huggingface_hub writes it, read offline); a file it cannot find is one clear error."""
    from purecover.data.errors import HubUnavailableError
    from purecover.data.loaders.hub import resolve_hub_file

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "cache" / "datasets--hltcoe--coveragebench"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    cached = repo / "snapshots" / commit / "qrels" / "cast2020.qrels"
    cached.parent.mkdir(parents=True)
    cached.write_text(QRELS)
    found = resolve_hub_file("hf://datasets/hltcoe/coveragebench/qrels/cast2020.qrels", cache_dir=tmp_path / "cache")
    assert found.read_text() == QRELS and read_nugget_qrels(found)["102"] == {"docD": {"n1": 1}}
    assert resolve_hub_file("local/qrels.txt") == Path("local/qrels.txt")
    with pytest.raises(HubUnavailableError, match="cannot fetch hf://datasets/hltcoe/coveragebench/qrels/none.qrels"):
        resolve_hub_file("hf://datasets/hltcoe/coveragebench/qrels/none.qrels", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="hf://datasets/OWNER/NAME/PATH"):
        resolve_hub_file("hf://datasets/hltcoe")
