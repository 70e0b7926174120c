"""The label stage's shards: batches by position, and the merge into labels.jsonl (checked, bytes kept)."""

from __future__ import annotations

import json

import pytest

from purecover.records import CandidateRecord, LabelRecord, LineRecordError
from purecover.teacher.label_record import stored, stored_nested
from purecover.teacher.shards import LABELS_FILE, batches, merge_label_shards, shard_path


def _label(qid: str, **changes) -> dict:
    record = LabelRecord(qid=qid, selected=[0], selected_doc_ids=["d0"], gains=[stored(0.1234567)], objective=0.5,
                         steps=["s"], answer="", e=[1.0], W=[[stored(1 / 3)]], bias_key=None, status="ok",
                         reason=None, fallback_reasons=[], stop="budget", teacher={"lam": 0.5})
    return {**record.to_json_dict(), **changes}


def _candidates(*qids: str) -> list[CandidateRecord]:
    return [CandidateRecord(qid=q, question="q", answers=[], docs=[]) for q in qids]


def _write_shards(run, world, records):
    for rank in range(world):
        path = shard_path(run, "labels", rank, world)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records[rank::world]))


def test_batches_are_cut_by_position():
    assert [list(b) for b in batches(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]


def test_stored_values_have_six_significant_digits_and_null_for_non_finite():
    assert stored(0.1234567) == 0.123457 and stored(float("inf")) is None
    assert stored_nested([[1 / 3, float("nan")], [2.0]]) == [[0.333333, None], [2.0]]


def test_merge_joins_shards_in_candidates_order_keeping_their_bytes(tmp_path):
    records = [_label(f"q{i}") for i in range(5)]
    records[3] = {**records[3], "future_key": 1}  # a key of a newer version is kept as written
    _write_shards(tmp_path, 2, records)
    candidates = _candidates(*(f"q{i}" for i in (4, 0, 3, 1, 2)))
    merged = merge_label_shards(tmp_path, candidates, 2)
    assert [r.qid for r in merged] == ["q4", "q0", "q3", "q1", "q2"]
    by_qid = {r["qid"]: r for r in records}
    assert (tmp_path / LABELS_FILE).read_text() == "".join(json.dumps(by_qid[c.qid]) + "\n" for c in candidates)


def test_merge_names_the_shard_line_and_field_of_a_bad_record(tmp_path):
    _write_shards(tmp_path, 1, [_label("q0"), _label("q1", status="done")])
    with pytest.raises(LineRecordError) as exc:
        merge_label_shards(tmp_path, _candidates("q0", "q1"), 1)
    assert str(exc.value).startswith(f"{shard_path(tmp_path, 'labels', 0, 1)}:2: field 'status': must be 'ok'")


def test_merge_refuses_a_missing_shard_or_question(tmp_path):
    _write_shards(tmp_path, 1, [_label("q0")])
    with pytest.raises(RuntimeError, match=r"labels\.0-of-2\.jsonl is missing: rank 0 did not finish"):
        merge_label_shards(tmp_path, _candidates("q0"), 2)
    with pytest.raises(RuntimeError, match=r"1 questions have no label \(first: 'q1'\)"):
        merge_label_shards(tmp_path, _candidates("q0", "q1"), 1)
