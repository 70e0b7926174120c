"""benchmarks/cpu_precision.py: its rows (targets on idle cores only, speed-ups and shares from the stored
measurements), merging loads and parts, and the readers of the run directories it compares (runs no model)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.test_benchmarks_summary import _load

bench = _load("cpu_precision")


def _label(seconds: float, f1: float, same: float, batch: int, dtype: str) -> dict:
    return {"dtype": dtype, "batch_size": batch, "questions": 40, "seconds": seconds,
            "seconds_per_question": seconds / 40, "label_f1": f1, "same_labels_as_before": same, "run": "x"}


def _result() -> dict:
    label = {"float32/b2": _label(188.0, 0.7583, 1.0, 2, "float32"), "float32/b1": _label(140.0, 0.7583, 1.0, 1, "float32"),
             "bfloat16/b2": _label(140.0, 0.7583, 1.0, 2, "bfloat16"),
             "bfloat16/b1": _label(94.0, 0.7483, 0.975, 1, "bfloat16")}
    answer = {"float32": {"dtype": "float32", "questions": 40, "prompts": 80, "seconds": 240.0, "seconds_per_prompt": 3.0,
                          "em": {"gold_support": 0.35, "retrieval": 0.25}, "same_answers_as_float32": 1.0, "run": "a"},
              "bfloat16": {"dtype": "bfloat16", "questions": 40, "prompts": 80, "seconds": 120.0,
                           "seconds_per_prompt": 1.5, "em": {"gold_support": 0.325, "retrieval": 0.25},
                           "same_answers_as_float32": 0.85, "run": "b"}}
    return {"loads": {"0": {"label": label, "answer": answer}, "2": {"label": label}}}


def test_rows_carry_targets_on_idle_cores_only_and_derive_from_the_measurements():
    by = {(r["figure"], r["variant"]): r for r in bench.rows(_result())}
    speed = by[("cpu_precision.label_speedup", "bfloat16/b1 over float32/b2, 0 busy processes")]
    assert speed["value"] == round(188 / 94, 3) and speed["target"] == ">= 1.5" and speed["met"] is True
    assert by[("cpu_precision.label_same_subsets", "bfloat16/b1, 0 busy processes")]["met"] is True
    loss = by[("cpu_precision.label_f1_loss", "bfloat16/b1, 0 busy processes")]
    assert loss["value"] == 0.01 and loss["met"] is True
    busy = by[("cpu_precision.label_speedup", "bfloat16/b1 over float32/b2, 2 busy processes")]
    assert busy["target"] is None and ("cpu_precision.answer_speedup", "bfloat16 over float32, 2 busy processes") \
        not in by
    assert by[("cpu_precision.answer_speedup", "bfloat16 over float32, 0 busy processes")]["value"] == 2.0
    same = by[("cpu_precision.answer_same", "bfloat16, 0 busy processes")]
    assert same["met"] is False and "0.325" in same["note"]  # a miss is a row that says so
    assert len([r for r in by if r[0] == "cpu_precision.label_seconds_per_question"]) == 8


def test_merging_keeps_each_load_and_part(tmp_path: Path):
    a, b = _result(), {"loads": {"2": {"answer": _result()["loads"]["0"]["answer"]}}}
    for name, part in (("a.json", a), ("b.json", b)):
        bench.harness.write(tmp_path / name, part, bench.rows)
    out = bench.merge([tmp_path / "a.json", tmp_path / "b.json"])
    assert set(out["loads"]["2"]) == {"label", "answer"} and set(out["loads"]["0"]) == {"label", "answer"}
    assert len(out["merged_from"]) == 2
    # each part keeps the machine it ran on: bfloat16's speed-up depends on the CPU's instructions
    amd, intel = {"cpus": 2, "cpu_model": "AMD EPYC"}, {"cpus": 2, "cpu_model": "Intel Xeon"}
    bench.harness.write(tmp_path / "a.json", a | {"machine": amd}, bench.rows)
    bench.harness.write(tmp_path / "b.json", b | {"machine": intel}, bench.rows)
    rows = bench.rows(bench.merge([tmp_path / "a.json", tmp_path / "b.json"]))
    at = {(r["figure"], r["variant"]): r["machine"] for r in rows}
    assert at[("cpu_precision.label_speedup", "bfloat16/b1 over float32/b2, 0 busy processes")] == "2 cores, AMD EPYC"
    assert at[("cpu_precision.answer_speedup", "bfloat16 over float32, 2 busy processes")] == "2 cores, Intel Xeon"
    assert len([r for r in rows if r["figure"] == "cpu_precision.label_seconds_per_question"]) == 8  # no extra keys


def test_the_readers_compare_labels_and_answers_by_question(tmp_path: Path):
    run = tmp_path / "run"
    (run / "eval" / "predictions").mkdir(parents=True)
    docs = [{"doc_id": f"d{k}", "title": "", "text": ""} for k in range(4)]
    cands = [{"qid": "q1", "docs": docs, "gold_doc_ids": ["d0", "d1"]},
             {"qid": "q2", "docs": docs, "gold_doc_ids": ["d2", "d3"]}, {"qid": "q3", "docs": docs, "gold_doc_ids": []}]
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cands))
    labels = [{"qid": "q1", "selected": [0, 1]}, {"qid": "q2", "selected": [2]}, {"qid": "q3", "selected": [0]}]
    (run / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    assert bench.label_subsets(run) == {"q1": [0, 1], "q2": [2], "q3": [0]}
    assert bench.label_f1(run) == round((1.0 + 2 / 3) / 2, 4)  # q3 has no gold: left out
    (run / "eval" / "predictions" / "retrieval@5.jsonl").write_text(
        json.dumps({"qid": "q1", "prediction": "Rush"}) + "\n")
    assert bench.answers_of(run) == {"retrieval@5/q1": "Rush"}
    manifest = {"summary": {"status": "complete"}, "started": "2026-12-06T10:00:00+00:00",
                "finished": "2026-12-06T10:01:30.5+00:00"}
    (run / "label.run.json").write_text(json.dumps(manifest))
    assert bench.stage_seconds(run, "label") == 90.5


def test_busy_processes_spin_for_the_duration_and_are_gone_after():
    import psutil

    with bench.busy(2) as pids:
        assert len(set(pids)) == 2
        assert set(pids) <= {c.pid for c in psutil.Process().children()}
        spinners = [psutil.Process(pid) for pid in pids]
        # identified by pid, not by /proc/<pid>/cmdline: after a vfork the parent may run on while the child's exec
        # is still setting its arguments up, and CI once read one spinner's command line empty; each spinner spends
        # CPU time within a few seconds
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and min(sum(s.cpu_times()[:2]) for s in spinners) < 0.05:
            time.sleep(0.1)
        assert all(sum(s.cpu_times()[:2]) >= 0.05 for s in spinners)
    assert not [c for c in spinners if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def _select(seconds: float, same: float, f1: float, dtype: str) -> dict:
    return {"dtype": dtype, "seconds_per_question": seconds, "mean_selected": 2.1, "support_f1": f1,
            "same_sets_as_float32": same}


def test_select_rows_compare_bfloat16_with_float32_on_idle_cores():
    select = {"selector": "build/answers/hotpotqa/seed2/selector", "questions": 40,
              "float32": _select(1.6, 1.0, 0.76, "float32"), "bfloat16": _select(0.8, 0.9, 0.74, "bfloat16")}
    result = {"loads": {"0": {"select": select}, "2": {"select": select}}}
    by = {(r["figure"], r["variant"]): r for r in bench.rows(result)}
    where = "0 busy processes, 40 held-out questions"
    speed = by[("cpu_precision.select_speedup", f"bfloat16 over float32, {where}")]
    assert speed["value"] == 2.0 and speed["met"] is True
    assert by[("cpu_precision.select_same_sets", f"bfloat16, {where}")]["met"] is False  # 0.9 < 0.95
    loss = by[("cpu_precision.select_f1_loss", f"bfloat16, {where}")]
    assert loss["value"] == 0.02 and loss["met"] is False
    assert by[("cpu_precision.select_speedup",
               "bfloat16 over float32, 2 busy processes, 40 held-out questions")]["target"] is None


def test_select_input_is_the_answers_runs_held_out_questions(tmp_path: Path):
    """The select part reads the questions an answers.py run selected for (its test split), first N by qid, with
    their candidates; a directory without an exported selector is a clear stop."""
    import pytest

    run = tmp_path / "run"
    (run / "selector").mkdir(parents=True)
    docs = [{"doc_id": "d0", "title": "T", "text": "x"}]
    cands = [{"qid": q, "question": f"Q {q}?", "docs": docs, "gold_doc_ids": ["d0"]} for q in ("q3", "q1", "q2", "q9")]
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cands))
    (run / "selections.jsonl").write_text("".join(json.dumps({"qid": q}) + "\n" for q in ("q9", "q3", "q1")))
    with pytest.raises(SystemExit, match="no exported selector"):
        bench.select_input(run / "selector", 2, tmp_path / "in.jsonl")
    (run / "selector" / "selector_config.json").write_text("{}")
    assert bench.select_input(run / "selector", 2, tmp_path / "in.jsonl") == ["q1", "q3"]
    written = [json.loads(line) for line in (tmp_path / "in.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in written] == ["q3", "q1"] and set(written[0]) == {"qid", "question", "docs"}
