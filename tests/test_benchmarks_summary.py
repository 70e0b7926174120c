"""benchmarks/summarize.py on a temporary copy of the committed results (runs no benchmark)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = BENCH / "results"
NAMES = ["retrieval", "solver", "attention_capture", "oracle_labels", "perm_loss", "selector", "learnability"]


def _load_module():
    spec = importlib.util.spec_from_file_location("bench_summarize", BENCH / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


summarize = _load_module()


@pytest.fixture
def results(tmp_path: Path) -> Path:
    missing = [n for n in NAMES if not (RESULTS / f"{n}.json").exists()]
    if missing:
        pytest.skip(f"committed benchmark results missing: {missing}")
    out = tmp_path / "results"
    out.mkdir()
    for name in NAMES:
        shutil.copy2(RESULTS / f"{name}.json", out / f"{name}.json")
    return out


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _rows(summary, benchmark: str):
    return [r for r in summary["rows"] if r.benchmark == benchmark]


def _perm_row(summary, size: int = 5):
    (row,) = [r for r in _rows(summary, "perm_loss") if r.figure.endswith(f"|S|={size}")]
    return row


def test_real_results_rows(results: Path) -> None:
    summary = summarize.summarize(results)
    assert [n for n in summary["files"]][: len(NAMES)] == NAMES
    assert all(summary["files"][n]["status"] == "ok" for n in NAMES)
    for name in NAMES:
        assert _rows(summary, name), name

    data = json.loads((results / "perm_loss.json").read_text())
    row = _perm_row(summary)
    assert row.measured == data["results"]["5"]["ratio_exact_vs_one_order"] == data["target"]["value"]
    assert row.target == data["target"]["max_ratio"] and row.op == "<=" and row.target_source == "results file"
    assert row.met is (data["target"]["value"] <= data["target"]["max_ratio"])
    assert _perm_row(summary, 4).target is None and _perm_row(summary, 4).met is None

    learn = json.loads((results / "learnability.json").read_text())
    rows = _rows(summary, "learnability")
    (main_row,) = [r for r in rows if r.target is not None]  # one target: the named task and loss variant
    tgt = learn["target"]
    assert main_row.measured == learn["results"][tgt["task"]]["variants"][tgt["variant"]]["test_subset_f1"]
    assert main_row.target == tgt["test_subset_f1_min"] and main_row.figure.startswith(f"{tgt['task']}: ")
    others = [r for r in rows if r is not main_row]
    assert others and all(r.target_text() == "—" for r in others)
    for task, res in learn["results"].items():  # each task: its variants, then its best baseline
        best = max(res["baselines_test"].values())
        assert any(r.figure.startswith(f"{task}: best baseline") and r.measured == best for r in rows)
    assert all(r.target is None for r in _rows(summary, "retrieval"))
    labels = json.loads((results / "oracle_labels.json").read_text())
    hotpot_f1, hotpot_precision = _rows(summary, "oracle_labels")[:2]
    held = labels["results"]["hotpotqa"]["heldout_shipped"]
    assert hotpot_f1.measured == held["f1"] and hotpot_f1.target == labels["target_f1"]["hotpotqa"]
    assert hotpot_precision.measured == pytest.approx(held["precision"] - held["top_s_precision"])
    assert hotpot_precision.target == 0.0 and hotpot_precision.op == ">="

    # attention_capture stores its thresholds in the names of its flags: 1.5x time, 0.1x peak, 1e-6 diff
    att = _rows(summary, "attention_capture")
    assert {r.target for r in att} == {1.5, 0.1, 1e-6}
    assert all(r.target_source == "results file" for r in att)


def test_cli_writes_markdown_json_and_stdout(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH / "summarize.py"), "--results", str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    md = (out / "SUMMARY.md").read_text()
    assert "| benchmark | figure | measured | target | met |" in md
    assert "**Machine** (as recorded in the result files)" in md and "x86_64" in md
    assert "perm_loss " in md.split("**Result files**")[1].splitlines()[0]  # each file's date
    assert "\\|S\\|=5" in md  # pipes inside cells are escaped
    assert proc.stdout.startswith("| benchmark | figure | measured | target | met |")
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert len(rows) == proc.stdout.count("\n") - 2  # header and separator lines
    perm = next(r for r in rows if r["benchmark"] == "perm_loss" and r["figure"].endswith("|S|=5"))
    assert perm["measured"] == json.loads((results / "perm_loss.json").read_text())["target"]["value"]
    assert perm["met"] is True and perm["target"] == json.loads((results / "perm_loss.json").read_text())["target"]["max_ratio"]
    assert not (results / "SUMMARY.md").exists()  # --out is honoured


def test_missed_target_is_not_met(results: Path) -> None:
    def slower(data):
        data["results"]["5"]["ratio_exact_vs_one_order"] = 1.8
        data["target"].update(value=1.8)  # the stored pass flag is left at true: met is recomputed

    _edit(results / "perm_loss.json", slower)
    _edit(results / "selector.json", lambda d: d["ratios"].update(full_ranking_over_one_pass=2.5))
    summary = summarize.summarize(results)
    row = _perm_row(summary)
    assert row.measured == 1.8 and row.met is False and row.met_text() == "NO"
    (sel,) = [r for r in _rows(summary, "selector") if r.target is not None]
    assert sel.met is False
    assert "| NO |" in summarize.markdown(summary)


def test_fallback_targets_when_none_stored(results: Path) -> None:
    def drop_targets(data):
        tgt = data.pop("target")
        data["results"][tgt["task"]]["variants"][tgt["variant"]]["test_subset_f1"] = 0.86

    _edit(results / "learnability.json", drop_targets)
    _edit(results / "attention_capture.json", lambda d: d.pop("targets"))
    summary = summarize.summarize(results)
    (row,) = [r for r in _rows(summary, "learnability") if r.target is not None]
    assert (row.target, row.target_source, row.met) == (0.85, "fallback", True)
    att = _rows(summary, "attention_capture")
    assert {r.target for r in att} == {2.0, 0.05, 1e-6} and {r.target_source for r in att} == {"fallback"}


def test_missing_file_is_not_run(results: Path) -> None:
    (results / "selector.json").unlink()
    summary = summarize.summarize(results)
    (row,) = _rows(summary, "selector")
    assert row.measured is None and row.measured_text() == "not run" and row.met is None
    assert summary["files"]["selector"]["status"] == "not run"
    assert "| selector | — | not run | — | — |" in summarize.table(summary["rows"])


def test_unknown_result_file_is_listed(results: Path) -> None:
    (results / "brand_new.json").write_text(json.dumps({"benchmark": "brand_new", "x": 1}))
    (row,) = _rows(summarize.summarize(results), "brand_new")
    assert row.measured_text() == "no extractor"


def test_malformed_file_names_file_and_key(results: Path) -> None:
    _edit(results / "perm_loss.json", lambda d: d["results"]["5"].pop("exact"))
    with pytest.raises(summarize.SummaryError, match=r"perm_loss\.json: key 'results\.5\.exact': missing"):
        summarize.summarize(results)

    _edit(results / "perm_loss.json", lambda d: d["results"]["5"].update(exact={"median_s": "fast"}))
    with pytest.raises(summarize.SummaryError, match=r"perm_loss\.json: key 'results\.5\.exact\.median_s': expected a number"):
        summarize.summarize(results)

    (results / "solver.json").write_text("{not json")
    proc = subprocess.run([sys.executable, str(BENCH / "summarize.py"), "--results", str(results)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "solver.json: not readable JSON" in proc.stderr
    assert not (results / "SUMMARY.md").exists()


def test_machine_collected_at_summarize_time_when_not_recorded(results: Path) -> None:
    for name in NAMES:
        _edit(results / f"{name}.json", lambda d: [d.pop(k, None) for k in ("machine", "versions", "setting",
                                                                              "cpu_count")])
    # perm_loss/selector need their `setting` only for labels; the rows still come out
    summary = summarize.summarize(results)
    line = summarize.machine_line(summary["machine"])
    assert "nothing recorded" in line and "Collected at summarize time" in line
    assert f"CPUs {__import__('os').cpu_count()}" in line


def test_an_unchanged_committed_file_is_dated_by_its_commit_not_its_checkout(tmp_path):
    """A fresh clone gives every result file the clone's mtime; the summary dates it by its last commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = {"GIT_AUTHOR_DATE": "2024-01-02T03:04:05+00:00", "GIT_COMMITTER_DATE": "2024-01-02T03:04:05+00:00",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": os.environ.get("PATH", "")}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True)

    git("init", "-q")
    committed, untracked = tmp_path / "solver.json", tmp_path / "selector.json"
    committed.write_text("{}")
    git("add", "solver.json")
    git("commit", "-q", "-m", "results")
    untracked.write_text("{}")
    when = summarize.git_commit_date(committed)
    assert when is not None and when.isoformat() == "2024-01-02T03:04:05+00:00"
    assert summarize.git_commit_date(untracked) is None  # never committed: its mtime stands
    committed.write_text('{"changed": true}')
    assert summarize.git_commit_date(committed) is None  # changed since the commit: its mtime stands
    outside = tmp_path.parent / f"{tmp_path.name}-plain"
    outside.mkdir()
    (outside / "perm_loss.json").write_text("{}")
    assert summarize.git_commit_date(outside / "perm_loss.json") is None  # not a git checkout
