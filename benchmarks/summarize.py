"""Summarise benchmarks/results/*.json into one table (SUMMARY.md, summary.json, stdout).

    python benchmarks/summarize.py [--results benchmarks/results] [--out benchmarks/results]

One row per figure: benchmark | figure | measured | target | met. Targets are the ones each
script stores in its JSON (its threshold, not its pass flag: `met` is recomputed here from the
measured value). Where a script stores none, the fallback targets below apply (DESIGN §7 lists
the measurements but no thresholds); figures without a target show "—".

Every benchmark script beside this file (and every extractor below) gets rows: a missing result
file is listed as "not run", a result file without an extractor as "no extractor". A malformed
file (bad JSON, missing key, wrong type) stops the summary with an error naming the file and key.

The header names the machine as recorded in the result files (processor, CPU count, platform,
Python and torch versions); a field that no file records is collected now and marked as such.
A result file that records no timestamp is dated by its last commit when it is unchanged since (a
fresh clone gives every file the clone's time), else by its modification time (UTC).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT_NAMES = ("summary.json", "SUMMARY.md")

# Fallback targets, used only when a result file stores none.
FALLBACK = {
    "attention_capture.time_over_sdpa": 2.0,
    "attention_capture.peak_over_eager": 0.05,
    "attention_capture.peak_tokens": 4096,
    "attention_capture.max_abs_diff": 1e-6,
    "solver.mean_ratio": 0.95,
    "solver.questions_per_second_k1_20": 10_000.0,
    "solver.us_per_question_k1_100": 1000.0,
    "perm_loss.max_ratio": 1.25,
    "perm_loss.size": 5,
    "selector.full_ranking_over_one_pass_min": 3.0,
    "learnability.f1": 0.85,
}


_REQUIRED = object()


class SummaryError(Exception):
    """A result file that cannot be summarised (message names the file and key)."""


@dataclass
class Row:
    benchmark: str
    figure: str
    measured: float | None  # the value compared with the target (None: not run / no extractor)
    fmt: str = "{:.3g}"  # how `measured` and `target` are printed
    target: float | None = None
    op: str | None = None  # ">=" or "<=" (None: no target)
    note: str = ""  # printed after the measured value
    status: str = "ok"  # ok | not run | no extractor
    file: str = ""
    target_source: str | None = None  # "results file" | "fallback"
    target_fmt: str | None = None  # how `target` is printed (default: fmt)

    @property
    def met(self) -> bool | None:
        if self.measured is None or self.target is None or self.op is None:
            return None
        return self.measured >= self.target if self.op == ">=" else self.measured <= self.target

    def measured_text(self) -> str:
        if self.measured is None:
            return self.status
        text = self.fmt.format(self.measured)
        return f"{text} ({self.note})" if self.note else text

    def target_text(self) -> str:
        if self.target is None or self.op is None:
            return "—"
        return ("≥ " if self.op == ">=" else "≤ ") + (self.target_fmt or self.fmt).format(self.target)

    def met_text(self) -> str:
        return {True: "yes", False: "NO", None: "—"}[self.met]

    def to_json(self) -> dict:
        out = asdict(self)
        out.update(met=self.met, measured_text=self.measured_text(), target_text=self.target_text())
        return out


class Doc:
    """A parsed result file; lookups raise SummaryError naming the file and the key path."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def error(self, keys: tuple, why: str) -> SummaryError:
        return SummaryError(f"{self.path}: key {'.'.join(str(k) for k in keys)!r}: {why}")

    def get(self, *keys, default=_REQUIRED):
        node = self.data
        for i, key in enumerate(keys):
            if not isinstance(node, dict) or key not in node:
                if default is not _REQUIRED:
                    return default
                where = "missing" if isinstance(node, dict) else f"parent is {type(node).__name__}, not an object"
                raise self.error(keys[: i + 1], where)
            node = node[key]
        return node

    def num(self, *keys, default=_REQUIRED) -> float:
        value = self.get(*keys, default=default)
        if value is default and default is not _REQUIRED:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(keys, f"expected a number, got {value!r}")
        return float(value)

    def obj(self, *keys) -> dict:
        value = self.get(*keys)
        if not isinstance(value, dict) or not value:
            raise self.error(keys, f"expected a non-empty object, got {value!r}")
        return value


def _target(doc: Doc, keys: tuple, fallback_key: str) -> tuple[float, str]:
    """The threshold stored at `keys` in the result file, else the fallback."""
    if doc.get(*keys, default=None) is not None:
        return doc.num(*keys), "results file"
    return FALLBACK[fallback_key], "fallback"


# ---------------------------------------------------------------- one extractor per results file


def retrieval_rows(doc: Doc) -> list[Row]:
    b = "retrieval"
    return [
        Row(b, f"BM25 index build time ({doc.num('corpus_passages'):,.0f} passages)", doc.num("index_build_seconds"),
            "{:.3f} s", note=f"{doc.num('index_build_passages_per_second'):,.0f} passages/s"),
        Row(b, f"BM25 top-{doc.num('k'):.0f} query throughput ({doc.num('queries'):,.0f} queries)",
            doc.num("queries_per_second"), "{:,.1f} queries/s"),
    ]


_ATT_PEAK = re.compile(r"^capture_peak_le_(?P<t>[0-9.eE+-]+)_eager_at_(?P<n>\d+)$")
_ATT_TIME = re.compile(r"^capture_time_le_(?P<t>[0-9.eE+-]+)x_sdpa")
_ATT_DIFF = re.compile(r"^max_abs_diff_le_(?P<t>[0-9.eE+-]+)$")


def _stored_threshold(doc: Doc, pattern: re.Pattern) -> re.Match | None:
    """attention_capture stores its thresholds in the names of its `targets` flags."""
    for key in doc.get("targets", default={}) or {}:
        match = pattern.match(key)
        if match:
            try:
                float(match["t"])
            except ValueError:
                raise doc.error(("targets", key), "threshold in the key name is not a number") from None
            return match
    return None


def attention_capture_rows(doc: Doc) -> list[Row]:
    b = "attention_capture"
    rows_data = doc.get("rows")
    if not isinstance(rows_data, list) or not rows_data:
        raise doc.error(("rows",), f"expected a non-empty list, got {rows_data!r}")
    rows_doc = Doc(doc.path, {"rows": {str(i): r for i, r in enumerate(rows_data)}})  # keys name the index

    m = _stored_threshold(doc, _ATT_TIME)
    time_t, time_src = (float(m["t"]), "results file") if m else (FALLBACK[f"{b}.time_over_sdpa"], "fallback")
    m = _stored_threshold(doc, _ATT_PEAK)
    if m:
        peak_t, peak_n, peak_src = float(m["t"]), int(m["n"]), "results file"
    else:
        peak_t, peak_n, peak_src = FALLBACK[f"{b}.peak_over_eager"], FALLBACK[f"{b}.peak_tokens"], "fallback"
    m = _stored_threshold(doc, _ATT_DIFF)
    diff_t, diff_src = (float(m["t"]), "results file") if m else (FALLBACK[f"{b}.max_abs_diff"], "fallback")

    out, diffs, peak_row = [], [], None
    for i in range(len(rows_data)):
        k = str(i)
        tokens = int(rows_doc.num("rows", k, "tokens"))
        cap_s, sdpa_s = rows_doc.num("rows", k, "capture", "seconds"), rows_doc.num("rows", k, "sdpa", "seconds")
        out.append(Row(b, f"capture time / plain sdpa forward, {tokens} tokens",
                       rows_doc.num("rows", k, "capture_over_sdpa_time"), "{:.2f}×", time_t, "<=",
                       note=f"{cap_s:.3f} s vs {sdpa_s:.3f} s", target_source=time_src, target_fmt="{:g}×"))
        diffs.append(rows_doc.num("rows", k, "max_abs_diff"))
        if tokens == peak_n:
            cap_mb, eag_mb = rows_doc.num("rows", k, "capture", "peak_mb"), rows_doc.num("rows", k, "eager", "peak_mb")
            peak_row = Row(b, f"capture peak memory / eager output_attentions, {tokens} tokens",
                           rows_doc.num("rows", k, "capture_over_eager_peak"), "{:.4g}×", peak_t, "<=",
                           note=f"{cap_mb:,.1f} MB vs {eag_mb:,.1f} MB", target_source=peak_src, target_fmt="{:g}×")
    if peak_row is None:
        peak_row = Row(b, f"capture peak memory / eager output_attentions, {peak_n} tokens", None,
                       status=f"not run at {peak_n} tokens")
    out.append(peak_row)
    out.append(Row(b, f"max |capture − eager| segment-average attention, all {len(diffs)} lengths", max(diffs),
                   "{:.1e}", diff_t, "<=", target_source=diff_src, target_fmt="{:g}"))
    return out


def solver_rows(doc: Doc) -> list[Row]:
    b = "solver"
    setting = doc.get("ratio_setting", default={}) or {}
    where = ", ".join(f"{k}={setting[k]}" for k in ("K1", "K", "N") if k in setting)
    out = []
    for name in doc.obj("ratio"):
        target, src = _target(doc, ("ratio", name, "target_mean_ratio"), f"{b}.mean_ratio")
        lam = doc.num("ratio", name, "lam")
        n = doc.num("ratio", name, "n_ratio_defined")
        out.append(Row(b, f"greedy / exact mean objective ratio, {name} (λ={lam:g}{', ' + where if where else ''})",
                       doc.num("ratio", name, "mean_ratio"), "{:.4f}", target, ">=",
                       note=f"worst {doc.num('ratio', name, 'worst_ratio'):.3f}, {n:,.0f} instances",
                       target_source=src, target_fmt="{:g}"))
    for name in doc.obj("throughput"):
        k1 = int(doc.num("throughput", name, "K1"))
        qps, usq = doc.num("throughput", name, "questions_per_second"), doc.num("throughput", name, "us_per_question")
        figure = (f"batched greedy throughput, one core, K1={k1}, N={doc.num('throughput', name, 'N'):.0f}, "
                  f"K={doc.num('throughput', name, 'K'):.0f}, {doc.get('throughput', name, 'dtype', default='?')}")
        qps_row = Row(b, figure, qps, "{:,.0f} questions/s", note=f"{usq:.2f} µs/question")
        usq_row = Row(b, figure, usq, "{:.2f} µs/question", note=f"{qps:,.0f} questions/s",
                      target_fmt="{:g} µs/question")
        if doc.get("throughput", name, "target_questions_per_second", default=None) is not None:
            qps_row.target, qps_row.op, qps_row.target_source = (
                doc.num("throughput", name, "target_questions_per_second"), ">=", "results file")
            out.append(qps_row)
        elif doc.get("throughput", name, "target_us_per_question", default=None) is not None:
            usq_row.target, usq_row.op, usq_row.target_source = (
                doc.num("throughput", name, "target_us_per_question"), "<=", "results file")
            out.append(usq_row)
        elif k1 == 20:
            qps_row.target, qps_row.op, qps_row.target_source = (
                FALLBACK[f"{b}.questions_per_second_k1_20"], ">=", "fallback")
            out.append(qps_row)
        elif k1 == 100:
            usq_row.target, usq_row.op, usq_row.target_source = (
                FALLBACK[f"{b}.us_per_question_k1_100"], "<=", "fallback")
            out.append(usq_row)
        else:
            out.append(qps_row)
    return out


def oracle_labels_rows(doc: Doc) -> list[Row]:
    """Held-out label F1 (targets from the file) and precision against retrieval's top-|S| per dataset."""
    b = "oracle_labels"
    out = []
    targets = doc.obj("target_f1")
    for name in doc.obj("results"):
        held = ("results", name, "heldout_shipped")
        n = doc.num("results", name, "questions", "heldout")
        size = doc.num(*held, "mean_size")
        fallback = doc.num(*held, "fallback_rate")
        f1 = doc.num(*held, "f1")
        top2 = doc.num("results", name, "heldout_retrieval", "top2", "f1")
        target = targets.get(name)
        out.append(Row(b, f"held-out label F1 vs gold passages, {name} ({n:.0f} questions, mean |S| {size:.2f}, "
                          f"fallback {fallback:.1%})", f1, "{:.3f}", target=target, op=">=" if target else None,
                       note=f"retrieval top-2 {top2:.3f}", target_source="results file" if target else None))
        top = doc.num(*held, "top_s_precision")
        sel = doc.num(*held, "precision")
        out.append(Row(b, f"held-out selected-set precision minus retrieval top-|S| precision, {name}", sel - top,
                       "{:+.3f}", target=0.0, op=">=", note=f"{sel:.3f} vs {top:.3f}", target_source="results file"))
    return out


_PERM_SIZE = re.compile(r"\|S\|\s*=\s*(\d+)")


def perm_loss_rows(doc: Doc) -> list[Row]:
    b = "perm_loss"
    target, src = _target(doc, ("target", "max_ratio"), f"{b}.max_ratio")
    match = _PERM_SIZE.search(str(doc.get("target", "metric", default="")))
    size = match[1] if match else str(FALLBACK[f"{b}.size"])
    results = doc.obj("results")
    if size not in results:
        raise doc.error(("results", size), "missing (the size the target is stated at)")
    out = []
    for s in sorted(results, key=int):
        naive = doc.get("results", s, "naive", default={}) or {}
        note = f"{doc.num('results', s, 'exact', 'median_s'):.3f} s vs {doc.num('results', s, 'one_order', 'median_s'):.3f} s"
        if "ratio_naive_vs_one_order" in results[s]:
            est = " estimated" if naive.get("estimated") else ""
            note += f"; naive {doc.num('results', s, 'ratio_naive_vs_one_order'):.1f}×{est}"
        row = Row(b, f"exact permutation-invariant loss / one fixed ordering, time per step, |S|={s}",
                  doc.num("results", s, "ratio_exact_vs_one_order"), "{:.2f}×", note=note)
        if s == size:
            row.target, row.op, row.target_source, row.target_fmt = target, "<=", src, "{:g}×"
        out.append(row)
    return out


def selector_rows(doc: Doc) -> list[Row]:
    b = "selector"
    target, src = _target(doc, ("target", "full_ranking_over_one_pass_min"), f"{b}.full_ranking_over_one_pass_min")
    k1 = doc.get("setting", "k1", default="?")
    one = doc.num("latency_per_question", "one_pass", "median_ms")
    full = doc.num("latency_per_question", "full_ranking", "median_ms")
    gen5 = doc.num("latency_per_question", "generate5", "median_ms")
    return [
        Row(b, f"latency per question, one forward pass (K1={k1}, median)", one, "{:.1f} ms"),
        Row(b, "latency per question, generating 5 identifiers / one pass", gen5 / one, "{:.2f}×",
            note=f"{gen5:.1f} ms"),
        Row(b, f"latency per question, generating the full ranking of {k1} identifiers / one pass",
            doc.num("ratios", "full_ranking_over_one_pass"), "{:.2f}×", target, ">=", note=f"{full:.1f} ms",
            target_source=src, target_fmt="{:g}×"),
    ]


def learnability_rows(doc: Doc) -> list[Row]:
    """Per task: the student's test subset F1 at τ3 for each loss variant, then the best baseline."""
    b = "learnability"
    target, src = _target(doc, ("target", "test_subset_f1_min"), f"{b}.f1")
    target_task = doc.get("target", "task", default="colour")
    target_variant = doc.get("target", "variant", default="cl+lm")
    results = doc.get("results")
    if not isinstance(results, dict):
        raise doc.error(("results",), f"expected an object, got {results!r}")
    labels = {"cl+lm": "L_CL + L_LM", "cl": "L_CL only", "lm": "L_LM only"}
    out = []
    for task in results:
        variants = doc.get("results", task, "variants")
        if not isinstance(variants, dict):
            raise doc.error(("results", task, "variants"), f"expected an object, got {variants!r}")
        for key, label in labels.items():
            figure = f"{task}: test subset F1 at τ3, {label}"
            if key not in variants:
                out.append(Row(b, figure, None, status="not run", file=doc.path.name))
                continue
            at_size = doc.num("results", task, "variants", key, "test_subset_f1_at_teacher_size")
            seconds = doc.num("results", task, "variants", key, "seconds")
            row = Row(b, figure, doc.num("results", task, "variants", key, "test_subset_f1"), "{:.3f}",
                      note=f"at |S|: {at_size:.3f}; {seconds:.0f} s")
            if task == target_task and key == target_variant:
                row.target, row.op, row.target_source, row.target_fmt = target, ">=", src, "{:g}"
            out.append(row)
        base = doc.get("results", task, "baselines_test")
        if isinstance(base, dict) and base:
            name, value = max(((k, doc.num("results", task, "baselines_test", k)) for k in base), key=lambda kv: kv[1])
            out.append(Row(b, f"{task}: best baseline on the test split ({name.replace('_', ' ')})", value, "{:.3f}",
                           note=f"select all {doc.num('results', task, 'baselines_test', 'select_all'):.3f}"))
    return out


def generic_rows(name: str) -> Callable[[Doc], list[Row]]:
    """Rows of a benchmark that writes its own ``rows``: (figure, value, unit, target, op, met)."""

    def extract(doc: Doc) -> list[Row]:
        table = doc.get("rows")
        if not isinstance(table, list):
            raise doc.error(("rows",), f"expected a list of rows, got {table!r}")
        out = []
        for i, r in enumerate(table):
            if not isinstance(r, dict) or "figure" not in r or "unit" not in r:
                raise doc.error(("rows", i), f"expected an object with figure, value and unit, got {r!r}")
            unit = str(r["unit"])
            fmt = "{:.2f}×" if unit == "x" else "{:,.1f} " + unit
            value = r.get("value")
            out.append(Row(name, str(r["figure"]), None if value is None else float(value), fmt,
                           target=r.get("target"), op=r.get("op"), status="ok" if value is not None else "not run",
                           target_source="results file" if r.get("target") is not None else None))
        return out

    return extract


# Order of the Makefile `bench` recipe.
EXTRACTORS: dict[str, Callable[[Doc], list[Row]]] = {
    "retrieval": retrieval_rows,
    "solver": solver_rows,
    "attention_capture": attention_capture_rows,
    "oracle_labels": oracle_labels_rows,
    "perm_loss": perm_loss_rows,
    "selector": selector_rows,
    "learnability": learnability_rows,
    "corpus_scale": generic_rows("corpus_scale"),
}


# ---------------------------------------------------------------- loading, machine, dates


def load(path: Path) -> Doc:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SummaryError(f"{path}: top level is {type(data).__name__}, expected an object")
    name = data.get("benchmark")
    if name is not None and name != path.stem:
        raise SummaryError(f"{path}: key 'benchmark' is {name!r}, expected {path.stem!r}")
    return Doc(path, data)


def benchmark_names(results_dir: Path, scripts_dir: Path) -> list[str]:
    """Known extractors in bench order, then other scripts and other result files, by name."""
    scripts = {p.stem for p in scripts_dir.glob("*.py") if p.stem != Path(__file__).stem and not p.stem.startswith("_")}
    files = {p.stem for p in results_dir.glob("*.json") if p.name not in OUTPUT_NAMES}
    return list(EXTRACTORS) + sorted((scripts | files) - set(EXTRACTORS))


# (field, label, paths tried in order in each result file)
MACHINE_FIELDS = (
    ("processor", "processor", (("machine", "processor"), ("setting", "processor"), ("setting", "machine"))),
    ("cpus", "CPUs", (("machine", "cpus"), ("setting", "cpu_count"), ("cpu_count",))),
    ("platform", "platform", (("versions", "platform"),)),
    ("python", "Python", (("versions", "python"),)),
    ("torch", "torch", (("versions", "torch"),)),
)


def _now_value(field: str) -> str:
    if field == "processor":
        return platform.processor() or platform.machine()
    if field == "cpus":
        return str(os.cpu_count())
    if field == "platform":
        return platform.platform()
    if field == "python":
        return platform.python_version()
    from importlib.metadata import PackageNotFoundError, version  # no torch import: it takes seconds

    try:
        return version("torch")
    except PackageNotFoundError:
        return "not installed"


def machine_info(docs: dict[str, Doc]) -> dict:
    """Per field: the values recorded in the result files (and by which), or the value collected now."""
    info = {}
    for field, label, paths in MACHINE_FIELDS:
        seen: dict[str, list[str]] = {}
        for name, doc in docs.items():
            for path in paths:
                value = doc.get(*path, default=None)
                if value is not None and not isinstance(value, (dict, list)):
                    seen.setdefault(str(value), []).append(name)
                    break
        if seen:
            recorded_by = sorted({n for names in seen.values() for n in names})
            info[field] = {"label": label, "values": seen, "source": "results",
                           "not_recorded_by": sorted(set(docs) - set(recorded_by))}
        else:
            info[field] = {"label": label, "values": {_now_value(field): []}, "source": "summarize time",
                           "not_recorded_by": sorted(docs)}
    return info


def machine_line(info: dict) -> str:
    recorded, collected, gaps = [], [], []
    for field in info.values():
        values = field["values"]
        if len(values) == 1:
            text = f"{field['label']} {next(iter(values))}"
        else:
            text = f"{field['label']} " + " / ".join(f"{v} ({', '.join(n)})" for v, n in values.items())
        if field["source"] == "results":
            recorded.append(text)
            if field["not_recorded_by"]:
                gaps.append(f"{field['label']}: {', '.join(field['not_recorded_by'])}")
        else:
            collected.append(text)
    line = "**Machine** (as recorded in the result files): " + ("; ".join(recorded) or "nothing recorded") + "."
    if gaps:
        line += " Not recorded by — " + "; ".join(gaps) + "."
    if collected:
        line += (" Collected at summarize time on this machine, since no result file records it: "
                 + "; ".join(collected) + ".")
    return line


def file_date(doc: Doc) -> tuple[str, str]:
    """(date, source): a date the file records, else its last commit (unchanged since), else its mtime, in UTC."""
    for key in ("date", "timestamp", "created"):
        value = doc.get(key, default=None)
        if isinstance(value, str) and value:
            return value, f"recorded ({key})"
    committed = git_commit_date(doc.path)
    if committed is not None:  # a fresh clone sets every mtime to the clone's time
        return committed.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "last commit"
    mtime = dt.datetime.fromtimestamp(doc.path.stat().st_mtime, tz=dt.timezone.utc)
    return mtime.strftime("%Y-%m-%d %H:%M UTC"), "file modification time"


def git_commit_date(path: Path) -> dt.datetime | None:
    """When `path` was last committed, if it is tracked and unchanged since (else None: its mtime is the truth)."""
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args, "--", path.name], cwd=path.parent, capture_output=True, text=True,
                              check=False)

    try:
        if git("diff", "--quiet", "HEAD").returncode != 0:  # modified (or not a git checkout)
            return None
        stamp = git("log", "-1", "--format=%cI").stdout.strip()
    except OSError:  # no git
        return None
    return dt.datetime.fromisoformat(stamp) if stamp else None


# ---------------------------------------------------------------- summary


def summarize(results_dir: Path, scripts_dir: Path = HERE) -> dict:
    """Rows, machine and file dates for every benchmark; raises SummaryError on a malformed file."""
    rows: list[Row] = []
    docs: dict[str, Doc] = {}
    files: dict[str, dict] = {}
    for name in benchmark_names(results_dir, scripts_dir):
        path = results_dir / f"{name}.json"
        if not path.exists():
            rows.append(Row(name, "—", None, status="not run"))
            files[name] = {"file": path.name, "status": "not run"}
            continue
        doc = docs[name] = load(path)
        date, source = file_date(doc)
        extractor = EXTRACTORS.get(name)
        status = "ok" if extractor else "no extractor"
        files[name] = {"file": path.name, "status": status, "date": date, "date_source": source}
        if extractor is None:
            rows.append(Row(name, "—", None, status="no extractor"))
            continue
        for row in extractor(doc):
            row.file = path.name
            rows.append(row)
    return {"machine": machine_info(docs), "files": files, "rows": rows}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[Row]) -> str:
    lines = ["| benchmark | figure | measured | target | met |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(c) for c in (r.benchmark, r.figure, r.measured_text(), r.target_text(),
                                                          r.met_text())) + " |")
    return "\n".join(lines)


def markdown(summary: dict) -> str:
    dates = [f"{name} {f['date']}" if "date" in f else f"{name} (not run)" for name, f in summary["files"].items()]
    sources = {f.get("date_source") for f in summary["files"].values() if "date" in f}
    date_note = ", else ".join(n for n, src in (("recorded date", "recorded"), ("last commit", "last commit"),
                                                ("file modification time", "file modification time"))
                               if any(str(x).startswith(src) for x in sources)) or "file modification time"
    fallback = any(r.target_source == "fallback" for r in summary["rows"])
    met = [r.met for r in summary["rows"] if r.met is not None]
    return "\n".join([
        "# Benchmark summary",
        "",
        machine_line(summary["machine"]),
        "",
        f"**Result files** ({date_note}): " + "; ".join(dates) + ".",
        "",
        "Generated by `benchmarks/summarize.py` from `benchmarks/results/*.json` (`make bench`). Targets are "
        "the thresholds each script stores in its JSON" + (
            "; those marked in summary.json with `target_source: fallback` are the summarizer's defaults"
            if fallback else "") + f"; met: {sum(met)} of {len(met)} targets.",
        "",
        table(summary["rows"]),
        "",
    ])


def summary_json(summary: dict) -> dict:
    return {"machine": summary["machine"], "files": summary["files"],
            "rows": [r.to_json() for r in summary["rows"]]}


def write_outputs(summary: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("SUMMARY.md", markdown(summary)),
                       ("summary.json", json.dumps(summary_json(summary), indent=2, ensure_ascii=False) + "\n")):
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
    print(table(summary["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
