"""`purecover label-report RUN_DIR`: diagnostics of run_dir/labels.jsonl, as text, JSON and plots.

Reads ``labels.jsonl`` and ``candidates.jsonl`` of a run, computes
:func:`~purecover.teacher.diagnostics.label_diagnostics` and, where the candidates carry gold
passages, :func:`~purecover.teacher.diagnostics.gold_comparison`, and writes into
``RUN_DIR/label_report/`` (or ``--out``):

- ``report.json``: ``{run_dir, labels_file, candidates_file, report_file, k, fallback_warn, warning,
  diagnostics, comparison, figures}`` (written atomically; ``figures``: name -> PNG path);
- ``size_histogram.png``: questions per |S|, fallbacks stacked in another colour;
- ``precision_recall.png`` (only with gold passages): P / R / F1 of the labels and of retrieval.

The warning threshold is the run's ``teacher.fallback_warn`` (from ``label.run.json``), else 0.1.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..records import (
    CandidateRecord,
    GoldComparison,
    LabelDiagnostics,
    LabelRecord,
    LabelReport,
    PrecisionRecall,
    validate_line,
)
from ..utils.io import atomic_write_json, ensure_output_dir, read_jsonl
from .diagnostics import fallback_warning, gold_comparison, label_diagnostics

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_FALLBACK_WARN",
    "REPORT_DIR",
    "fallback_threshold",
    "label_report",
    "plot_precision_recall",
    "plot_size_histogram",
    "read_run",
    "render_label_report",
]

REPORT_DIR = "label_report"
DEFAULT_FALLBACK_WARN = 0.1
_METHODS = (  # comparison key -> row name of the table (K filled in)
    ("labels", "labels"),
    ("retrieval_top_size", "retrieval top-|S|"),
    ("retrieval_top_2", "retrieval top-2"),
    ("retrieval_top_k", "retrieval top-K (K={k})"),
)


# --------------------------------------------------------------------------- inputs


def _require(path: Path, producer: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `purecover {producer} RECIPE` first")
    return path


def read_run(run_dir: str | Path) -> tuple[list[LabelRecord], dict[str, CandidateRecord]]:
    """(label records, candidates by qid) of a run, each line checked as its record (errors name file, line and
    field); a missing or empty file is a one-line error."""
    from ..data.data_stage import read_candidate_records

    run = Path(run_dir)
    labels_path = _require(run / "labels.jsonl", "label")
    candidates_path = _require(run / "candidates.jsonl", "data")
    records = [validate_line(LabelRecord, rec, labels_path, lineno) for lineno, rec in read_jsonl(labels_path)]
    if not records:
        raise ValueError(f"{labels_path} has no records")
    candidates = {rec.qid: rec for rec in read_candidate_records(candidates_path)}
    return records, candidates


def fallback_threshold(run_dir: str | Path) -> float:
    """``teacher.fallback_warn`` of the run's label.run.json recipe (a share), else 0.1."""
    path = Path(run_dir) / "label.run.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))["recipe"]["teacher"]["fallback_warn"]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_FALLBACK_WARN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        log.warning("%s: teacher.fallback_warn is not a number (%r); using %s", path, value, DEFAULT_FALLBACK_WARN)
        return DEFAULT_FALLBACK_WARN
    return float(value)


# --------------------------------------------------------------------------- plots


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    """Save `fig` as PNG through a temporary file and a rename."""
    plt = _pyplot()
    ensure_output_dir(path.parent)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)
    return path


def plot_size_histogram(diag: LabelDiagnostics, path: str | Path) -> Path:
    """Bars of questions per |S| (non-error records), fallback records stacked on top in another colour."""
    plt = _pyplot()
    sizes = list(diag.size_histogram)
    total = [diag.size_histogram[s] for s in sizes]
    fallback = [diag.fallback_size_histogram.get(s, 0) for s in sizes]
    ok = [t - f for t, f in zip(total, fallback)]
    x = [int(s) for s in sizes]
    rate = diag.fallback_rate
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.bar(x, ok, color="tab:blue", label="selected by the greedy / ranking")
    ax.bar(x, fallback, bottom=ok, color="tab:orange", label="fallback")
    shown = "n/a" if rate is None else f"{100 * rate:.1f}%"
    ax.set(xlabel="|S| (passages selected)", ylabel="questions", xticks=x,
           title=f"labels: |S| per question ({diag.questions} questions, fallback {shown})")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, Path(path))


def plot_precision_recall(comparison: GoldComparison, path: str | Path) -> Path:
    """Grouped bars of precision, recall and F1 (%) against gold passages, one group per method."""
    plt = _pyplot()
    names = [label.format(k=comparison.k) for _, label in _METHODS]
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    width = 0.26
    for j, metric in enumerate(("precision", "recall", "f1")):
        values = [100 * (getattr(getattr(comparison, key), metric) or 0.0) for key, _ in _METHODS]
        ax.bar([i + (j - 1) * width for i in range(len(names))], values, width, label=metric)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set(ylabel="%", title=f"against gold passages ({comparison.questions} questions)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, Path(path))


# --------------------------------------------------------------------------- report


def label_report(run_dir: str | Path, out: str | Path | None = None, k: int | None = None) -> LabelReport:
    """Compute the report of `run_dir`, write report.json and the plots into `out`
    (default RUN_DIR/label_report) and return the report. `k`: retrieval's top-k (default: the budget)."""
    run = Path(run_dir)
    records, candidates = read_run(run)
    diag = label_diagnostics(records)
    k = k if k is not None else max(1, diag.budget)
    comparison = gold_comparison(records, candidates, k)
    threshold = fallback_threshold(run)
    out_dir = Path(out) if out is not None else run / REPORT_DIR
    ensure_output_dir(out_dir)
    figures = {"size_histogram": str(plot_size_histogram(diag, out_dir / "size_histogram.png"))}
    if comparison.questions:
        figures["precision_recall"] = str(plot_precision_recall(comparison, out_dir / "precision_recall.png"))
    report = LabelReport(
        run_dir=str(run),
        labels_file=str(run / "labels.jsonl"),
        candidates_file=str(run / "candidates.jsonl"),
        report_file=str(out_dir / "report.json"),
        k=k,
        fallback_warn=threshold,
        warning=fallback_warning(diag, threshold),
        diagnostics=diag,
        comparison=comparison,
        figures=figures,
    )
    atomic_write_json(out_dir / "report.json", report.to_json_dict())
    return report


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{key} {n}" for key, n in counts.items()) or "none"


def _diagnostics_lines(diag: LabelDiagnostics) -> list[str]:
    hist = " ".join(f"{s}:{n}" for s, n in diag.size_histogram.items())
    fb_hist = " ".join(f"{s}:{n}" for s, n in diag.fallback_size_histogram.items() if n)
    first = diag.first_step_stop_rate

    def num(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    return [
        f"  status       ok {diag.ok}, fallback {diag.fallback}, error {diag.error}",
        f"  |S|          mean {num(diag.mean_size)} (budget {diag.budget}); histogram {hist}"
        + (f" (fallbacks {fb_hist})" if fb_hist else ""),
        f"  fallback     {_pct(diag.fallback_rate)}% of questions; reasons: {_counts(diag.fallback_reasons)}",
        *([f"  replies      {diag.replies} teacher replies, {_pct(diag.reply_usable_rate)}% with usable steps; "
           f"issues: {_counts(diag.reply_issues)}"] if diag.replies else []),
        f"  stop         {_counts(diag.stop_counts)}; first-step stops {_pct(first)}%"
        + (" (not recorded)" if first is None else ""),
        f"  e            entropy {num(diag.e_entropy)} nats (normalised {num(diag.e_entropy_normalised)}), "
        f"mean max e {num(diag.max_e)}",
        f"  W            mean over steps of max over documents {num(diag.max_W)}",
    ]


def _comparison_table(comparison: GoldComparison) -> list[str]:
    lines = ["| method | P | R | F1 | mean \\|S\\| |", "|---|---:|---:|---:|---:|"]
    for key, label in _METHODS:
        row: PrecisionRecall = getattr(comparison, key)
        size = "n/a" if row.mean_size is None else f"{row.mean_size:.2f}"
        name = label.format(k=comparison.k).replace("|", "\\|")
        lines.append(f"| {name} | {_pct(row.precision)} | {_pct(row.recall)} | {_pct(row.f1)} | {size} |")
    return lines


def render_label_report(report: LabelReport | Mapping[str, Any]) -> str:
    """The readable text of a report from :func:`label_report` (or report.json's content, as
    :func:`label_report` returns it)."""
    if not isinstance(report, LabelReport):
        report = LabelReport.model_validate(report)
    diag, comparison = report.diagnostics, report.comparison
    lines = [f"purecover label-report: {report.labels_file} ({diag.questions} questions)", ""]
    lines += _diagnostics_lines(diag)
    if report.warning:
        lines += ["", f"warning: {report.warning}"]
    lines.append("")
    if comparison.questions:
        lines.append(f"against gold passages ({comparison.questions} questions; P, R, F1 in %):")
        lines += ["", *_comparison_table(comparison)]
    else:
        lines.append("no gold passages in candidates.jsonl: no precision/recall comparison")
    lines += ["", "written: " + ", ".join([report.report_file, *report.figures.values()])]
    return "\n".join(lines) + "\n"
