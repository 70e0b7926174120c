"""`purecover.eval.method_selection`: the teacher's labels and the student's selections are checked line by line
(`LabelRecord`, `SelectionRecord`) before any method selects with them."""

from __future__ import annotations

import json

import pytest

from purecover.config import load_recipe
from purecover.eval.method_selection import method_labels, select_for_methods
from purecover.eval.methods import parse_methods
from purecover.records import CandidateDoc, CandidateRecord, LabelRecord, LineRecordError

DOCS = [CandidateDoc(doc_id=f"d{k}", title=f"T{k}", text=f"text {k}") for k in range(3)]
QUESTIONS = [CandidateRecord(qid=q, question="Q?", answers=["a"], docs=DOCS) for q in ("q1", "q2")]


def _label(qid: str, selected: list[int]) -> dict:
    return LabelRecord(qid=qid, selected=selected, selected_doc_ids=[f"d{k}" for k in selected],
                       gains=[0.5] * len(selected), objective=0.5, steps=["s"], answer="a", e=[1.0], W=[[0.5]] * 3,
                       bias_key=None, status="ok", reason=None, teacher={}).to_json_dict()


def _selection(qid: str, selected: list[int]) -> dict:
    return {"qid": qid, "selected": selected, "selected_doc_ids": [f"d{k}" for k in selected],
            "logits": [0.5, 0.25, 0.0], "probabilities": [0.4, 0.35, 0.25], "score_space": "logit"}


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_labels_are_read_by_qid_as_written_and_a_bad_line_is_named(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}"])
    [spec] = parse_methods([f"teacher:{tmp_path}"])
    rows = [_label("q1", [2, 0]), _label("q2", [1])]
    _write(tmp_path / "labels.jsonl", rows)
    labels = method_labels(recipe, tmp_path, spec)
    assert all(isinstance(r, LabelRecord) for r in labels.values())
    assert {q: r.to_json_dict() for q, r in labels.items()} == {"q1": rows[0], "q2": rows[1]}
    for bad, message in [({**rows[1], "status": "done"}, "field 'status': must be 'ok', 'fallback' or 'error'"),
                         ({**rows[1], "selected": [1.0]}, r"field 'selected\[0\]': must be an integer"),
                         (rows[0], "field 'qid': duplicate 'q1'")]:
        _write(tmp_path / "labels.jsonl", [rows[0], bad])
        with pytest.raises(LineRecordError, match=rf"labels\.jsonl:2: {message}"):
            method_labels(recipe, tmp_path, spec)


def test_student_selections_of_another_run_are_checked(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}"])
    specs = parse_methods([f"student:{tmp_path}"])
    _write(tmp_path / "selections.jsonl", [_selection("q1", [2, 0]), _selection("q2", [1])])
    chosen, _, _ = select_for_methods(specs, [1, 2], QUESTIONS, recipe, tmp_path, show_progress=False)
    assert chosen[(specs[0].name, 2)] == [[2, 0], [1]] and chosen[(specs[0].name, 1)] == [[2], [1]]
    old = {k: v for k, v in _selection("q2", [1]).items() if k != "logits"}
    _write(tmp_path / "selections.jsonl", [_selection("q1", [2, 0]), old])
    with pytest.raises(LineRecordError, match=r"selections\.jsonl:2: field 'logits': missing"):
        select_for_methods(specs, [1], QUESTIONS, recipe, tmp_path, show_progress=False)
