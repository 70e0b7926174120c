"""report.md and PNG plots from an evaluation's metrics.json, and a cross-dataset table of several runs.

Tables give percentages with two decimals, like the paper. The main table is laid out like the
paper's: one row per method, one column group per dataset (EM, F1, Acc) at ``eval.table_budget``,
each with its 95% bootstrap interval over questions when metrics.json has one (`purecover.eval.stats`),
followed by the paired test of every method against ``retrieval``.
The α-nDCG@K / subtopic recall@K table (`purecover.eval.subtopic_metrics`) says which questions its means
leave out. Plots (matplotlib, Agg backend, no display needed): EM vs K (with the interval as a band), Coverage@K
and Purity@K vs K (answer-containing candidates), and the generator's input tokens per question vs K.
``gold_support`` is a reference, not a competitor: drawn last, dashed and grey, labelled as a reference (the gold supporting paragraphs: not always the best on every panel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from ..records import (
    BudgetResult,
    CoveragePurity,
    MetricsFile,
    PairedTest,
    SubtopicCoverage,
    load_json_record,
)
from ..utils.io import atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["REFERENCE_METHODS", "build_figures", "combined_table", "metrics_table", "plot_metrics", "read_metrics",
           "render_report"]

REFERENCE_METHODS = ("gold_support",)  # method kinds drawn as references, not competitors


class _LineStyle(TypedDict, total=False):
    """Keyword arguments of one method's line (`matplotlib.axes.Axes.plot`)."""

    color: str
    linestyle: str
    marker: str
    zorder: int
    label: str
    clip_on: bool


_REFERENCE_STYLE = _LineStyle(color="0.45", linestyle="--", marker="s", zorder=5)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _with_ci(value: float | None, ci: Sequence[float] | None) -> str:
    """``38.00 [33.80, 42.20]``: a fraction and its interval in %; the bare value without an interval."""
    if value is None or not ci:
        return _pct(value)
    return f"{_pct(value)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _signed_pct(value: float) -> str:
    return f"{100 * value:+.2f}"


def _p_value(p: float, floor: float | None) -> str:
    if floor is not None and p <= floor * 1.01:  # metrics.json rounds p to 6 decimals
        return f"≤ {floor:.2g}"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _paired_section(metrics: MetricsFile, k: str) -> list[str]:
    """The paired-test table of every method against ``retrieval`` at budget `k` (empty for old metrics.json)."""
    stats = metrics.statistics
    if not stats:
        return []
    out = ["", f"## Paired test against retrieval at K = {k}", ""]
    if not stats.baseline:
        return [*out, "`retrieval` is not among the evaluated methods: no paired test."]
    perms = stats.permutations
    floor = 1 / (1 + perms)
    out += [f"Mean per-question difference (method − retrieval, in points) with its paired bootstrap "
            f"{100 * stats.confidence:.0f}% interval ({stats.bootstrap_resamples} resamples), and the "
            f"two-sided p-value of a {stats.test.replace(' (two-sided)', '')} ({perms} random sign "
            "flips, exact over all sign vectors for very few questions; seed "
            f"{stats.seed}). Not corrected for multiple comparisons.", ""]
    header = ["method"]
    for m in ("EM", "F1", "Acc"):
        header += [f"Δ{m} [{100 * stats.confidence:.0f}% CI]", f"p ({m})"]
    rows = []
    for name, per_k in metrics.results.items():
        tests = per_k[k].vs_retrieval
        if not tests:
            continue
        row = [name]
        for m in ("em", "f1", "acc"):
            row += _test_cells(tests[m], floor)
        rows.append(row)
    return out + _table(header, rows)


def _test_cells(t: PairedTest, floor: float) -> list[str]:
    """[difference with its interval, p-value] of one paired test, in points."""
    return [f"{_signed_pct(t.diff)} [{_signed_pct(t.low)}, {_signed_pct(t.high)}]",
            _p_value(t.p, floor if t.p_method == "monte_carlo" else None)]


def _reference_section(metrics: MetricsFile) -> list[str]:
    """Every method at every budget against one reference, retrieval at the main budget (``vs_reference``), with
    what it costs: passages, generator input tokens and selection time per question. Empty without a reference."""
    stats = metrics.statistics
    if not stats or not stats.reference:
        return []
    ref_name, _, ref_k = stats.reference.partition("@")
    ref = metrics.results[ref_name][ref_k]
    floor = 1 / (1 + stats.permutations)
    out = ["", f"## Every method against {stats.reference}: answers, and what they cost", "",
           f"Each method at each budget against the same reference, retrieval's top {ref_k} "
           f"({_num(ref.prompt_tokens, 0)} generator input tokens per question): Δ in points with its paired "
           f"bootstrap {100 * stats.confidence:.0f}% interval and the permutation test's p, as above. A method that "
           "keeps its own set (teacher, student, cross_encoder_ft) gives the same prompts at every budget that "
           "does not cut it. Selection time is per question, beyond the retrieval all methods share (the student's: "
           "the select stage's throughput; the teacher's: its label stage, model loading included).", ""]
    rows = []
    for name, per_k in metrics.results.items():
        for b in sorted(per_k, key=int):
            r = per_k[b]
            share = (f"{100 * r.prompt_tokens / ref.prompt_tokens:.0f}%" if r.prompt_tokens is not None
                     and ref.prompt_tokens else "—")
            cells = [f"{name}@{b}", _pct(r.em), _num(r.mean_k, 2), _num(r.prompt_tokens, 0), share,
                     "—" if r.select_ms is None else f"{r.select_ms:,.0f}"]
            tests = r.vs_reference
            if (name, b) == (ref_name, ref_k):
                cells += ["reference", "", "reference", ""]
            elif tests:
                cells += [*_test_cells(tests["em"], floor), *_test_cells(tests["f1"], floor)]
            else:
                cells += ["—", "", "—", ""]
            rows.append(cells)
    return out + _table(["method@K", "EM", "mean \\|D\\|", "input tokens", f"of {stats.reference}'s",
                         "select ms / q", f"ΔEM [{100 * stats.confidence:.0f}% CI]", "p (EM)",
                         f"ΔF1 [{100 * stats.confidence:.0f}% CI]", "p (F1)"], rows)


def _main_k(metrics: MetricsFile) -> str:
    budgets = metrics.budgets
    k = metrics.table_budget
    return str(k if k in budgets else budgets[-1])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _coverage_report(metrics: MetricsFile, plots: Sequence[str | Path]) -> str:
    """The report of an evaluation on a coverage collection: no answers, so the selections' coverage only."""
    results, budgets = metrics.results, [str(k) for k in metrics.budgets]
    out = ["# Evaluation: coverage collection", "",
           f"{metrics.questions} topics from {metrics.question_source}. A topic has no gold answer: nothing is "
           "generated, and each method's passages at budget K are scored against the topic's nuggets. Scores in %. "
           "Each selection is also written as a TREC run, eval/runs/<method>@<K>.trec: `purecover score-run` "
           "scores it with trec_eval and ndeval, with bootstrap intervals and paired tests "
           "(docs/guides/coverage-evaluation.md).", "",
           "## Coverage@K / Purity@K against the passages the qrels judge relevant", ""]
    out += _table(["method", *[f"K={b}" for b in budgets]],
                  [[name, *[f"{_pct(per_k[b].supporting.coverage)} / {_pct(per_k[b].supporting.purity)}"
                            for b in budgets]] for name, per_k in results.items()])
    out += _subtopic_section(metrics)
    if any(per_k[b].crux is not None and per_k[b].crux.n for per_k in results.values() for b in budgets):
        out += ["", "## CRUX Cov@K: sub-questions answered by the selection (teacher's LANCER ratings >= 3)", ""]
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[_pct(_crux(per_k[b])) for b in budgets]] for name, per_k in results.items()])
    if any(per_k[b].judged is not None for per_k in results.values() for b in budgets):
        first = next(per_k[b].judged for per_k in results.values() for b in budgets if per_k[b].judged is not None)
        out += ["", "## Cov@K: the judge file's sub-questions answered by the selection (rating >= 3)", "",
                f"CRUX's definition over the {first.n} topics the judge file rates; an unjudged passage rates 0.", ""]
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[_pct(per_k[b].judged.coverage if per_k[b].judged else None) for b in budgets]]
                       for name, per_k in results.items()])
    if plots:
        out += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).as_posix()})" for p in plots]
    return "\n".join(out) + "\n"


def render_report(metrics: MetricsFile, plots: Sequence[str | Path] = ()) -> str:
    """The markdown report of one evaluation (`metrics`: its metrics.json); a coverage collection's
    (`metrics.dataset` ``coverage``) has no QA sections."""
    if metrics.dataset == "coverage":
        return _coverage_report(metrics, plots)
    results = metrics.results
    budgets = [str(k) for k in metrics.budgets]
    k = _main_k(metrics)
    ds = metrics.dataset
    stats = metrics.statistics
    data = metrics.recipe.get("data")
    demo = isinstance(data, dict) and data.get("path") == "demo" and not (metrics.recipe.get("eval") or {}).get("path")
    title = f"{ds} format, the bundled demo set (invented questions)" if demo else ds
    note = (metrics.recipe.get("eval") or {}).get("report_note") if isinstance(metrics.recipe, dict) else None
    out = [
        f"# Evaluation: {title}",
        "",
        *([f"> {' '.join(str(note).split())}", ""] if note else []),
        f"{metrics.questions} questions from {metrics.question_source}; generator "
        f"`{metrics.generator}` ({metrics.backend}, greedy, at most {metrics.max_new_tokens} new tokens). "
        "Scores in %. Coverage@K and Purity@K count the candidates that contain a gold answer "
        "(the paper's proxy) and, separately, the gold supporting paragraphs."
        + (f" EM, F1 and Acc show the {100 * stats.confidence:.0f}% percentile bootstrap "
           f"interval over questions in brackets ({stats.bootstrap_resamples} resamples)."
           if stats else ""),
        "",
        f"## QA at K = {k}",
        "",
    ]
    rows = []
    for name, per_k in results.items():
        r = per_k[k]
        ci = r.ci or {}
        rows.append([name, _with_ci(r.em, ci.get("em")), _with_ci(r.f1, ci.get("f1")),
                     _with_ci(r.acc, ci.get("acc")), _num(r.mean_k, 2),
                     _pct(r.answer.coverage), _pct(r.answer.purity), _num(r.prompt_tokens, 0),
                     "—" if r.select_ms is None else f"{r.select_ms:,.0f}"])
    out += _table(["method", f"{ds} EM", f"{ds} F1", f"{ds} Acc", "mean \\|D\\|", "Coverage", "Purity",
                   "input tokens", "select ms / q"], rows)
    out += _paired_section(metrics, k)
    out += _reference_section(metrics)
    out += ["", "## EM by budget K", ""]
    out += _table(["method", *[f"K={b}" for b in budgets]],
                  [[name, *[_pct(per_k[b].em) for b in budgets]] for name, per_k in results.items()])
    for title, key in (("answer-containing candidates", "answer"), ("gold supporting paragraphs", "supporting")):
        out += ["", f"## Coverage@K / Purity@K against {title}", ""]
        parts = {name: [per_k[b].answer if key == "answer" else per_k[b].supporting for b in budgets]
                 for name, per_k in results.items()}
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[f"{_pct(p.coverage)} / {_pct(p.purity)}" for p in row]] for name, row in parts.items()])
    out += _subtopic_section(metrics)
    if any(per_k[b].crux is not None and per_k[b].crux.n for per_k in results.values() for b in budgets):
        out += ["", "## CRUX Cov@K: sub-questions answered by the selection (teacher's LANCER ratings >= 3)", "",
                "The lancer_* baselines (and the teacher with teacher.lancer.beta > 0) select with these same "
                "ratings, so this column favours them.", ""]
        out += _table(["method", *[f"K={b}" for b in budgets]],
                      [[name, *[_pct(_crux(per_k[b])) for b in budgets]] for name, per_k in results.items()])
    out += ["", "## Generator input tokens per question", ""]
    out += _table(["method", *[f"K={b}" for b in budgets]],
                  [[name, *[_num(per_k[b].prompt_tokens, 0) for b in budgets]] for name, per_k in results.items()])
    fallbacks = {m: n for m, n in metrics.fallbacks.items() if n}
    if fallbacks:
        out += ["", "Fallbacks (questions without teacher subtopics, the question used instead): "
                + ", ".join(f"{m}: {n}" for m, n in fallbacks.items())]
    if plots:
        out += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).as_posix()})" for p in plots]
    out += _reading_notes(metrics)
    return "\n".join(out) + "\n"


def _reading_notes(metrics: MetricsFile) -> list[str]:
    """How to read the report when every QA score is 0, and what to run next."""
    scores = [v for per_k in metrics.results.values() for r in per_k.values() for v in (r.em, r.f1, r.acc)
              if v is not None]
    out = ["", "## Reading this report", ""]
    if scores and not any(scores):
        out += ["Every EM, F1 and Acc is 0: the generator answered no question. That is what a model that cannot "
                "answer gives, such as `make demo`'s tiny random model, and says nothing about the selections. "
                "Coverage@K and Purity@K above do compare them: they need no generator. A real generator (`make "
                "demo-real`, or eval.generator in the recipe) gives QA scores that mean something.", ""]
    out += ["Next:",
            "",
            "* `purecover label-report RUN_DIR`: are the teacher's labels healthy (set sizes, fallbacks, P/R/F1 "
            "against the gold passages)?",
            "* eval.budgets and eval.methods add budgets and baselines; `purecover report RUN_DIR ...` puts several "
            "runs in one table.",
            "* Your own questions and corpus: docs/guides/own-data.md; what real models on a laptop give: "
            "docs/guides/real-models.md."]
    return out


def _crux(result: BudgetResult) -> float | None:
    return result.crux.coverage if result.crux is not None else None


_UNIT_WORDS = {"passage": "each gold supporting paragraph is one subtopic",
               "title": "each supporting title is one subtopic (the corpus file's passages of one article count "
                        "once)",
               "nugget": "each nugget of the topic that the qrels judge some document relevant to is one subtopic, "
                         "a passage covering the nuggets the qrels give it"}


def _subtopic_section(metrics: MetricsFile) -> list[str]:
    """α-nDCG@K / subtopic recall@K by K, with the questions left out (empty for a metrics.json without them)."""
    results, budgets = metrics.results, [str(k) for k in metrics.budgets]
    found = [sub for per_k in results.values() for b in budgets if (sub := per_k[b].subtopics) is not None]
    if not found:
        return []
    first = found[0]  # the counts depend on the questions only: the same for every method and K
    nuggets = first.unit == "nugget"
    gold, questions = ("judged nuggets", "Topics") if nuggets else ("gold supporting paragraphs", "Questions")
    left_out = (f"{questions} without {gold} are left out of both ({first.n_no_subtopics} of {metrics.questions}); "
                f"those whose {gold} no candidate holds are left out of α-nDCG only ({first.n_none_retrieved}; their "
                "recall is 0).")
    order = "in its order" if nuggets else "in its order, ranked as they were given to the generator"
    out = ["", "## α-nDCG@K / subtopic recall@K against " + ("the collection's nuggets" if nuggets else gold), "",
           f"Each method's passages at budget K, {order} (a selection shorter than K gains nothing after its end); "
           f"{_UNIT_WORDS[first.unit]}, retrieved or not; α = {first.alpha:g}; the ideal ranking is greedy over the "
           f"question's candidates. {left_out}", ""]

    def cell(sub: SubtopicCoverage | None) -> str:
        return "—" if sub is None else f"{_pct(sub.alpha_ndcg)} / {_pct(sub.recall)}"

    return out + _table(["method", *[f"K={b}" for b in budgets]],
                        [[name, *[cell(per_k[b].subtopics) for b in budgets]] for name, per_k in results.items()])


def _percent_limits(ax: Any, values: Sequence[float]) -> None:
    """y from 0 (scores are never negative) to just above the largest value; 0–100 when nothing is above 0."""
    finite = [v for v in values if v == v]  # drop NaN
    top = max(finite, default=0.0)
    ax.set_ylim(0.0, 100.0 if top <= 0 else min(100.0, top * 1.1 + 1.0))


def _coverage_purity_figure(plt: Any, budgets: Sequence[int], names: Sequence[str], series: Callable[..., list[float]],
                            style: Callable[[str], _LineStyle], ds: str, against: str,
                            part: Callable[[BudgetResult], CoveragePurity]) -> Figure:
    """Coverage@K and Purity@K by K side by side, against the candidates `part` picks (`against` names them)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, what, key in zip(axes, ("Coverage@K", "Purity@K"), ("coverage", "purity")):
        values: list[float] = []
        for name in names:
            ys = series(name, lambda r, key=key: getattr(part(r), key))
            values += ys
            ax.plot(budgets, ys, **style(name))
        ax.set(xlabel="budget K (passages)", ylabel=f"{what} (%)", title=f"{ds}: {what} ({against})", xticks=budgets)
        _percent_limits(ax, values)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def build_figures(metrics: MetricsFile) -> dict[str, Figure]:
    """The report's matplotlib figures, by file name: em_vs_k.png, coverage_purity_vs_k.png, input_tokens.png; for
    a coverage collection (no answers: nothing generated) only coverage_purity_vs_k.png, against the passages the
    qrels judge relevant.

    Reference methods (`REFERENCE_METHODS`, by kind) are drawn last in `_REFERENCE_STYLE` and labelled
    as references; EM and Coverage/Purity axes start at 0. The caller closes the figures.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    results = metrics.results
    budgets = metrics.budgets
    ds = metrics.dataset
    kinds = metrics.methods
    references = [n for n in results if kinds.get(n, n) in REFERENCE_METHODS]
    names = [n for n in results if n not in references] + references  # references drawn last, on top

    def series(name: str, get: Callable[[BudgetResult], float | None]) -> list[float]:
        values = [get(results[name][str(b)]) for b in budgets]
        return [float("nan") if v is None else 100 * v for v in values]

    def style(name: str) -> _LineStyle:
        if name in references:
            return _LineStyle(**_REFERENCE_STYLE, label=f"{name} (reference)", clip_on=False)
        return _LineStyle(marker="o", label=name, zorder=3, clip_on=False)  # markers at 0 stay whole

    figures: dict[str, Figure] = {}
    if ds == "coverage":
        figures["coverage_purity_vs_k.png"] = _coverage_purity_figure(
            plt, budgets, names, series, style, ds, "judged relevant", lambda r: r.supporting)
        return figures
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    em_values: list[float] = []
    for name in names:
        em = series(name, lambda r: r.em)
        em_values += em
        (line,) = ax.plot(budgets, em, **style(name))
        cis = [(results[name][str(b)].ci or {}).get("em") for b in budgets]
        if all(cis):
            ax.fill_between(budgets, [100 * c[0] for c in cis], [100 * c[1] for c in cis], color=line.get_color(),
                            alpha=0.12, linewidth=0, zorder=line.get_zorder() - 1)
            em_values += [100 * c[1] for c in cis]
    ax.set(xlabel="budget K (passages)", ylabel="EM (%)", title=f"{ds}: EM vs K", xticks=budgets)
    _percent_limits(ax, em_values)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figures["em_vs_k.png"] = fig

    figures["coverage_purity_vs_k.png"] = _coverage_purity_figure(plt, budgets, names, series, style, ds,
                                                                  "answer-containing", lambda r: r.answer)

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in names:
        tokens = [results[name][str(b)].prompt_tokens for b in budgets]
        ax.plot(budgets, [float("nan") if t is None else t for t in tokens], **style(name))
    ax.set(xlabel="budget K (passages)", ylabel="input tokens per question", title=f"{ds}: generator input",
           xticks=budgets)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figures["input_tokens.png"] = fig
    return figures


def plot_metrics(metrics: MetricsFile, out_dir: str | Path) -> list[Path]:
    """Write `build_figures`' PNGs into `out_dir` (each atomically); return the paths."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in build_figures(metrics).items():
        path = out / name
        tmp = path.with_name(f".{name}.tmp.png")
        try:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
        finally:
            plt.close(fig)
        tmp.replace(path)
        paths.append(path)
    return paths


def metrics_table(metrics: MetricsFile) -> tuple[list[str], list[list[str | int | float | None]]]:
    """(columns, rows): one row per method and budget K with the QA means (fractions), their interval
    bounds, mean |D|, answer Coverage/Purity, input tokens, the paired test against retrieval, α-nDCG@K and
    subtopic recall@K (None where absent). The experiment tracker's table of the evaluate stage."""
    columns = ["method", "K"]
    for m in ("em", "f1", "acc"):
        columns += [m, f"{m}_low", f"{m}_high"]
    columns += ["mean_k", "coverage", "purity", "prompt_tokens", "select_ms"]
    for m in ("em", "f1", "acc"):
        columns += [f"{m}_diff_vs_retrieval", f"{m}_p_vs_retrieval"]
    for m in ("em", "f1", "acc"):
        columns += [f"{m}_diff_vs_reference", f"{m}_p_vs_reference"]
    columns += ["alpha_ndcg", "subtopic_recall"]
    rows: list[list[str | int | float | None]] = []
    for name, per_k in metrics.results.items():
        for k in sorted(per_k, key=int):
            r = per_k[k]
            ci = r.ci or {}
            row: list[str | int | float | None] = [name, int(k)]
            for m, value in (("em", r.em), ("f1", r.f1), ("acc", r.acc)):
                row += [value, *(ci.get(m) or (None, None))]
            row += [r.mean_k, r.answer.coverage, r.answer.purity, r.prompt_tokens, r.select_ms]
            for tests in (r.vs_retrieval or {}, r.vs_reference or {}):
                for m in ("em", "f1", "acc"):
                    row += [tests[m].diff, tests[m].p] if m in tests else [None, None]
            sub = r.subtopics
            row += [sub.alpha_ndcg, sub.recall] if sub is not None else [None, None]
            rows.append(row)
    return columns, rows


def read_metrics(path: str | Path) -> MetricsFile:
    """A metrics.json, given the file or a run directory (``<run_dir>/eval/metrics.json``), read as a
    `MetricsFile` (a mismatch is a `RecordError` naming the file and field)."""
    p = Path(path)
    if p.is_dir():
        p = p / "eval" / "metrics.json" if (p / "eval" / "metrics.json").is_file() else p / "metrics.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist: run `purecover evaluate RECIPE` first")
    return load_json_record(p, MetricsFile, hint="is it a metrics.json written by `purecover evaluate`?")


def combined_table(runs: Sequence[MetricsFile], k: int | None = None) -> str:
    """The paper's table over several evaluations: rows methods, column groups datasets × EM/F1/Acc.

    `k` defaults to each run's ``table_budget``; a method missing from a run shows ``—``.
    """
    methods: list[str] = []
    for m in runs:
        methods += [name for name in m.results if name not in methods]
    header = ["method"]
    for m in runs:
        header += [f"{m.dataset} EM", f"{m.dataset} F1", f"{m.dataset} Acc"]
    rows = []
    for name in methods:
        row = [name]
        for m in runs:
            kk = str(k) if k is not None else _main_k(m)
            r = m.results.get(name, {}).get(kk)
            row += [_pct(r.em), _pct(r.f1), _pct(r.acc)] if r else ["—"] * 3
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
