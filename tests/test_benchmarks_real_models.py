"""benchmarks/real_models.py's own logic, without models: scoring against gold passages, the candidate orders of
the order check, merging seeds run in different sessions, and the targets its rows carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_benchmarks_summary import _load

real = _load("real_models")


def _cand(qid: str, gold: list[int], n: int = 6) -> dict:
    return {"qid": qid, "question": "q", "docs": [{"doc_id": f"{qid}-{k}"} for k in range(n)],
            "gold_doc_ids": [f"{qid}-{k}" for k in gold]}


def test_set_figures_score_against_gold_and_retrieval_of_the_same_size() -> None:
    cands = {"a": _cand("a", [0, 3]), "b": _cand("b", [4])}
    chosen = {"a": ["a-3", "a-0"], "b": ["b-1", "b-4"]}
    fig = real.set_figures(chosen, cands, ["a", "b"])
    assert fig["questions"] == 2 and fig["mean_size"] == 2.0
    assert fig["precision"] == pytest.approx(0.75) and fig["recall"] == pytest.approx(1.0)
    assert fig["f1"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)
    # retrieval top-|S| with |S| = 2 per question: a -> {a-0, a-1} (F1 0.5), b -> {b-0, b-1} (F1 0)
    assert fig["retrieval_top_s_f1"] == pytest.approx(0.25) and fig["retrieval_top2_f1"] == pytest.approx(0.25)
    assert fig["retrieval_top5_f1"] == pytest.approx((2 * (2 / 5) / (2 / 5 + 1) + 2 * (1 / 5) / (1 / 5 + 1)) / 2,
                                                     abs=1e-4)


def test_orders_are_permutations_and_reversed_is_reversed() -> None:
    assert real.shown("retrieval", "q", 5, 0) == [0, 1, 2, 3, 4]
    assert real.shown("reversed", "q", 5, 0) == [4, 3, 2, 1, 0]
    shuffled = real.shown("shuffled", "q", 10, 0)
    assert sorted(shuffled) == list(range(10)) and shuffled != list(range(10))
    assert real.shown("shuffled", "q", 10, 0) == shuffled  # seeded


def test_coverage_and_purity_of_a_ranking() -> None:
    assert real.coverage_purity(["x", "g1", "y", "g2"], {"g1", "g2"}, 2) == (0.5, 0.5)
    assert real.coverage_purity(["g1", "g2"], {"g1", "g2"}, 5) == (1.0, 1.0)


def _student(f1: float, top_s: float, top2: float, top5: float) -> dict:
    fig = {"f1": f1, "mean_size": 2.0, "retrieval_top_s_f1": top_s, "retrieval_top2_f1": top2,
           "retrieval_top5_f1": top5, "first_slots_share": 0.1}
    return {"orders": {o: dict(fig) for o in real.ORDERS}}


def test_merge_keeps_every_seed_and_rows_carry_the_issue_targets(tmp_path: Path) -> None:
    teacher = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"teacher": {"gemma_attention": {
        "test": {"f1": 0.72, "precision": 0.9, "mean_size": 1.5, "fallback_rate": 0.0, "retrieval_top2_f1": 0.6,
                 "questions": 50}, "seconds_per_question": 9.0}}}}}
    s0 = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"student": {"oracle_proxy": {
        "0": _student(0.70, 0.62, 0.64, 0.50)}}}}}
    s1 = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"student": {"oracle_proxy": {
        "1": _student(0.60, 0.62, 0.64, 0.50)}}}}}
    paths = []
    for i, part in enumerate((teacher, s0, s1)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(part))
    merged = real.merge(paths)
    res = merged["datasets"]["hotpotqa"]
    assert set(res["student"]["oracle_proxy"]) == {"0", "1"} and "gemma_attention" in res["teacher"]
    rows = {(r["figure"], r.get("seed")): r for r in real.rows(merged)}
    assert rows[("real_models.label_f1.gemma_attention", None)]["target"] == ">= 0.7"
    assert rows[("real_models.label_f1.gemma_attention", None)]["met"] is True
    seed0 = rows[("real_models.student_f1.oracle_proxy.retrieval", 0)]
    assert seed0["target"] == "> 0.62" and seed0["met"] is True
    assert rows[("real_models.student_f1.oracle_proxy.reversed", 1)]["met"] is False
    mean = rows[("real_models.student_f1.oracle_proxy.retrieval_mean", None)]
    assert mean["value"] == pytest.approx(0.65) and mean["target"] == "> 0.64" and mean["met"] is True
    assert rows[("real_models.student_f1.oracle_proxy.shuffled", 0)]["target"] is None  # reported, no claim


def test_headline_is_the_documented_command_and_its_minutes_come_from_the_manifests(tmp_path: Path) -> None:
    """The headline part runs `purecover pipeline` on the real_cpu recipe as written (only the sample's path and
    the run directory set) and sums the stages' manifest times; the row claims at most 60 minutes."""
    import datetime as dt

    samples = pytest.importorskip("purecover.data.samples")
    if samples.sample_data_dir() is None:
        pytest.skip("real sample data not found (../shared/data or PURECOVER_SAMPLE_DATA)")
    command = real.headline_command("hotpotqa", tmp_path / "run")
    assert command[1:4] == ["-m", "purecover", "pipeline"] and command[4].endswith("real_cpu/hotpotqa.yaml")
    assert command[5:] == ["--set", f"data.path={samples.sample_data_dir() / samples.SAMPLE_FILES['hotpotqa']}",
                           "--set", "data.sample=null", "--set", f"run_dir={tmp_path / 'run'}", "-q"]
    run = tmp_path / "run"
    run.mkdir()
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i, stage in enumerate(real.HEADLINE_STAGES):
        summary = {"status": "complete", "questions": 252, "layers": {"read": [18, 23]}} if stage == "label" else {
            "status": "complete", "global_step": 150, "test_subset_f1": 0.2}
        (run / f"{stage}.run.json").write_text(json.dumps({
            "started": (t0 + dt.timedelta(minutes=10 * i)).isoformat(timespec="seconds"),
            "finished": (t0 + dt.timedelta(minutes=10 * i + 5)).isoformat(timespec="seconds"), "summary": summary}))
    fig = real.headline_figures(run)
    assert fig["total_seconds"] == 7 * 300 and fig["stage_seconds"]["label"] == 300
    assert fig["questions"] == 252 and fig["label_layers"] == [18, 23] and fig["train_steps"] == 150
    rows = real.rows({"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"headline": fig}}})
    (row,) = [r for r in rows if r["figure"] == "real_models.headline_minutes"]
    assert row["value"] == 35.0 and row["target"] == "<= 60" and row["met"] is True
    (run / "train.run.json").write_text(json.dumps({"started": t0.isoformat(), "finished": t0.isoformat(),
                                                    "summary": {"status": "running"}}))
    with pytest.raises(RuntimeError, match="stage train is not complete"):
        real.headline_figures(run)
