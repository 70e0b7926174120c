"""Summarise the ``rows`` of benchmarks/results/*.json into one report (SUMMARY.md, summary.json, stdout).

    python benchmarks/summarize.py [--results benchmarks/results] [--out DIR]

Generic: every results file holds its figures as rows in the format of rows.py, and this script knows
no benchmark. Each row is checked (required fields, a well-formed target, ``met`` equal to its value
against its target); a results file that is not JSON, has no rows or holds an inconsistent row stops
the summary with an error naming the file and the row. A benchmark script beside this file without a
results file is listed as not run. Per file the report names the machine (from its rows) and the date
the file records.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchlib.rows import REQUIRED, check, parse_target

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"summarize", "rows", "harness"}  # modules beside the benchmark scripts
PARTS_SUFFIX = "_parts"  # <benchmark>_parts.py: the helpers of a benchmark script, split off it
OUTPUTS = ("summary.json", "SUMMARY.md")
SYMBOLS = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}


class SummaryError(Exception):
    """A results file that cannot be summarised (the message names the file and the row)."""


def load_rows(path: Path) -> tuple[dict, list[dict]]:
    """A results file and its checked rows."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryError(f"{path}: not readable JSON: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise SummaryError(f"{path}: no rows (python benchmarks/{path.stem}.py --rows-only --out {path})")
    for i, row in enumerate(rows):
        where = f"{path}: row {i}" + (f" ({row.get('figure')})" if isinstance(row, dict) else "")
        missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
        if missing:
            raise SummaryError(f"{where}: missing {', '.join(missing)}")
        value = row["value"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SummaryError(f"{where}: value {value!r} is not a number")
        try:
            expected = check(value, row["target"])
        except ValueError as exc:
            raise SummaryError(f"{where}: {exc}") from None
        if row["met"] is not expected:
            raise SummaryError(f"{where}: met is {row['met']} but {value} against {row['target']!r} gives {expected}")
    return data, rows


def benchmark_scripts(scripts_dir: Path = HERE) -> list[str]:
    """The benchmark scripts beside this file, by name: every module but the shared ones, private ones (``_*``)
    and the helpers a script was split into (``*_parts``)."""
    return sorted(p.stem for p in scripts_dir.glob("*.py")
                  if p.stem not in NOT_BENCHMARKS and p.stem[0] != "_" and not p.stem.endswith(PARTS_SUFFIX))


def summarize(results_dir: Path, scripts_dir: Path = HERE) -> dict:
    """Files (status, date, machine, row count), all rows (each with its benchmark) and the count of met targets."""
    scripts = set(benchmark_scripts(scripts_dir))
    stored = {p.stem for p in results_dir.glob("*.json") if p.name not in OUTPUTS}
    files, rows = {}, []
    for name in sorted(scripts | stored):
        path = results_dir / f"{name}.json"
        if name not in stored:
            files[name] = {"file": path.name, "status": "not run"}
            continue
        data, table = load_rows(path)
        # each machine once: a row over seeds run on several names them all ("A; B")
        machines = list(dict.fromkeys(m for r in table for m in r["machine"].split("; ")))
        files[name] = {"file": path.name, "status": "ok", "date": data.get("date") or "not recorded",
                       "machine": "; ".join(machines), "rows": len(table)}
        rows += [{"benchmark": name, **r} for r in table]
    targets = [r["met"] for r in rows if r["target"] is not None and r["value"] is not None]
    return {"files": files, "rows": rows, "targets": {"met": sum(targets), "total": len(targets)}}


def number(value: float) -> str:
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if size >= 1e-3 or size == 0 else f"{value:.2g}"


def cells(row: dict) -> list[str]:
    """figure, variant (and seed), value, unit, target, met, note of one row, as text."""
    variant = ", ".join(x for x in (row.get("variant"), f"seed {row['seed']}" if "seed" in row else None) if x)
    target = "—"
    if row["target"] is not None:
        op, bound = parse_target(row["target"])
        target = f"{SYMBOLS[op]} {number(bound)}"
    return [row["figure"], variant or "—", "not measured" if row["value"] is None else number(row["value"]),
            "×" if row["unit"] == "x" else row["unit"], target, {True: "yes", False: "NO", None: "—"}[row["met"]],
            row.get("note") or ""]


def markdown(summary: dict) -> str:
    met = summary["targets"]
    lines = ["# Benchmark summary", "",
             f"Generated by `benchmarks/summarize.py` from the rows of `benchmarks/results/*.json`; "
             f"targets met: {met['met']} of {met['total']}.", ""]
    for name, info in summary["files"].items():
        lines.append(f"## {name}")
        lines.append("")
        if info["status"] != "ok":
            lines += [f"`benchmarks/{name}.py`: not run.", ""]
            continue
        lines += [f"Machine: {info['machine']}. Date: {info['date']}. Script: `benchmarks/{name}.py`.", "",
                  "| figure | variant | value | unit | target | met | note |", "|---|---|---|---|---|---|---|"]
        for row in summary["rows"]:
            if row["benchmark"] == name:
                lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(row)) + " |")
        lines.append("")
    return "\n".join(lines)


def write_outputs(summary: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("SUMMARY.md", markdown(summary)),
                       ("summary.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")):
        tmp = out_dir / f"{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out_dir / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results", help="folder of <benchmark>.json files")
    parser.add_argument("--out", type=Path, default=None, help="folder for SUMMARY.md and summary.json "
                                                               "(default: --results)")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.results)
    except SummaryError as exc:
        print(f"summarize: error: {exc}", file=sys.stderr)
        return 2
    write_outputs(summary, args.out or args.results)
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
