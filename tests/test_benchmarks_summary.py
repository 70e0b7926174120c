"""benchmarks/summarize.py on a temporary copy of the committed results (runs no benchmark)."""

from __future__ import annotations

import importlib.util
import json
import operator
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = BENCH / "results"
OUTPUTS = {"summary.json", "SUMMARY.md"}
# every module beside the scripts but the summary, private ones and a script's helpers (<script>_parts.py); the
# library the scripts share is the package benchmarks/benchlib
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py")
                 if p.stem != "summarize" and p.stem[0] != "_" and not p.stem.endswith("_parts"))
# Results committed only once a GPU has run them (benchmarks/gpu_check.py); until then the CPU results must be
# complete without them.
GPU_ONLY = {"gpu_check"}


def library(name: str):
    """The module `benchlib.<name>` of the benchmarks' library, as the scripts import it."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(f"benchlib.{name}")


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the scripts import their shared library (benchlib) from beside them
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


summarize = _load("summarize")
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def _expected_met(value, target):
    """Independent of rows.check: the claim "<op> <number>" applied to the value."""
    if value is None or target is None:
        return None
    op, number = target.split()
    return OPS[op](value, float(number))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    files = [p for p in RESULTS.glob("*.json") if p.name not in OUTPUTS]
    if {p.stem for p in files} - GPU_ONLY != set(SCRIPTS) - GPU_ONLY:
        pytest.skip(f"committed results missing for: {sorted(set(SCRIPTS) - GPU_ONLY - {p.stem for p in files})}")
    out = tmp_path / "results"
    out.mkdir()
    for path in files:
        shutil.copy2(path, out / path.name)
    return out


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _ran(results: Path) -> list[str]:
    """The benchmarks with results here (a GPU-only one has none until a GPU ran it)."""
    return [n for n in SCRIPTS if (results / f"{n}.json").is_file()]


def _perm_row(data: dict, size: int = 5) -> dict:
    (row,) = [r for r in data["rows"] if r.get("variant") == f"|S|={size}"]
    return row


def test_every_committed_results_file_has_consistent_rows(results: Path) -> None:
    summary = summarize.summarize(results)
    ran = _ran(results)
    assert list(summary["files"]) == SCRIPTS and all(summary["files"][n]["status"] == "ok" for n in ran)
    assert all(summary["files"][n]["status"] == "not run" for n in set(SCRIPTS) - set(ran))
    total = 0
    for name in ran:
        rows = json.loads((results / f"{name}.json").read_text())["rows"]
        assert rows and summary["files"][name]["rows"] == len(rows), name
        total += len(rows)
        for row in rows:
            assert row["figure"].startswith(f"{name}."), row
            assert row["met"] is _expected_met(row["value"], row["target"]), row
            for machine in row["machine"].split("; "):  # each machine named once in the file's line
                assert machine and summary["files"][name]["machine"].split("; ").count(machine) == 1, name
    assert len(summary["rows"]) == total
    met = [r["met"] for r in summary["rows"] if r["target"] is not None]
    assert summary["targets"] == {"met": sum(met), "total": len(met)}
    assert summary["targets"]["total"] > 20  # every benchmark but retrieval states claims


def test_a_row_whose_met_disagrees_with_its_value_and_target_fails(results: Path) -> None:
    path = results / "perm_loss.json"
    _edit(path, lambda d: _perm_row(d).update(value=1.8))  # over the 1.25 bound, met left at true
    with pytest.raises(summarize.SummaryError,
                       match=r"perm_loss\.json: row 4 \(perm_loss\.exact_over_one_order_step_time\): met is True"):
        summarize.summarize(results)

    _edit(path, lambda d: _perm_row(d).update(value=1.2, met=False))  # within the bound, met flipped
    with pytest.raises(summarize.SummaryError, match="met is False"):
        summarize.summarize(results)

    _edit(path, lambda d: _perm_row(d, 4).update(met=False))  # no target: met must be null
    _edit(path, lambda d: _perm_row(d).update(met=True))
    with pytest.raises(summarize.SummaryError, match=r"row 3 .*met is False"):
        summarize.summarize(results)

    proc = subprocess.run([sys.executable, str(BENCH / "summarize.py"), "--results", str(results)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "perm_loss.json: row 3" in proc.stderr
    assert not (results / "SUMMARY.md").exists()


@pytest.mark.parametrize("change", [lambda d: d.pop("rows"), lambda d: d.update(rows=[])])
def test_a_results_file_without_rows_fails(results: Path, change) -> None:
    _edit(results / "selector.json", change)
    with pytest.raises(summarize.SummaryError, match=r"selector\.json: no rows .*selector\.py --rows-only"):
        summarize.summarize(results)


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.pop("machine"), "missing machine"),
    (lambda r: r.update(target="about 3"), "expected '<op> <number>'"),
    (lambda r: r.update(target=">= fast"), "'fast' is not a number"),
    (lambda r: r.update(value="quick"), "value 'quick' is not a number"),
])
def test_a_malformed_row_names_file_and_row(results: Path, change, message: str) -> None:
    _edit(results / "solver.json", lambda d: change(d["rows"][0]))
    with pytest.raises(summarize.SummaryError, match=rf"solver\.json: row 0 .*{message}"):
        summarize.summarize(results)
    (results / "solver.json").write_text("{not json")
    with pytest.raises(summarize.SummaryError, match=r"solver\.json: not readable JSON"):
        summarize.summarize(results)


def test_a_missed_target_reads_no(results: Path) -> None:
    before = summarize.summarize(results)["targets"]
    _edit(results / "perm_loss.json", lambda d: _perm_row(d).update(value=1.8, met=False))
    summary = summarize.summarize(results)
    assert summary["targets"] == {"met": before["met"] - 1, "total": before["total"]}
    assert "| perm_loss.exact_over_one_order_step_time | \\|S\\|=5 | 1.8 | × | ≤ 1.25 | NO |" in summarize.markdown(
        summary)


def test_missing_file_is_not_run_and_any_file_with_rows_is_summarised(results: Path) -> None:
    (results / "selector.json").unlink()
    row = {"figure": "brand_new.speed", "value": 2.5, "unit": "x", "target": ">= 2", "met": True, "machine": "1 core"}
    (results / "brand_new.json").write_text(json.dumps({"benchmark": "brand_new", "rows": [row]}))
    summary = summarize.summarize(results)
    assert summary["files"]["selector"] == {"file": "selector.json", "status": "not run"}
    assert summary["files"]["brand_new"]["date"] == "not recorded"
    assert [r for r in summary["rows"] if r["benchmark"] == "brand_new"] == [{"benchmark": "brand_new", **row}]
    md = summarize.markdown(summary)
    assert "`benchmarks/selector.py`: not run." in md
    assert "| brand_new.speed | — | 2.5 | × | ≥ 2 | yes |  |" in md


def test_cli_writes_markdown_json_and_stdout(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH / "summarize.py"), "--results", str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    md = (out / "SUMMARY.md").read_text()
    assert proc.stdout == md + "\n"
    solver = json.loads((results / "solver.json").read_text())
    assert f"Machine: {solver['rows'][0]['machine']}. Date: {solver['date']}." in md.split("## solver")[1]
    ran = _ran(results)
    assert md.count("| figure | variant | value | unit | target | met | note |") == len(ran)
    data = json.loads((out / "summary.json").read_text())
    assert len(data["rows"]) == sum(len(json.loads((results / f"{n}.json").read_text())["rows"]) for n in ran)
    assert len(data["rows"]) == sum(line.startswith("| ") for line in md.splitlines()) - len(ran)  # headers
    assert f"targets met: {data['targets']['met']} of {data['targets']['total']}" in md
    assert not (results / "SUMMARY.md").exists()  # --out is honoured
