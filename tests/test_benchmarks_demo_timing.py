"""benchmarks/demo_timing.py: rows per demo (make demo, make demo-real, the coverage demo), targets on the chosen
thread setting on idle cores only, and results of one demo merged into a file without touching the others'."""

from __future__ import annotations

from tests.test_benchmarks_summary import _load

bench = _load("demo_timing")


def _run(demo, threads, busy, fresh, rerun=2.0):
    return {"demo": demo, "threads": threads, "busy": busy, "assets_s": 0.0 if demo == "real" else 5.0,
            "pipeline_s": fresh - (0.0 if demo == "real" else 5.0), "fresh_s": fresh, "rerun_s": rerun,
            "stages_s": {"train": 1.0}, **({"prepare_s": 0.4} if demo == "real" else {})}


def test_rows_per_demo_with_targets_on_the_chosen_idle_setting():
    result = {"runs": [_run("demo", "1", 0, 25.0), _run("demo", "default", 0, 19.0),
                       _run("real", "1", 0, 700.0), _run("real", "default", 0, 450.0), _run("real", "1", 2, 900.0),
                       _run("coverage", "1", 0, 20.0)],
              "chosen_threads": "1", "chosen_threads_by_demo": {"demo": "1", "real": "default", "coverage": "1"}}
    rows = bench.rows(result)
    by = {(r["figure"], r["variant"]): r for r in rows}
    # make demo's rows keep their names; the others carry the demo's
    assert by[("demo_timing.fresh_seconds", "OMP_NUM_THREADS=1, 0 busy processes")]["met"] is True
    assert by[("demo_timing.fresh_seconds", "OMP_NUM_THREADS=default, 0 busy processes")]["target"] is None
    real = by[("demo_timing.real.fresh_seconds", "OMP_NUM_THREADS=default, 0 busy processes")]
    assert real["target"] == "<= 600" and real["met"] is True and "model fetch (cached) 0.4 s" in real["note"]
    assert by[("demo_timing.real.fresh_seconds", "OMP_NUM_THREADS=1, 0 busy processes")]["target"] is None
    assert by[("demo_timing.real.fresh_seconds", "OMP_NUM_THREADS=1, 2 busy processes")]["target"] is None
    ratio = by[("demo_timing.real.default_over_one_thread", "0 busy processes")]
    assert abs(ratio["value"] - 450 / 700) < 1e-9
    assert by[("demo_timing.coverage.fresh_seconds", "OMP_NUM_THREADS=1, 0 busy processes")]["target"] == "<= 30"


def test_a_demos_runs_replace_only_its_own():
    old = {"runs": [_run("demo", "1", 0, 25.0), {**_run("demo", "1", 2, 39.0), "demo": "demo"}],
           "chosen_threads": "1"}
    old["runs"][0].pop("demo")  # a file written before --demo existed: its runs are make demo's
    new = bench.merged(old, "real", [_run("real", "default", 0, 400.0)], "default")
    assert [r.get("demo", "demo") for r in new["runs"]] == ["demo", "demo", "real"]
    assert new["chosen_threads_by_demo"] == {"demo": "1", "real": "default"} and new["chosen_threads"] == "1"
    again = bench.merged(new, "real", [_run("real", "1", 0, 500.0)], "1")
    assert [r["fresh_s"] for r in again["runs"] if r.get("demo") == "real"] == [500.0]
