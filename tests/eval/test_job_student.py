"""The evaluate stage with the teacher's labels and a real (tiny) distilled student.

Reuses the trained + exported tiny run of tests/models/conftest.py (demo set, 10 questions), copied
so this module's outputs never touch the shared run.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from purecover.utils.io import read_jsonl
from tests.models.conftest import exported_run
from tests.run_dirs import new_run_dir

pytestmark = pytest.mark.samples


def _copy_run(src: Path, dst: Path) -> Path:
    new_run_dir(dst)
    for name in ("candidates.jsonl", "labels.jsonl", "data.run.json", "label.run.json"):
        shutil.copy2(src / name, dst / name)
    shutil.copytree(src / "selector", dst / "selector")
    return dst


@pytest.fixture(scope="module")
def student_recipe(tmp_path_factory, sample_dir, tiny_generator_dir):
    base = exported_run(tmp_path_factory, sample_dir)
    run_dir = _copy_run(base.run_path, tmp_path_factory.mktemp("eval_student") / "run")
    ev = dataclasses.replace(base.eval, generator=str(tiny_generator_dir), methods=["retrieval", "teacher", "student"],
                             budgets=[1, 3], max_new_tokens=3, dtype="float32", device="cpu", table_budget=3)
    # held out at 0.6: demo-003, -004 (the test split: two of the ten questions) and demo-006, -009 (calibration)
    student = dataclasses.replace(base.student, eval_fraction=0.6)
    return dataclasses.replace(base, run_dir=str(run_dir), eval=ev, student=student)


def test_heldout_questions_only_with_teacher_and_student(student_recipe):
    from purecover.contract import run_stage
    from purecover.data.splits import question_split

    recipe = student_recipe
    summary = run_stage("evaluate", recipe, show_progress=False)
    held = [r["qid"] for _, r in read_jsonl(recipe.run_path / "candidates.jsonl")
            if question_split(r["qid"], recipe.student.eval_fraction, recipe.student.calibration_share,
                              recipe.seed) == "test"]  # the test split: neither trained on nor used for τ3
    assert len(held) == 2 and summary.questions == len(held)
    labels = {r["qid"]: r for _, r in read_jsonl(recipe.run_path / "labels.jsonl")}
    selections = {r["qid"]: r for _, r in read_jsonl(recipe.run_path / "selections.jsonl")}
    for k in (1, 3):
        pred_dir = recipe.run_path / "eval" / "predictions"
        teacher = {r["qid"]: r for _, r in read_jsonl(pred_dir / f"teacher@{k}.jsonl")}
        student = {r["qid"]: r for _, r in read_jsonl(pred_dir / f"student@{k}.jsonl")}
        assert sorted(teacher) == sorted(student) == sorted(held)
        for qid in held:
            assert teacher[qid]["selected"] == labels[qid]["selected"][:k]  # selector order kept
            assert student[qid]["selected"] == selections[qid]["selected"][:k]
    assert (recipe.run_path / "select.run.json").is_file()
    # the time each stored method took to choose, from the stage that made it
    from datetime import datetime

    metrics = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    select = json.loads((recipe.run_path / "select.run.json").read_text())["summary"]
    assert metrics["results"]["student"]["3"]["select_ms"] == round(1000 / select["questions_per_second"], 3)
    label = json.loads((recipe.run_path / "label.run.json").read_text())
    wall = (datetime.fromisoformat(label["finished"]) - datetime.fromisoformat(label["started"])).total_seconds()
    done = label["summary"].get("written") or label["summary"]["questions"]
    assert metrics["results"]["teacher"]["1"]["select_ms"] == round(1000 * wall / done, 3)


def test_teacher_and_student_get_alpha_ndcg_and_subtopic_recall(student_recipe):
    """The set-wise teacher and student are ranked as they selected (best first, cut to K, not padded): their
    α-nDCG@K and subtopic recall@K, worked out directly per question (each gold paragraph one subtopic), and
    their means in metrics.json and rows in report.md."""
    import math

    from purecover.contract import run_stage

    recipe = student_recipe
    run_stage("evaluate", recipe, show_progress=False)  # done by the test above when run in one process
    candidates = {r["qid"]: r for _, r in read_jsonl(recipe.run_path / "candidates.jsonl")}
    metrics = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    pred_dir = recipe.run_path / "eval" / "predictions"
    for method in ("teacher", "student"):
        for k in (1, 3):
            rows = [r for _, r in read_jsonl(pred_dir / f"{method}@{k}.jsonl")]
            for row in rows:
                c = candidates[row["qid"]]
                gold = set(c["gold_doc_ids"])
                assert gold  # the demo set has supporting paragraphs
                is_gold = [d["doc_id"] in gold for d in c["docs"]]
                dcg = sum(1 / math.log2(r + 2) for r, i in enumerate(row["selected"]) if is_gold[i])
                ideal = sum(1 / math.log2(r + 2) for r in range(min(k, sum(is_gold))))
                assert row["alpha_ndcg"] == (pytest.approx(dcg / ideal) if ideal else None)
                assert row["subtopic_recall"] == pytest.approx(sum(is_gold[i] for i in row["selected"]) / len(gold))
            sub = metrics["results"][method][str(k)]["subtopics"]
            assert sub["n_recall"] == len(rows) and sub["n_no_subtopics"] == 0
            assert sub["recall"] == pytest.approx(sum(r["subtopic_recall"] for r in rows) / len(rows))
    section = (recipe.run_path / "eval" / "report.md").read_text().split("## α-nDCG@K / subtopic recall@K")[1]
    for method in ("retrieval", "teacher", "student"):
        assert f"| {method} |" in section.split("\n## ")[0]


def test_ablation_run_directory_as_a_method(student_recipe, tmp_path):
    """`teacher:DIR` reads another run's labels (here a copy with reversed selections)."""
    from purecover.contract import run_stage

    other = tmp_path / "ablation"
    other.mkdir()
    rows = [dict(r, selected=list(reversed(r["selected"]))) for _, r in read_jsonl(student_recipe.run_path /
                                                                                      "labels.jsonl")]
    (other / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ev = dataclasses.replace(student_recipe.eval, methods=["teacher", f"teacher:{other}"], budgets=[3])
    recipe = dataclasses.replace(student_recipe, eval=ev)
    run_stage("evaluate", recipe, show_progress=False)
    pred_dir = recipe.run_path / "eval" / "predictions"
    main = {r["qid"]: r["selected"] for _, r in read_jsonl(pred_dir / "teacher@3.jsonl")}
    slug = f"teacher_{str(other).strip('/').replace('/', '_')}"
    ablation = {r["qid"]: r["selected"] for _, r in read_jsonl(pred_dir / f"{slug}@3.jsonl")}
    for qid, sel in main.items():
        assert ablation[qid] == list(reversed(sel))[:3] or len(sel) > 3


def test_test_set_from_eval_path(student_recipe, sample_file, tmp_path):
    """eval.path: candidates and student selections for another file, under run_dir/eval/."""
    from purecover.contract import run_stage

    ev = dataclasses.replace(student_recipe.eval, path=str(sample_file("hotpotqa")), limit=3,
                             methods=["retrieval", "student"], budgets=[2])
    recipe = dataclasses.replace(student_recipe, eval=ev)
    summary = run_stage("evaluate", recipe, show_progress=False)
    eval_dir = recipe.run_path / "test"  # the test set has its own run directory
    cands = [r for _, r in read_jsonl(eval_dir / "candidates.jsonl")]
    assert summary.questions == len(cands) == 3
    assert all(len(r["docs"]) == recipe.data.k1 for r in cands)
    sel = {r["qid"] for _, r in read_jsonl(eval_dir / "selections.jsonl")}
    assert sel == {r["qid"] for r in cands}


def test_teacher_method_without_labels_is_a_clear_error(student_recipe, sample_file):
    from purecover.contract import run_stage

    ev = dataclasses.replace(student_recipe.eval, path=str(sample_file("hotpotqa")), limit=3, methods=["teacher"])
    with pytest.raises(ValueError, match=r"method teacher: 3 of 3 evaluation questions have no teacher label"):
        run_stage("evaluate", dataclasses.replace(student_recipe, eval=ev), show_progress=False)


def test_empty_heldout_split_is_a_clear_error(student_recipe, tmp_path):
    """No question in the test split: the select stage (which selects for the test split only) says so before
    any selection, and evaluate (on a run whose selections exist) says so too."""
    from purecover.contract import run_stage
    from purecover.eval.questions import evaluation_questions

    student = dataclasses.replace(student_recipe.student, eval_fraction=0.0)
    run = _copy_run(student_recipe.run_path, tmp_path / "run")
    empty = dataclasses.replace(student_recipe, student=student, run_dir=str(run))
    with pytest.raises(ValueError, match="falls in the student's test split .*set eval.questions=all"):
        run_stage("evaluate", empty, show_progress=False)
    assert not (run / "selections.jsonl").exists()
    with pytest.raises(ValueError, match="no question of .* falls in the student's test split"):
        evaluation_questions(empty, run / "test", show_progress=False)


def test_evaluate_alone_names_the_missing_select_stage(student_recipe, tmp_path):
    """`eval` never runs the select stage itself (import rules; the registry's `before` does, as `purecover
    evaluate` does): its body without selections says what to run."""
    import shutil

    from purecover.contract import execute_stage

    run = tmp_path / "run"
    shutil.copytree(student_recipe.run_path, run, ignore=shutil.ignore_patterns("selections.jsonl", "select.run.json",
                                                                                 "eval", ".purecover.lock"))
    recipe = dataclasses.replace(student_recipe, run_dir=str(run))
    with pytest.raises(FileNotFoundError, match=r"selections\.jsonl is missing or incomplete: run `purecover select"):
        execute_stage("evaluate", recipe, show_progress=False, with_before=False)
