"""benchmarks/benchlib/rows.py and each benchmark's rows function, on the committed results (runs no benchmark)."""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_benchmarks_summary import BENCH, RESULTS, SCRIPTS, _expected_met, _load, library

rows = library("rows")


def test_check_reads_the_claim() -> None:
    assert rows.check(0.99, ">= 0.98") is True and rows.check(0.97, ">= 0.98") is False
    assert rows.check(30.0, "<= 30") is True and rows.check(30.0, "< 30") is False
    assert rows.check(0.0, "> 0") is False and rows.check(1e-9, "> 0") is True
    assert rows.check(None, ">= 1") is None and rows.check(1.0, None) is None
    assert (rows.at_least(200_000), rows.at_most(1e-6), rows.above(0)) == (">= 200000", "<= 1e-06", "> 0")
    for bad in ("=> 1", "about 3", ">= fast", ""):
        with pytest.raises(ValueError, match="target"):
            rows.parse_target(bad)


def test_rows_builder_fills_met_and_machine_and_leaves_out_empty_optional_fields() -> None:
    table = rows.Rows({"machine": {"processor": "x86_64", "cpus": 2}})
    hit = table.add("demo.ratio", 2.5, "x", rows.at_least(2), variant="big", seed=3, note="5 s vs 2 s")
    plain = table.add("demo.seconds", 7, "s")
    assert hit == {"figure": "demo.ratio", "variant": "big", "seed": 3, "value": 2.5, "unit": "x", "target": ">= 2",
                   "met": True, "note": "5 s vs 2 s", "machine": "2 cores, x86_64"}
    assert plain == {"figure": "demo.seconds", "value": 7.0, "unit": "s", "target": None, "met": None,
                     "machine": "2 cores, x86_64"}
    assert table.rows == [hit, plain]
    with pytest.raises(ValueError):
        table.add("demo.bad", 1.0, "s", "at most 3")
    assert rows.describe({"processor": "x86_64"}) == "x86_64, cores not recorded"
    assert rows.describe({"cpus": 16, "processor": "x86_64", "cpu_model": "AMD EPYC", "gpu": "1x H200"}) == \
        "16 cores, AMD EPYC, 1x H200"
    info = rows.machine_info()
    assert info["cpus"] and info["processor"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_committed_rows_are_what_the_script_derives_from_its_results(name: str) -> None:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"no committed results for {name}")
    stored = json.loads(path.read_text())
    derived = _load(name).rows(copy.deepcopy(stored))
    assert derived == stored["rows"]  # rerun with: python benchmarks/<name>.py --rows-only --out <path>
    assert all(r["met"] is _expected_met(r["value"], r["target"]) for r in derived)


def test_rows_only_rewrites_a_stored_results_file(tmp_path: Path) -> None:
    if not (RESULTS / "solver.json").is_file():
        pytest.skip("no committed solver results")
    path = tmp_path / "solver.json"
    shutil.copy2(RESULTS / "solver.json", path)
    stored = json.loads(path.read_text())
    stripped = {k: v for k, v in stored.items() if k != "rows"}
    stripped["ratio"]["flat"]["mean_ratio"] = 0.5  # the rows follow the stored measurements
    path.write_text(json.dumps(stripped))
    proc = subprocess.run([sys.executable, str(BENCH / "solver.py"), "--rows-only", "--out", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(path.read_text())
    assert list(data)[-2:] == ["rows", "versions"] and {k: v for k, v in data.items() if k != "rows"} == stripped
    (flat,) = [r for r in data["rows"] if r.get("variant") == "flat"]
    assert (flat["value"], flat["target"], flat["met"]) == (0.5, ">= 0.98", False)
    assert len(data["rows"]) == len(stored["rows"])


# ------------------------------------------------------------------------------ learnability over seeds


def _run(f1: float, seconds: float, select_all: float = 0.48) -> dict:
    variant = {"test_subset_f1": f1, "test_subset_f1_at_teacher_size": f1 + 0.05, "steps": 100, "seconds": seconds}
    return {"baselines_test": {"select_all": select_all, "random_size": 0.33, "retrieval_top_size": 1.0},
            "variants": {"cl+lm": variant, "cl": {**variant, "test_subset_f1": f1 - 0.1}}}


def test_learnability_reports_each_seed_then_mean_and_worst() -> None:
    learn = _load("learnability")
    result = {"machine": {"cpus": 2, "processor": "x86_64"}, "seeds": [0, 1, 2],
              "results": {"colour": {"0": _run(0.92, 500), "1": _run(0.80, 650), "2": _run(0.95, 400)}}}
    table = learn.rows(result)
    per_seed = [r for r in table if "seed" in r]
    assert len(per_seed) == 3 * 5  # per seed: F1 of two variants, margin and seconds of the target's, baseline
    by = {(r["figure"], r["variant"]): r for r in table if "seed" not in r}
    worst = by[("learnability.test_subset_f1_worst", "colour, cl+lm")]
    assert (worst["value"], worst["target"], worst["met"]) == (0.80, ">= 0.85", False)
    assert worst["note"] == "seed 1 of 0, 1, 2"
    mean = by[("learnability.test_subset_f1_mean", "colour, cl+lm")]
    assert mean["value"] == pytest.approx((0.92 + 0.80 + 0.95) / 3, abs=1e-4) and mean["target"] is None
    slowest = by[("learnability.train_seconds_worst", "colour, cl+lm")]  # an upper bound: the worst is the highest
    assert (slowest["value"], slowest["met"]) == (650.0, False)
    assert by[("learnability.f1_over_select_all_worst", "colour, cl+lm")]["value"] == pytest.approx(0.32)
    assert by[("learnability.test_subset_f1_worst", "colour, cl")]["target"] is None
    assert by[("learnability.best_baseline_f1_mean", "colour")]["value"] == 1.0
    assert all(r["met"] is _expected_met(r["value"], r["target"]) for r in table)

    one = learn.rows({**result, "seeds": [7], "results": {"colour": {"7": _run(0.9, 500)}}})
    assert all(r["seed"] == 7 for r in one) and len(one) == 5  # one seed: no mean or worst


def test_learnability_reports_on_report_seeds_only() -> None:
    """Seeds settings were chosen on are listed without targets and left out of the mean and worst."""
    learn = _load("learnability")
    result = {"machine": {"cpus": 2, "processor": "x86_64"}, "seeds": [0, 1, 2, 3], "report_seeds": [1, 2, 3],
              "results": {"colour": {"0": _run(0.40, 500), "1": _run(0.90, 500), "2": _run(0.86, 500),
                                     "3": _run(0.95, 500)}}}
    table = learn.rows(result)
    chosen = [r for r in table if r.get("seed") == 0]
    assert chosen and all(r["target"] is None and r["met"] is None for r in chosen)
    assert "settings chosen at this seed" in chosen[0]["note"]
    by = {(r["figure"], r["variant"]): r for r in table if "seed" not in r}
    worst = by[("learnability.test_subset_f1_worst", "colour, cl+lm")]
    assert (worst["value"], worst["met"], worst["note"]) == (0.86, True, "seed 2 of 1, 2, 3")
    assert by[("learnability.test_subset_f1_mean", "colour, cl+lm")]["value"] == pytest.approx(0.9033, abs=1e-4)
    assert learn.target_passed(result["results"], [1, 2, 3]) is True
    assert learn.target_passed(result["results"], None) is False  # seed 0 misses it


def test_learnability_merge_combines_runs_by_task_seed_and_variant(tmp_path, monkeypatch) -> None:
    learn = _load("learnability")
    base = {"benchmark": "learnability", "machine": {"cpus": 2, "processor": "x86_64"},
            "target": {"task": "colour", "variant": "cl+lm"}}
    first = {**base, "seeds": [0], "results": {"colour": {"0": _run(0.9, 500)}}}
    lm_only = _run(0.5, 300)
    lm_only["variants"] = {"lm": lm_only["variants"]["cl"]}
    second = {**base, "seeds": [0, 1], "results": {"colour": {"1": _run(0.88, 500), "0": lm_only}}}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(first))
    b.write_text(json.dumps(second))
    out = tmp_path / "merged.json"
    monkeypatch.setattr(learn, "plot", lambda results, path: None)  # no figure needed here
    assert learn.merge([a, b], out, [1]) == 0
    merged = json.loads(out.read_text())
    assert merged["seeds"] == [0, 1] and merged["report_seeds"] == [1]
    assert list(merged["results"]["colour"]) == ["0", "1"]
    assert sorted(merged["results"]["colour"]["0"]["variants"]) == ["cl", "cl+lm", "lm"]
    assert merged["target"]["pass"] is True and merged["rows"]
    assert learn.merge([a], tmp_path / "bad.json", [5]) == 1 and not (tmp_path / "bad.json").exists()


def test_learnability_seed_list() -> None:
    learn = _load("learnability")
    assert learn.seed_list("0,1,2") == [0, 1, 2] and learn.seed_list("7") == [7]
    for bad in ("0,0", "", "a"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            learn.seed_list(bad)


# ------------------------------------------------------------------------------ learnability order check


def test_learnability_order_check_maps_selections_back_to_candidates() -> None:
    """A student that reads the passages scores the same in every order; one that learned "the first two" only
    scores in retrieval order (the issue-29 symptom: retrieval's top-2 F1, then collapse when reversed)."""
    learn = _load("learnability")
    n, gold = 6, [0, 1]  # the teacher keeps the first two retrieved, as a position prior would
    value = [3.0, 2.0, -1.0, -2.0, -3.0, -4.0]  # a content reader: one score per candidate, wherever shown
    orders = {name: learn.shown_order(name, "q7", n, seed=0) for name in learn.ORDERS}
    assert orders["retrieval"] == list(range(n)) and orders["reversed"] == list(range(n))[::-1]
    assert sorted(orders["shuffled"]) == list(range(n)) and orders["shuffled"] != orders["retrieval"]
    assert orders["shuffled"] == learn.shown_order("shuffled", "q7", n, seed=0)  # seeded
    for name, order in orders.items():
        reader = learn.score_in_order([value[k] for k in order], order, gold, tau=0.0, min_select=1, k_max=None)
        assert reader["test_subset_f1"] == reader["test_subset_f1_at_teacher_size"] == 1.0, name
        positional = learn.score_in_order([2.0, 1.0, -1.0, -1.5, -2.0, -3.0], order, gold, 0.0, 1, None)
        assert positional["top_size_first_slots"] == 1.0  # it always keeps the first two shown
        if name == "reversed":
            assert positional["test_subset_f1"] == positional["test_subset_f1_at_teacher_size"] == 0.0
        if name == "retrieval":
            assert positional["test_subset_f1"] == 1.0 and reader["top_size_first_slots"] == 1.0
    with pytest.raises(ValueError, match="unknown order"):
        learn.shown_order("sideways", "q", 3, 0)


def test_learnability_rows_carry_the_order_check_and_the_training_order() -> None:
    learn = _load("learnability")
    run = _run(0.9, 500)
    run["settings"] = {"candidate_shuffles": 2, "student": "/models/SmolLM2-135M"}
    checked = {"retrieval": {"test_subset_f1": 0.643, "top_size_first_slots": 1.0},
               "reversed": {"test_subset_f1": 0.069, "top_size_first_slots": 0.98},
               "shuffled": {"test_subset_f1": 0.2, "top_size_first_slots": 0.96}}
    run["variants"]["cl+lm"]["orders"] = checked
    table = learn.rows({"machine": {"cpus": 2, "processor": "x86_64"}, "seeds": [0],
                        "results": {"hotpotqa": {"0": run}}})
    by = {(r["figure"], r["variant"]): r for r in table}
    reversed_row = by[("learnability.test_subset_f1_reversed", "hotpotqa, cl+lm")]
    assert reversed_row["value"] == 0.069 and reversed_row["target"] is None
    assert "retrieval order 0.643" in reversed_row["note"] and "first |S| shown on 98%" in reversed_row["note"]
    assert by[("learnability.test_subset_f1_shuffled", "hotpotqa, cl+lm")]["value"] == 0.2
    assert ("learnability.test_subset_f1_reversed", "hotpotqa, cl") not in by  # that variant has no check
    note = by[("learnability.test_subset_f1", "hotpotqa, cl+lm")]["note"]
    assert "trained on 2 shuffled candidate orders per question" in note and "SmolLM2-135M + LoRA" in note
    # a run from before the setting (no candidate_shuffles, no student): retrieval order, notes as before
    old = learn.rows({"machine": {"cpus": 2, "processor": "x86_64"}, "seeds": [0],
                      "results": {"colour": {"0": _run(0.9, 500)}}})
    assert not any("shuffled" in r.get("note", "") or "LoRA" in r.get("note", "") for r in old)
    assert not any(r["figure"].endswith(("_reversed", "_shuffled")) for r in old)


def test_learnability_student_folder_is_checked_before_any_work(tmp_path) -> None:
    learn = _load("learnability")
    assert "not a directory" in learn.student_dir_problem(tmp_path / "missing")
    folder = tmp_path / "m"
    folder.mkdir()
    assert learn.student_dir_problem(folder) == "no config.json"
    (folder / "config.json").write_text("{}")
    assert "safetensors" in learn.student_dir_problem(folder)
    (folder / "model.safetensors").write_bytes(b"")
    assert "no tokenizer" in learn.student_dir_problem(folder)
    (folder / "tokenizer.json").write_text("{}")
    assert learn.student_dir_problem(folder) is None
    proc = subprocess.run([sys.executable, str(BENCH / "learnability.py"), "--student", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--student" in proc.stderr and "not a directory" in proc.stderr
