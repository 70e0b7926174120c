"""report.md rendering, plots and the cross-dataset table of `purecover report`."""

from __future__ import annotations

import json

import pytest

from purecover.cli import main
from purecover.eval.report import (
    build_figures,
    combined_table,
    metrics_table,
    plot_metrics,
    read_metrics,
    render_report,
)
from purecover.eval.stats import annotate_results
from purecover.records import MetricsFile, RecordError


def _raw(dataset: str, em: float, methods=("retrieval", "student")) -> dict:
    """A metrics.json as an early version wrote it (no statistics, crux or undefined counts)."""
    def res(scale: float) -> dict:
        return {"n": 4, "em": em * scale, "f1": em * scale + 0.1, "acc": em * scale + 0.05, "mean_k": 2.0,
                "answer": {"coverage": 0.5, "purity": 0.25, "n_coverage": 4, "n_purity": 4},
                "supporting": {"coverage": 0.75, "purity": None, "n_coverage": 4, "n_purity": 0},
                "prompt_tokens": 100.0 * scale, "completion_tokens": 3.0}

    return {"dataset": dataset, "run_dir": f"runs/{dataset}", "questions": 4, "question_source": "x", "generator": "g",
            "backend": "hf", "max_new_tokens": 8, "budgets": [1, 5], "table_budget": 5,
            "methods": {m: m for m in methods}, "fallbacks": {"retrieval": 0},
            "results": {m: {"1": res(1.0 + i), "5": res(1.5 + i)} for i, m in enumerate(methods)},
            "versions": {"python": "3.11"}, "recipe": {}}


def _metrics(dataset: str, em: float, methods=("retrieval", "student")) -> MetricsFile:
    return MetricsFile.model_validate(_raw(dataset, em, methods))


def test_report_layout_and_values():
    text = render_report(_metrics("musique", 0.2))
    assert "## QA at K = 5" in text
    assert "| retrieval | 30.00 | 40.00 | 35.00 | 2.00 | 50.00 | 25.00 | 150 | — |" in text  # selection time unknown
    assert "| student | 50.00 | 60.00 | 55.00 |" in text
    assert "| retrieval | 50.00 / 25.00 | 50.00 / 25.00 |" in text
    assert "75.00 / —" in text  # undefined purity is shown as a dash
    assert "CRUX" not in text  # no LANCER ratings in these results: no CRUX table
    assert "Paired test" not in text and "[" not in text.split("## EM by budget K")[0]  # no statistics: plain


def _with_statistics(metrics: MetricsFile, n: int = 40) -> MetricsFile:
    """`metrics` annotated as the evaluate stage does, from per-question scores with the given means."""
    scores = {}
    for name, per_k in metrics.results.items():
        for k, r in per_k.items():
            means = {"em": r.em, "f1": r.f1, "acc": r.acc}
            scores[(name, k)] = {m: [1.0] * round(v * n) + [0.0] * (n - round(v * n)) for m, v in means.items()}
    results, statistics = annotate_results(metrics.results, scores, seed=0)
    return metrics.model_copy(update={"results": results, "statistics": statistics})


def test_the_demo_sets_report_says_it_is_the_demo_set():
    demo = MetricsFile.model_validate({**_raw("hotpotqa", 0.0), "recipe": {"data": {"path": "demo"}, "eval": {}}})
    assert render_report(demo).splitlines()[0] == ("# Evaluation: hotpotqa format, the bundled demo set "
                                                   "(invented questions)")
    assert render_report(_metrics("hotpotqa", 0.0)).splitlines()[0] == "# Evaluation: hotpotqa"


def test_report_shows_intervals_and_the_paired_test():
    metrics = _with_statistics(_metrics("musique", 0.2))
    text = render_report(metrics)
    lo, hi = metrics.results["retrieval"]["5"].ci["em"]
    assert lo < 0.3 < hi
    assert f"| retrieval | 30.00 [{100 * lo:.2f}, {100 * hi:.2f}] | 40.00 [" in text
    assert "95% percentile bootstrap interval over questions" in text
    section = text.split("## Paired test against retrieval at K = 5")[1].split("## EM by budget K")[0]
    assert "sign-flip permutation test" in section
    student = next(line for line in section.splitlines() if line.startswith("| student |"))
    t = metrics.results["student"]["5"].vs_retrieval["em"]
    assert student.startswith(f"| student | +20.00 [{100 * t.low:+.2f}, {100 * t.high:+.2f}] | ")
    assert "| retrieval |" not in section  # no test of the baseline against itself


def test_every_method_is_set_against_retrieval_at_the_main_budget_with_its_cost():
    raw = _raw("hotpotqa", 0.2)
    raw["results"]["student"]["1"]["select_ms"] = 120.0
    raw["results"]["student"]["5"]["select_ms"] = 120.0
    raw["results"]["retrieval"]["5"]["select_ms"] = 0.0
    metrics = MetricsFile.model_validate(raw)
    scores = {}
    for name, per_k in metrics.results.items():
        for k, r in per_k.items():
            scores[(name, k)] = {m: [1.0] * round(v * 40) + [0.0] * (40 - round(v * 40))
                                 for m, v in {"em": r.em, "f1": r.f1, "acc": r.acc}.items()}
    results, statistics = annotate_results(metrics.results, scores, seed=0, reference_k="5")
    text = render_report(metrics.model_copy(update={"results": results, "statistics": statistics}))
    section = text.split("## Every method against retrieval@5: answers, and what they cost")[1].split("##")[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines() if line.startswith("| ")}
    assert rows["retrieval@5"].startswith("| retrieval@5 | 30.00 | 2.00 | 150 | 100% | 0 | reference |")
    t = results["student"]["1"].vs_reference["em"]
    # the student's set at K=1 reads 200 tokens, 133% of retrieval@5's 150, and is tested against retrieval@5
    assert rows["student@1"].startswith(f"| student@1 | 40.00 | 2.00 | 200 | 133% | 120 | {100 * t.diff:+.2f} [")
    assert t.diff == pytest.approx(0.1)
    columns, table = metrics_table(metrics.model_copy(update={"results": results, "statistics": statistics}))
    row = dict(zip(columns, next(r for r in table if r[:2] == ["student", 1])))
    assert row["select_ms"] == 120.0 and row["em_diff_vs_reference"] == t.diff


def test_report_says_when_retrieval_is_missing():
    text = render_report(_with_statistics(_metrics("musique", 0.2, methods=("teacher", "student"))))
    assert "`retrieval` is not among the evaluated methods: no paired test." in text
    assert "[" in text.split("## Paired test")[0]  # the intervals are still there


def test_metrics_table_rows_per_method_and_budget():
    columns, rows = metrics_table(_with_statistics(_metrics("musique", 0.2)))
    assert len(rows) == 4 and len({len(r) for r in rows}) == 1 and len(rows[0]) == len(columns)
    row = dict(zip(columns, rows[-1]))
    assert (row["method"], row["K"], row["em"]) == ("student", 5, pytest.approx(0.5))
    assert row["em_low"] < 0.5 < row["em_high"] and row["em_diff_vs_retrieval"] == pytest.approx(0.2)
    assert dict(zip(columns, rows[0]))["em_p_vs_retrieval"] is None  # retrieval itself


def test_crux_table_appears_with_lancer_ratings():
    metrics = _raw("hotpotqa", 0.2)
    for per_k in metrics["results"].values():
        per_k["1"]["crux"], per_k["5"]["crux"] = {"coverage": 0.25, "n": 4}, {"coverage": 0.5, "n": 4}
    text = render_report(MetricsFile.model_validate(metrics))
    assert "## CRUX Cov@K" in text and "| student | 25.00 | 50.00 |" in text


def _with_subtopics(raw: dict, unit: str = "passage") -> dict:
    """`raw` with α-nDCG@K / subtopic recall@K in every result (8 questions: 1 without gold, 2 gold not retrieved)."""
    for i, per_k in enumerate(raw["results"].values()):
        for k, r in per_k.items():
            r["subtopics"] = {"alpha_ndcg": 0.5 + 0.1 * i, "recall": 0.25 * int(k) / 5, "n_alpha_ndcg": 5,
                              "n_recall": 7, "n_no_subtopics": 1, "n_none_retrieved": 2, "alpha": 0.5, "unit": unit}
    raw["questions"] = 8
    return raw


def test_subtopic_table_by_budget_with_the_questions_left_out():
    assert "α-nDCG" not in render_report(_metrics("musique", 0.2))  # a metrics.json of an earlier version
    text = render_report(MetricsFile.model_validate(_with_subtopics(_raw("hotpotqa", 0.2))))
    section = text.split("## α-nDCG@K / subtopic recall@K against gold supporting paragraphs")[1].split("\n## ")[0]
    assert "| method | K=1 | K=5 |" in section
    assert "| retrieval | 50.00 / 5.00 | 50.00 / 25.00 |" in section
    assert "| student | 60.00 / 5.00 | 60.00 / 25.00 |" in section
    assert "each gold supporting paragraph is one subtopic" in section and "α = 0.5" in section
    assert "left out of both (1 of 8)" in section and "left out of α-nDCG only (2; their recall is 0)" in section
    assert text.index("## Coverage@K / Purity@K against gold") < text.index("## α-nDCG@K") < text.index(
        "## Generator input tokens")
    titled = render_report(MetricsFile.model_validate(_with_subtopics(_raw("hotpotqa", 0.2), unit="title")))
    assert "each supporting title is one subtopic" in titled


def test_subtopic_figures_round_trip_and_reach_the_tracker_table(tmp_path):
    raw = _with_subtopics(_raw("hotpotqa", 0.2))
    metrics = MetricsFile.model_validate(raw)
    assert read_metrics(_write_metrics(tmp_path, metrics.to_json_dict())) == metrics
    assert metrics.to_json_dict()["results"]["student"]["5"]["subtopics"] == raw["results"]["student"]["5"]["subtopics"]
    columns, rows = metrics_table(metrics)
    assert columns[-2:] == ["alpha_ndcg", "subtopic_recall"]
    assert dict(zip(columns, rows[-1]))["alpha_ndcg"] == pytest.approx(0.6)
    _, old_rows = metrics_table(_metrics("musique", 0.2))
    assert old_rows[0][-2:] == [None, None]


def test_plots_are_written(tmp_path):
    import matplotlib.image

    paths = plot_metrics(_metrics("musique", 0.2), tmp_path / "plots")
    assert [p.name for p in paths] == ["em_vs_k.png", "coverage_purity_vs_k.png", "input_tokens.png"]
    assert all(matplotlib.image.imread(p).ndim == 3 for p in paths)
    assert not list((tmp_path / "plots").glob(".*tmp*"))


def _figures(metrics: MetricsFile) -> dict:
    """`build_figures`, drawn once (so limits and legends are final) and closed; the artists stay readable."""
    import matplotlib.pyplot as plt

    figures = build_figures(metrics)
    for fig in figures.values():
        fig.canvas.draw()
        plt.close(fig)
    return figures


def test_gold_support_is_a_dashed_grey_reference_drawn_on_top():
    metrics = _metrics("hotpotqa", 0.2, methods=("retrieval", "gold_support", "student"))
    assert metrics.methods == {"retrieval": "retrieval", "gold_support": "gold_support", "student": "student"}
    for name, fig in _figures(metrics).items():
        for ax in fig.axes:
            lines = {line.get_label(): line for line in ax.get_lines()}
            ref = lines["gold_support (reference)"]
            others = [lines["retrieval"], lines["student"]]
            assert ref.get_linestyle() == "--", name
            assert ref.get_zorder() > max(o.get_zorder() for o in others), name
            assert ax.get_lines()[-1] is ref, name  # drawn last
            assert ref.get_color() not in {o.get_color() for o in others}, name
            legend = ax.get_legend()
            assert legend is not None, name  # every panel, coverage included, has a legend
            assert "gold_support (reference)" in [t.get_text() for t in legend.get_texts()], name


def test_axes_start_at_zero_even_when_every_score_is_zero():
    raw = _raw("hotpotqa", 0.0)
    for per_k in raw["results"].values():
        for r in per_k.values():
            r.update(f1=0.0, acc=0.0)
            r["answer"] = {"coverage": 0.0, "purity": None, "n_coverage": 4, "n_purity": 0}
    figures = _figures(_with_statistics(MetricsFile.model_validate(raw)))
    em_ax = figures["em_vs_k.png"].axes[0]
    assert em_ax.get_ylim() == (0.0, 100.0)  # a sensible top, not a degenerate band around 0
    for ax in figures["coverage_purity_vs_k.png"].axes:
        assert ax.get_ylim()[0] == 0.0 and ax.get_ylim()[1] > 0
    lo, hi = _figures(_with_statistics(_metrics("hotpotqa", 0.2)))["em_vs_k.png"].axes[0].get_ylim()
    assert lo == 0.0 and 60.0 < hi <= 100.0  # fits the largest interval bound, not 0–100


def test_combined_table_has_a_column_group_per_dataset():
    table = combined_table([_metrics("hotpotqa", 0.3), _metrics("2wiki", 0.1, methods=("retrieval",))])
    lines = table.splitlines()
    assert lines[2] == ("| method | hotpotqa EM | hotpotqa F1 | hotpotqa Acc | 2wiki EM | 2wiki F1 | 2wiki Acc |")
    assert "| retrieval | 45.00 | 55.00 | 50.00 | 15.00 | 25.00 | 20.00 |" in lines
    assert "| student | 75.00 | 85.00 | 80.00 | — | — | — |" in lines


def test_report_command_reads_run_directories(tmp_path, capsys):
    for name, em in (("a", 0.3), ("b", 0.2)):
        (tmp_path / name / "eval").mkdir(parents=True)
        (tmp_path / name / "eval" / "metrics.json").write_text(json.dumps(_raw(name, em)))
    out = tmp_path / "table.md"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--k", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text() and "QA at K = 1" in printed and "| a EM |" in printed


def test_missing_or_foreign_metrics_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `purecover evaluate RECIPE` first"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text("{}")
    hint = r"; is it a metrics\.json written by `purecover evaluate`\?$"
    with pytest.raises(RecordError, match=r"metrics\.json: field dataset: missing .*" + hint):
        read_metrics(tmp_path / "metrics.json")
    good = _with_statistics(_metrics("musique", 0.2))
    assert read_metrics(_write_metrics(tmp_path, good.to_json_dict())) == good
    old = _raw("musique", 0.2)  # early versions: no statistics, question_sample, crux or undefined counts
    assert read_metrics(_write_metrics(tmp_path, old)) == MetricsFile.model_validate(old)
    bad = _raw("musique", 0.2)
    bad["results"]["student"]["5"]["em"] = 1.5
    with pytest.raises(RecordError, match=r"field results\.student\.5\.em: must be <= 1\.0 \(got 1\.5\)"):
        read_metrics(_write_metrics(tmp_path, bad))


def _write_metrics(tmp_path, metrics: dict):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics))
    return path


@pytest.mark.samples
@pytest.mark.slow
def test_evaluate_stage_writes_statistics_and_tracks_them(tmp_path, monkeypatch, sample_file, tiny_generator_dir):
    """The evaluate stage end to end (6 HotpotQA questions, tiny generator): metrics.json holds the
    intervals and paired tests for every K, report.md shows them, and the offline wandb run holds the summary."""
    wandb = pytest.importorskip("wandb")
    from purecover.config import load_recipe
    from purecover.data.data_stage import run_data_stage
    from purecover.eval.evaluate_stage import run_evaluate_stage
    from tests.utils.test_tracking import _logged

    for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)), ("WANDB_SILENT", "true")):
        monkeypatch.setenv(name, value)
    wandb.teardown()  # a fresh singleton that reads this WANDB_DIR
    run_dir = tmp_path / "evalrun"
    recipe = load_recipe(None, [
        f"run_dir={run_dir}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}", "data.limit=6",
        "data.k1=5", f"eval.generator={tiny_generator_dir}", "eval.methods=[retrieval,gold_support,none]",
        "eval.budgets=[1,2]", "eval.questions=all", "eval.max_new_tokens=4", "eval.dtype=float32",
        "eval.device=cpu", "eval.table_budget=2", "tracking.report_to=wandb"])
    run_data_stage(recipe, show_progress=False)
    try:
        summary = run_evaluate_stage(recipe, show_progress=False)
        [local] = (tmp_path / "wandb").glob("offline-run-*")
        run, config, logged, history = _logged(str(local))
    finally:
        wandb.teardown()
    metrics = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert metrics["statistics"]["baseline"] == "retrieval" and metrics["statistics"]["seed"] == recipe.seed
    for name, per_k in metrics["results"].items():
        for k, r in per_k.items():
            rows = [json.loads(line) for line in
                    (run_dir / "eval" / "predictions" / f"{name}@{k}.jsonl").read_text().splitlines()]
            for m in ("em", "f1", "acc"):
                lo, hi = r["ci"][m]
                assert lo <= r[m] <= hi and min(x[m] for x in rows) <= lo and hi <= max(x[m] for x in rows)
            assert ("vs_retrieval" in r) == (name != "retrieval")
    none_f1 = metrics["results"]["none"]["2"]["vs_retrieval"]["f1"]
    assert none_f1["diff"] == pytest.approx(metrics["results"]["none"]["2"]["f1"]
                                            - metrics["results"]["retrieval"]["2"]["f1"], abs=1e-6)
    assert none_f1["p_method"] == "exact"  # 6 questions: all 64 sign vectors
    report = (run_dir / "eval" / "report.md").read_text()
    assert "## Paired test against retrieval at K = 2" in report and "| gold_support | " in report
    assert (run["job_type"], run["group"]) == ("evaluate", "evalrun") and config["eval"]["table_budget"] == 2
    assert logged["questions"] == summary.questions == 6
    assert logged["em@2.retrieval"] == summary.figures()["em@2"]["retrieval"]
    table = json.loads((local / "files" / history["metrics_table"]["path"]).read_text())
    assert len(table["data"]) == 3 * 2 and table["columns"][:3] == ["method", "K", "em"]


def test_report_explains_all_zero_qa_scores_and_says_what_next():
    """A generator that answers nothing (the demo's random model) gives 0 everywhere: the report says that this
    is expected and that Coverage/Purity still compare the selections; every report ends with what to run next."""
    raw = _raw("hotpotqa", 0.0)
    for per_k in raw["results"].values():
        for r in per_k.values():
            r["f1"] = r["acc"] = 0.0
    zero = render_report(MetricsFile.model_validate(raw))
    assert "Every EM, F1 and Acc is 0" in zero and "make demo-real" in zero
    some = render_report(_metrics("hotpotqa", 0.2))
    assert "Every EM, F1 and Acc is 0" not in some
    for text in (zero, some):
        notes = text.split("## Reading this report", 1)[1]
        assert "purecover label-report RUN_DIR" in notes and "docs/guides/own-data.md" in notes


def test_the_recipes_note_is_shown_under_the_title():
    raw = {**_raw("hotpotqa", 0.2), "recipe": {"eval": {"report_note": "The generator is SmolLM2,\nkept for speed."}}}
    lines = render_report(MetricsFile.model_validate(raw)).splitlines()
    assert lines[:3] == ["# Evaluation: hotpotqa", "", "> The generator is SmolLM2, kept for speed."]
    assert not render_report(_metrics("hotpotqa", 0.2)).splitlines()[2].startswith(">")
