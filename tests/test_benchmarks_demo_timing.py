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


def test_auto_is_set_against_the_fastest_fixed_setting_at_each_load():
    result = {"runs": [_run("demo", "auto", 0, 20.0), _run("demo", "1", 0, 25.0), _run("demo", "2", 0, 19.0),
                       _run("demo", "auto", 2, 41.0), _run("demo", "1", 2, 39.0), _run("demo", "2", 2, 51.0)],
              "chosen_threads_by_demo": {"demo": "auto"}}
    by = {(r["figure"], r["variant"]): r for r in bench.rows(result)}
    idle = by[("demo_timing.auto_over_best_fixed", "0 busy processes")]
    assert abs(idle["value"] - 20 / 19) < 1e-9 and idle["target"] == "<= 1.1" and idle["met"] is True
    assert "OMP_NUM_THREADS=2, the fastest of 1, 2" in idle["note"]
    busy = by[("demo_timing.auto_over_best_fixed", "2 busy processes")]
    assert abs(busy["value"] - 41 / 39) < 1e-9 and busy["met"] is True
    assert by[("demo_timing.fresh_seconds", "threads=auto, 0 busy processes")]["target"] == "<= 60"


def test_a_demos_runs_replace_only_its_own():
    old = {"runs": [_run("demo", "1", 0, 25.0), {**_run("demo", "1", 2, 39.0), "demo": "demo"}],
           "chosen_threads": "1"}
    old["runs"][0].pop("demo")  # a file written before --demo existed: its runs are make demo's
    new = bench.merged(old, "real", [_run("real", "default", 0, 400.0)], "default")
    assert [r.get("demo", "demo") for r in new["runs"]] == ["demo", "demo", "real"]
    assert new["chosen_threads_by_demo"] == {"demo": "1", "real": "default"} and new["chosen_threads"] == "1"
    again = bench.merged(new, "real", [_run("real", "1", 0, 500.0)], "1")
    assert [r["fresh_s"] for r in again["runs"] if r.get("demo") == "real"] == [500.0]


def test_the_makefile_runs_each_demo_on_its_measured_thread_setting_and_keeps_its_promise():
    """Each make target sets the torch threads that benchmarks/results/demo_timing.json chose for its demo (one
    thread: OMP_NUM_THREADS=1 unless the user set it; `default`: OMP_NUM_THREADS left alone), and that setting's
    fresh run on idle cores meets the time the README and the guides promise (the row's target)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    stored = json.loads((root / "benchmarks" / "results" / "demo_timing.json").read_text())
    makefile = (root / "Makefile").read_text()
    targets = {"demo": "demo", "real": "demo-real", "coverage": "demo-coverage"}
    rows = {(r["figure"], r["variant"]): r for r in stored["rows"]}
    for demo, target in targets.items():
        chosen = stored["chosen_threads_by_demo"][demo]
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        if chosen in ("default", "auto"):  # auto: purecover chooses; default: runs stored before auto existed
            assert "OMP_NUM_THREADS" not in recipe, target
        else:
            lines = [line for line in recipe.splitlines()[1:] if "purecover" in line and "models fetch" not in line]
            assert lines and all(f"OMP_NUM_THREADS=$${{OMP_NUM_THREADS:-{chosen}}}" in line for line in lines), target
        name = "demo_timing" if demo == "demo" else f"demo_timing.{demo}"
        row = rows[(f"{name}.fresh_seconds", f"{bench.setting_name(chosen)}, 0 busy processes")]
        assert row["target"] is not None and row["met"] is True, (demo, row)


def test_choose_sets_a_demos_thread_setting_on_its_stored_runs(tmp_path):
    import json

    import pytest

    out = tmp_path / "demo_timing.json"
    runs = [_run("demo", "1", 0, 25.0), _run("real", "default", 0, 257.0), _run("real", "1", 0, 461.0),
            _run("real", "1", 2, 900.0)]
    out.write_text(json.dumps({"runs": runs, "chosen_threads": "1",
                               "chosen_threads_by_demo": {"demo": "1", "real": "default"}}))
    assert bench.main(["--choose", "--demo", "real", "--chosen-threads", "1", "--out", str(out)]) == 0
    stored = json.loads(out.read_text())
    assert stored["chosen_threads_by_demo"] == {"demo": "1", "real": "1"}
    assert stored["choices"]["real"]["command"] == f"benchmarks/demo_timing.py --choose --demo real --chosen-threads 1 --out {out}"
    assert sorted(r["fresh_s"] for r in stored["runs"]) == [25.0, 257.0, 461.0, 900.0]  # no run lost
    by = {(r["figure"], r["variant"]): r for r in stored["rows"]}
    assert by[("demo_timing.real.fresh_seconds", "OMP_NUM_THREADS=1, 0 busy processes")]["target"] == "<= 600"
    assert by[("demo_timing.real.fresh_seconds", "OMP_NUM_THREADS=default, 0 busy processes")]["target"] is None
    with pytest.raises(SystemExit, match="no real run with OMP_NUM_THREADS=4"):
        bench.main(["--choose", "--demo", "real", "--chosen-threads", "4", "--out", str(out)])


def test_hostile_options_and_stored_files_are_one_line(tmp_path, capsys):
    """Issue 55 (7): --busy has an upper bound, a malformed stored file makes --choose say so in one line naming
    it, and a measuring run's logs go beside --out (build/bench only for the repository's results folder)."""
    import json

    import pytest

    for argv, said in ((["--busy", "100000"], "expected counts 0..64"), (["--busy", ","], "expected counts"),
                       (["--threads", "auto,zero"], "expected auto, default or thread counts")):
        with pytest.raises(SystemExit) as info:
            bench.main([*argv, "--out", str(tmp_path / "t.json")])
        assert info.value.code == 2 and said in capsys.readouterr().err
    out = tmp_path / "t.json"
    for stored in ([1, 2], {"runs": [{"demo": "real"}]}, {"runs": [{"demo": "real", "threads": "1", "busy": "0"}]},
                   {"runs": "none"}):
        out.write_text(json.dumps(stored))
        with pytest.raises(SystemExit, match=str(out)):
            bench.main(["--choose", "--demo", "real", "--chosen-threads", "1", "--out", str(out)])
        assert json.loads(out.read_text()) == stored  # nothing written
    assert bench.log_dir_for(tmp_path / "mine.json") == (tmp_path / "mine.json.logs").resolve()
    assert bench.log_dir_for(bench.REPO / "benchmarks" / "results" / "demo_timing.json") == bench.REPO / "build" / "bench"
