"""The evaluate stage on a coverage collection (``data.dataset: coverage``): no answer is generated; each method's
selections are scored with the topic's nuggets as subtopics, written as TREC runs, and those runs score the same
with the field's tools (`purecover score-run`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from purecover.cli import main
from tests.conftest import write_coverage_collection

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "coverage-evaluation.md"


def _guide(prefix: str) -> list[str]:
    return [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines() if line.strip().startswith(prefix)]


@pytest.fixture
def evaluated(tmp_path, monkeypatch):
    """The guide's `purecover data` and then `purecover evaluate` commands, as written."""
    monkeypatch.chdir(tmp_path)
    write_coverage_collection(tmp_path)
    for prefix in ("purecover data ", "purecover evaluate "):
        (command,) = _guide(prefix)
        assert main([*shlex.split(command)[1:], "-q"]) == 0, command
    return Path("runs/coverage")


def test_coverage_metrics_without_generation(evaluated):
    metrics = json.loads((evaluated / "eval" / "metrics.json").read_text())
    assert metrics["dataset"] == "coverage" and set(metrics["results"]) == {"retrieval", "mmr"}
    assert not (evaluated / "eval" / "generations.jsonl").exists()  # nothing generated
    candidates = {r["qid"]: r for r in map(json.loads, (evaluated / "candidates.jsonl").read_text().splitlines())}
    nuggets = {"a1": {"n1"}, "a2": {"n2"}, "a3": {"n1"}}  # qrels.txt with rel > 0, per document
    # retrieval at K=1 keeps each topic's first candidate; topic 101 has 2 judged nuggets, 102 has 1
    expected = [len(nuggets.get(candidates[q]["docs"][0]["doc_id"], set())) / n for q, n in (("101", 2), ("102", 1))]
    at1 = metrics["results"]["retrieval"]["1"]
    assert at1["em"] is None and at1["subtopics"]["unit"] == "nugget"
    assert at1["subtopics"]["recall"] == pytest.approx(sum(expected) / 2)
    report = (evaluated / "eval" / "report.md").read_text()
    assert "against the collection's nuggets" in report and "## QA" not in report and "eval/runs/" in report
    assert sorted(p.name for p in (evaluated / "eval" / "plots").iterdir()) == ["coverage_purity_vs_k.png"]
    summary = json.loads((evaluated / "evaluate.run.json").read_text())["summary"]
    assert summary["status"] == "complete" and summary["generated"] == 0


def test_each_selection_is_a_trec_run_that_the_field_tools_score_the_same(evaluated, capsys):
    (command,) = [c for c in _guide("purecover score-run ") if "eval/runs/" in c]
    assert main(shlex.split(command)[1:]) == 0
    assert "paired tests against retrieval@2" in capsys.readouterr().out
    metrics = json.loads((evaluated / "eval" / "metrics.json").read_text())
    for method in ("retrieval", "mmr"):
        for k in (1, 2):
            run = evaluated / "eval" / "runs" / f"{method}@{k}.trec"
            lines = run.read_text().splitlines()
            assert lines and all(len(line.split()) == 6 for line in lines)
            capsys.readouterr()
            assert main(["score-run", str(run), "--qrels", "qrels.txt", "--depth", str(k), "--json"]) == 0
            theirs = json.loads(capsys.readouterr().out)
            ours = metrics["results"][method][str(k)]["subtopics"]["recall"]
            assert theirs[f"StRecall@{k}"] == pytest.approx(ours, abs=1e-4), (method, k)


JUDGE = [{"id": "101", "docid": "a1", "ratings": [4, 0]}, {"id": "101", "docid": "a2", "ratings": [1, 3]},
         {"id": "102", "docid": "a3", "ratings": [5]}]


def test_a_judge_file_adds_cruxs_cov_and_agrees_with_score_run(evaluated, capsys):
    Path("judge.jsonl").write_text("".join(json.dumps(j) + "\n" for j in JUDGE))
    (command,) = _guide("purecover evaluate ")
    assert main([*shlex.split(command)[1:], "-q", "--set", "eval.judgments=judge.jsonl"]) == 0
    metrics = json.loads((evaluated / "eval" / "metrics.json").read_text())
    assert "Cov@K: the judge file's sub-questions" in (evaluated / "eval" / "report.md").read_text()
    for method in ("retrieval", "mmr"):
        for k in (1, 2):
            judged = metrics["results"][method][str(k)]["judged"]
            capsys.readouterr()
            run = evaluated / "eval" / "runs" / f"{method}@{k}.trec"
            assert main(["score-run", str(run), "--qrels", "qrels.txt", "--judgments", "judge.jsonl", "--depth",
                         str(k), "--json"]) == 0
            theirs = json.loads(capsys.readouterr().out)
            assert judged["n"] == 2 and judged["coverage"] == pytest.approx(theirs[f"Cov@{k}"], abs=1e-4)


def test_coverage_files_are_checked_before_any_stage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_coverage_collection(tmp_path)
    Path("judge.jsonl").write_text('{"id": "101", "docid": "a1", "ratings": [7]}\n')
    sets = ["data.dataset=coverage", "data.path=topics.jsonl", "data.corpus=corpus.jsonl", "data.qrels=qrels.txt",
            "eval.judgments=judge.jsonl", "run_dir=runs/x"]
    assert main(["data", "-q", *[a for s in sets for a in ("--set", s)]]) == 2
    assert "eval.judgments: judge.jsonl:1: field 'ratings'" in capsys.readouterr().err
    assert not Path("runs/x").exists()
    Path("qrels.txt").write_text("101 n1 a1 high\n")
    assert main(["data", "-q", *[a for s in sets[:4] for a in ("--set", s)]]) == 2
    assert "data.qrels: qrels.txt:1: field 'rel'" in capsys.readouterr().err
    assert main(["data", "-q", "--set", "eval.judgments=judge.jsonl"]) == 2
    assert "eval.judgments: is for coverage collections" in capsys.readouterr().err


def test_the_coverage_plot_draws_the_judged_passages(evaluated):
    """Topics have no answers: the plot is Coverage/Purity against the judged passages, not the (empty)
    answer-containing ones, and there is no EM or generator-token plot."""
    from purecover.eval.report import build_figures
    from purecover.records import MetricsFile, load_json_record

    metrics = load_json_record(evaluated / "eval" / "metrics.json", MetricsFile)
    figures = build_figures(metrics)
    assert list(figures) == ["coverage_purity_vs_k.png"]
    coverage_axes = figures["coverage_purity_vs_k.png"].axes[0]
    assert "judged relevant" in coverage_axes.get_title()
    (line,) = [ln for ln in coverage_axes.get_lines() if ln.get_label() == "retrieval"]
    expected = [100 * metrics.results["retrieval"][str(k)].supporting.coverage for k in metrics.budgets]
    assert list(line.get_ydata()) == pytest.approx(expected)
