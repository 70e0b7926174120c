"""report.md rendering, plots and the cross-dataset table of `purecover report`."""

from __future__ import annotations

import json

import pytest

from purecover.cli import main
from purecover.eval.report import combined_table, plot_metrics, read_metrics, render_report


def _metrics(dataset: str, em: float, methods=("retrieval", "student")) -> dict:
    def res(scale: float) -> dict:
        return {"n": 4, "em": em * scale, "f1": em * scale + 0.1, "acc": em * scale + 0.05, "mean_k": 2.0,
                "answer": {"coverage": 0.5, "purity": 0.25}, "supporting": {"coverage": 0.75, "purity": None},
                "prompt_tokens": 100.0 * scale, "completion_tokens": 3.0}

    return {"dataset": dataset, "questions": 4, "question_source": "x", "generator": "g", "backend": "hf",
            "max_new_tokens": 8, "budgets": [1, 5], "table_budget": 5, "fallbacks": {"retrieval": 0},
            "results": {m: {"1": res(1.0 + i), "5": res(1.5 + i)} for i, m in enumerate(methods)}}


def test_report_layout_and_values():
    text = render_report(_metrics("musique", 0.2))
    assert "## QA at K = 5" in text
    assert "| retrieval | 30.00 | 40.00 | 35.00 | 2.00 | 50.00 | 25.00 | 150 |" in text
    assert "| student | 50.00 | 60.00 | 55.00 |" in text
    assert "| retrieval | 50.00 / 25.00 | 50.00 / 25.00 |" in text
    assert "75.00 / —" in text  # undefined purity is shown as a dash
    assert "CRUX" not in text  # no LANCER ratings in these results: no CRUX table


def test_crux_table_appears_with_lancer_ratings():
    metrics = _metrics("hotpotqa", 0.2)
    for per_k in metrics["results"].values():
        per_k["1"]["crux"], per_k["5"]["crux"] = {"coverage": 0.25, "n": 4}, {"coverage": 0.5, "n": 4}
    text = render_report(metrics)
    assert "## CRUX Cov@K" in text and "| student | 25.00 | 50.00 |" in text


def test_plots_are_written(tmp_path):
    import matplotlib.image

    paths = plot_metrics(_metrics("musique", 0.2), tmp_path / "plots")
    assert [p.name for p in paths] == ["em_vs_k.png", "coverage_purity_vs_k.png", "input_tokens.png"]
    assert all(matplotlib.image.imread(p).ndim == 3 for p in paths)
    assert not list((tmp_path / "plots").glob(".*tmp*"))


def test_combined_table_has_a_column_group_per_dataset():
    table = combined_table([_metrics("hotpotqa", 0.3), _metrics("2wiki", 0.1, methods=("retrieval",))])
    lines = table.splitlines()
    assert lines[2] == ("| method | hotpotqa EM | hotpotqa F1 | hotpotqa Acc | 2wiki EM | 2wiki F1 | 2wiki Acc |")
    assert "| retrieval | 45.00 | 55.00 | 50.00 | 15.00 | 25.00 | 20.00 |" in lines
    assert "| student | 75.00 | 85.00 | 80.00 | — | — | — |" in lines


def test_report_command_reads_run_directories(tmp_path, capsys):
    for name, em in (("a", 0.3), ("b", 0.2)):
        (tmp_path / name / "eval").mkdir(parents=True)
        (tmp_path / name / "eval" / "metrics.json").write_text(json.dumps(_metrics(name, em)))
    out = tmp_path / "table.md"
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--k", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text() and "QA at K = 1" in printed and "| a EM |" in printed


def test_missing_or_foreign_metrics_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `purecover evaluate RECIPE` first"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(ValueError, match="field 'dataset' missing"):
        read_metrics(tmp_path / "metrics.json")
