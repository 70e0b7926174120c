"""The select stage: selections.jsonl for every qid, resumable with identical bytes, clear input errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from purecover.config import load_recipe
from purecover.models.selector import HFSelectorBackend, Selector
from purecover.select import select_stage
from purecover.select.select_stage import SELECTIONS_FILE, select_candidates
from tests.run_dirs import new_run_dir


def _run_copy(selector_run, tmp: Path, candidates_text: str | None = None):
    """A fresh run_dir holding the shared run's candidates (or `candidates_text`)."""
    run_dir = tmp / "run"
    new_run_dir(run_dir)
    if candidates_text is None:
        shutil.copy2(selector_run.run_path / "candidates.jsonl", run_dir / "candidates.jsonl")
    else:
        (run_dir / "candidates.jsonl").write_text(candidates_text, encoding="utf-8")
    return load_recipe(None, [f"run_dir={run_dir}", "student.dtype=float32"])


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def first_run(selector_run, selector_dir, tmp_path_factory):
    """The stage loads the selector itself here; later tests reuse the session's (see `reuse_selector`)."""
    recipe = _run_copy(selector_run, tmp_path_factory.mktemp("select"))
    summary = select_candidates(recipe, selector_dir, show_progress=False)
    return recipe, summary


@pytest.fixture
def reuse_selector(selector, monkeypatch):
    """Make the stage use the already loaded session selector (the stage closes its backend, so wrap it)."""
    calls = []

    def from_pretrained(path, backend="hf", **kwargs):
        calls.append((Path(path), backend, kwargs))
        return Selector(selector.tokenizer, selector.config, HFSelectorBackend(selector.backend.model))

    monkeypatch.setattr(select_stage.Selector, "from_pretrained", staticmethod(from_pretrained))
    return calls


def test_writes_a_valid_record_for_every_qid(first_run, candidates, selector):
    recipe, summary = first_run
    records = _records(recipe.run_path / SELECTIONS_FILE)
    assert [r["qid"] for r in records] == [c["qid"] for c in candidates]
    assert len(candidates) > select_stage.BATCH_SIZE  # more than one batch
    expected = selector.select_batch([c["question"] for c in candidates], [c["docs"] for c in candidates])
    for rec, cand, exp in zip(records, candidates, expected):
        assert set(rec) == {"qid", "selected", "selected_doc_ids", "logits", "probabilities", "score_space"}
        assert rec["score_space"] == "logit"  # the HF backend scores in logits
        n = len(cand["docs"])
        assert rec["selected_doc_ids"] == [cand["docs"][k]["doc_id"] for k in rec["selected"]]
        assert len(rec["logits"]) == len(rec["probabilities"]) == n
        assert sum(rec["probabilities"]) == pytest.approx(1.0)
        assert rec["selected"] and len(set(rec["selected"])) == len(rec["selected"])
        assert all(0 <= k < n for k in rec["selected"])
        np.testing.assert_allclose(rec["logits"], exp.logits, atol=1e-4, rtol=0)
    assert summary.status == "complete"
    assert summary.written == summary.questions == len(candidates)
    manifest = json.loads((recipe.run_path / "select.run.json").read_text())
    assert manifest["stage"] == "select" and manifest["summary"]["written"] == len(candidates)


def test_resume_after_torn_line_gives_identical_bytes(first_run, selector_dir, reuse_selector, monkeypatch):
    recipe, _ = first_run
    out = recipe.run_path / SELECTIONS_FILE
    complete = out.read_bytes()
    lines = complete.split(b"\n")
    # Kill in the second batch: 9 records complete, the 10th torn mid-line.
    out.write_bytes(b"\n".join(lines[:9]) + b"\n" + lines[9][: len(lines[9]) // 2])
    manifest_path = recipe.run_path / "select.run.json"
    killed = json.loads(manifest_path.read_text())
    killed["summary"] = {"status": "running"}  # what a kill mid-selection leaves
    manifest_path.write_text(json.dumps(killed))
    summary = select_candidates(recipe, selector_dir, show_progress=False)
    assert out.read_bytes() == complete
    assert summary.already_done == 9 and summary.repaired_lines == 1
    assert summary.written == len(lines) - 1 - 9
    assert reuse_selector == [(selector_dir, "hf", {"trust_remote_code": False, "dtype": "float32"})]

    # Everything done: nothing is loaded or written.
    def boom(*args, **kwargs):
        raise AssertionError("the selector must not be loaded when every qid is done")

    monkeypatch.setattr(select_stage.Selector, "from_pretrained", boom)
    again = select_candidates(recipe, selector_dir, show_progress=False)
    assert again == summary and out.read_bytes() == complete  # complete: skipped, the stored summary returned


def test_other_selector_refuses_to_resume(first_run, selector_dir, tmp_path):
    recipe, _ = first_run
    other = tmp_path / "other"
    shutil.copytree(selector_dir, other)
    config = json.loads((other / "selector_config.json").read_text())
    config["tau3"] += 1.0
    (other / "selector_config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="different selector"):
        select_candidates(recipe, other, show_progress=False)


def test_empty_candidates_get_an_empty_selection(selector_run, selector_dir, candidates, tmp_path, reuse_selector):
    rows = [candidates[0], {**candidates[1], "docs": []}]
    recipe = _run_copy(selector_run, tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    summary = select_candidates(recipe, selector_dir, show_progress=False)
    records = _records(recipe.run_path / SELECTIONS_FILE)
    assert records[1] == {"qid": rows[1]["qid"], "selected": [], "selected_doc_ids": [], "logits": [],
                          "probabilities": [], "score_space": "logit"}
    assert len(records[0]["logits"]) == len(rows[0]["docs"])
    assert summary.no_candidates == 1


def test_input_errors_name_file_line_and_field(selector_run, selector_dir, candidates, tmp_path):
    too_many = {**candidates[0], "docs": candidates[0]["docs"] + [{"title": "x", "text": "y"}]}
    recipe = _run_copy(selector_run, tmp_path, json.dumps(candidates[1]) + "\n" + json.dumps(too_many) + "\n")
    with pytest.raises(ValueError, match=r"candidates\.jsonl:2: field 'docs': 7 candidates.*k1=6"):
        select_candidates(recipe, selector_dir, show_progress=False)
    (recipe.run_path / "candidates.jsonl").write_text(json.dumps({"qid": "a", "docs": []}) + "\n")
    with pytest.raises(ValueError, match=r"candidates\.jsonl:1: field 'question'"):
        select_candidates(recipe, selector_dir, show_progress=False)
    with pytest.raises(FileNotFoundError, match="purecover export"):
        select_candidates(recipe, tmp_path / "nowhere", show_progress=False)


def test_selection_records_keep_their_keys_and_a_bad_line_is_named(tmp_path):
    """selections.jsonl lines are built as `SelectionRecord`s with the keys every version wrote, in order; the
    summary checks each line read back and names the line and field of a bad one."""
    from purecover.models.selector import SelectionResult
    from purecover.records import CandidateDoc, LineRecordError, SelectorConfig

    docs = [CandidateDoc(doc_id="d1", text="a"), CandidateDoc(text="b")]
    result = SelectionResult([1], [0.5, 2.0], [0.2, 0.8])
    line = select_stage.selection_record("q1", result, docs).to_json_dict()
    assert json.dumps(line) == json.dumps({"qid": "q1", "selected": [1], "selected_doc_ids": ["2"],
                                           "logits": [0.5, 2.0], "probabilities": [0.2, 0.8], "score_space": "logit"})
    assert list(select_stage.selection_record("q1", result, docs, with_doc_ids=True).to_json_dict())[-1] == "doc_ids"
    out = tmp_path / SELECTIONS_FILE
    out.write_text(json.dumps(line) + "\n" + json.dumps({**line, "qid": "q2", "selected": [1.0]}) + "\n")
    progress = select_stage.SelectProgress(written=2, already_done=0, repaired_lines=0, elapsed=1.0)
    config = SelectorConfig(base_model="m", identifiers={"name": "letters", "separator": "\n", "labels": ["A", "B"]},
                            prompt_template={}, k1=2, tau3=0.0, k_max=None, min_select=1)
    with pytest.raises(LineRecordError, match=rf"{SELECTIONS_FILE}:2: field 'selected\[0\]': must be an integer"):
        select_stage.summarize_selections(out, 2, progress, "hf", tmp_path, config)
    out.write_text(json.dumps(line) + "\n")
    assert select_stage.summarize_selections(out, 1, progress, "hf", tmp_path, config).mean_selected == 1.0


def test_the_stage_selects_only_what_evaluation_scores(tmp_path_factory, sample_dir):
    """eval.questions heldout (the default, no eval.path): the select stage selects for the student's test split
    only, the questions evaluation scores (the training and calibration questions were 80 % of its time on the
    real recipes); eval.questions all selects for every question, under another config hash."""
    from purecover.data.splits import question_split
    from purecover.select.select_stage import run_select_stage
    from purecover.train.export_stage import run_export_stage
    from tests.models.conftest import _recipe, tiny_model_dir, trained_run

    split = ("student.eval_fraction=0.6",)  # 2 of the 10 questions in the test split (0.25: none)
    recipe = trained_run(tmp_path_factory, sample_dir, lora=True, extra=split)
    run_export_stage(recipe)
    run = recipe.run_path
    every = [c["qid"] for c in _records(run / "candidates.jsonl")]
    test = [q for q in every if question_split(q, recipe.student.eval_fraction, recipe.student.calibration_share,
                                               recipe.seed) == "test"]
    assert 0 < len(test) < len(every) and recipe.eval.questions == "heldout"
    summary = run_select_stage(recipe, show_progress=False)
    assert [r["qid"] for r in _records(run / SELECTIONS_FILE)] == test and summary.questions == len(test)
    hashed = json.loads((run / "select.run.json").read_text())["config_hash"]
    everything = _recipe(run, tiny_model_dir(tmp_path_factory, sample_dir), True, (*split, "eval.questions=all"))
    from purecover.contract import StageBlockedError

    with pytest.raises(StageBlockedError, match="selections.jsonl was made with a different selector or data"):
        run_select_stage(everything, show_progress=False)  # one file never mixes two question sets
    (run / SELECTIONS_FILE).unlink()
    run_select_stage(everything, show_progress=False)
    assert [r["qid"] for r in _records(run / SELECTIONS_FILE)] == every
    assert json.loads((run / "select.run.json").read_text())["config_hash"] != hashed
    # a part-written file of every question, resumed as the heldout set (as an all-question run of an older
    # version left it under the same hash): the records outside the test split are dropped and counted
    selected = {r["qid"]: r for r in _records(run / SELECTIONS_FILE)}
    cut = every.index(test[-1])  # the last test question is still to select
    (run / SELECTIONS_FILE).write_text("".join(json.dumps(selected[q]) + "\n" for q in every[:cut]))
    (run / "select.run.json").unlink()
    resumed = run_select_stage(recipe, show_progress=False)
    assert [r["qid"] for r in _records(run / SELECTIONS_FILE)] == test
    outside = sum(q not in test for q in every[:cut])
    assert outside > 0 and resumed.dropped_records == outside and resumed.questions == len(test)
    assert resumed.already_done == len(test) - 1 and resumed.written == 1
