"""report.md and PNG plots from an evaluation's metrics.json, and a cross-dataset table of several runs.

Tables give percentages with two decimals, like the paper. The main table is laid out like the
paper's: one row per method, one column group per dataset (EM, F1, Acc) at ``eval.table_budget``.
Plots (matplotlib, Agg backend, no display needed): EM vs K, Coverage@K and Purity@K vs K
(answer-containing candidates), and the generator's input tokens per question vs K.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..utils.io import atomic_write_text

__all__ = ["combined_table", "plot_metrics", "read_metrics", "render_report"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _main_k(metrics: Mapping[str, Any]) -> str:
    budgets = [int(k) for k in metrics["budgets"]]
    k = int(metrics.get("table_budget", budgets[-1]))
    return str(k if k in budgets else budgets[-1])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def render_report(metrics: Mapping[str, Any], plots: Sequence[str | Path] = ()) -> str:
    """The markdown report of one evaluation (`metrics` as written to metrics.json)."""
    results = metrics["results"]
    budgets = [str(k) for k in metrics["budgets"]]
    k = _main_k(metrics)
    ds = metrics["dataset"]
    out = [
        f"# Evaluation: {ds}",
        "",
        f"{metrics['questions']} questions from {metrics['question_source']}; generator "
        f"`{metrics['generator']}` ({metrics['backend']}, greedy, at most {metrics['max_new_tokens']} new tokens). "
        "Scores in %. Coverage@K and Purity@K count the candidates that contain a gold answer "
        "(the paper's proxy) and, separately, the gold supporting paragraphs.",
        "",
        f"## QA at K = {k}",
        "",
    ]
    rows = []
    for name, per_k in results.items():
        r = per_k[k]
        rows.append([name, _pct(r["em"]), _pct(r["f1"]), _pct(r["acc"]), _num(r["mean_k"], 2),
                     _pct(r["answer"]["coverage"]), _pct(r["answer"]["purity"]), _num(r["prompt_tokens"], 0)])
    out += _table(["method", f"{ds} EM", f"{ds} F1", f"{ds} Acc", "mean \\|D\\|", "Coverage", "Purity",
                   "input tokens"], rows)
    out += ["", "## EM by budget K", ""]
    out += _table(["method", *[f"K={b}" for b in budgets]],
                  [[name, *[_pct(per_k[b]["em"]) for b in budgets]] for name, per_k in results.items()])
    for title, key in (("answer-containing candidates", "answer"), ("gold supporting paragraphs", "supporting")):
        out += ["", f"## Coverage@K / Purity@K against {title}", ""]
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[f"{_pct(per_k[b][key]['coverage'])} / {_pct(per_k[b][key]['purity'])}"
                                for b in budgets]] for name, per_k in results.items()])
    if any((per_k[b].get("crux") or {}).get("n") for per_k in results.values() for b in budgets):
        out += ["", "## CRUX Cov@K: sub-questions answered by the selection (teacher's LANCER ratings >= 3)", "",
                "The lancer_* baselines (and the teacher with teacher.lancer.beta > 0) select with these same "
                "ratings, so this column favours them.", ""]
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[_pct((per_k[b].get("crux") or {}).get("coverage")) for b in budgets]]
                       for name, per_k in results.items()])
    out += ["", "## Generator input tokens per question", ""]
    out += _table(["method", *[f"K={b}" for b in budgets]],
                  [[name, *[_num(per_k[b]["prompt_tokens"], 0) for b in budgets]] for name, per_k in results.items()])
    fallbacks = {m: n for m, n in metrics.get("fallbacks", {}).items() if n}
    if fallbacks:
        out += ["", "Fallbacks (questions without teacher subtopics, the question used instead): "
                + ", ".join(f"{m}: {n}" for m, n in fallbacks.items())]
    if plots:
        out += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).as_posix()})" for p in plots]
    return "\n".join(out) + "\n"


def plot_metrics(metrics: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write em_vs_k.png, coverage_purity_vs_k.png and input_tokens.png into `out_dir`; return the paths."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = metrics["results"]
    budgets = [int(k) for k in metrics["budgets"]]
    ds = metrics["dataset"]

    def series(name: str, get: Any) -> list[float]:
        return [float("nan") if get(results[name][str(b)]) is None else 100 * get(results[name][str(b)])
                for b in budgets]

    paths = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        tmp = path.with_name(f".{name}.tmp.png")
        fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        tmp.replace(path)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in results:
        ax.plot(budgets, series(name, lambda r: r["em"]), marker="o", label=name)
    ax.set(xlabel="budget K (passages)", ylabel="EM (%)", title=f"{ds}: EM vs K", xticks=budgets)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "em_vs_k.png")

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in results:
        axes[0].plot(budgets, series(name, lambda r: r["answer"]["coverage"]), marker="o", label=name)
        axes[1].plot(budgets, series(name, lambda r: r["answer"]["purity"]), marker="o", label=name)
    for ax, what in zip(axes, ("Coverage@K", "Purity@K")):
        ax.set(xlabel="budget K (passages)", ylabel=f"{what} (%)", title=f"{ds}: {what} (answer-containing)",
               xticks=budgets)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    save(fig, "coverage_purity_vs_k.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in results:
        tokens = [results[name][str(b)]["prompt_tokens"] for b in budgets]
        ax.plot(budgets, [float("nan") if t is None else t for t in tokens], marker="o", label=name)
    ax.set(xlabel="budget K (passages)", ylabel="input tokens per question", title=f"{ds}: generator input",
           xticks=budgets)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, "input_tokens.png")
    return paths


def read_metrics(path: str | Path) -> dict[str, Any]:
    """A metrics.json, given the file or a run directory (``<run_dir>/eval/metrics.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "eval" / "metrics.json" if (p / "eval" / "metrics.json").is_file() else p / "metrics.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist: run `purecover evaluate RECIPE` first")
    data = json.loads(p.read_text(encoding="utf-8"))
    for key in ("dataset", "results", "budgets"):
        if key not in data:
            raise ValueError(f"{p}: field {key!r} missing; not a purecover metrics.json")
    return data


def combined_table(runs: Sequence[Mapping[str, Any]], k: int | None = None) -> str:
    """The paper's table over several evaluations: rows methods, column groups datasets × EM/F1/Acc.

    `k` defaults to each run's ``table_budget``; a method missing from a run shows ``—``.
    """
    methods: list[str] = []
    for m in runs:
        methods += [name for name in m["results"] if name not in methods]
    header = ["method"]
    for m in runs:
        header += [f"{m['dataset']} EM", f"{m['dataset']} F1", f"{m['dataset']} Acc"]
    rows = []
    for name in methods:
        row = [name]
        for m in runs:
            kk = str(k) if k is not None else _main_k(m)
            r = m["results"].get(name, {}).get(kk)
            row += [_pct(r["em"]), _pct(r["f1"]), _pct(r["acc"])] if r else ["—"] * 3
        rows.append(row)
    budgets = sorted({str(k) if k is not None else _main_k(m) for m in runs})
    title = f"QA at K = {', '.join(budgets)} (scores in %)"
    return "\n".join([f"## {title}", "", *_table(header, rows)]) + "\n"


def write_combined_report(paths: Sequence[str | Path], out: str | Path | None, k: int | None = None) -> str:
    """`combined_table` of the runs at `paths`, written atomically to `out` when given; returns the text."""
    text = combined_table([read_metrics(p) for p in paths], k)
    if out is not None:
        atomic_write_text(out, text)
    return text
