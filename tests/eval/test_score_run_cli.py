"""`purecover score-run`: the commands of docs/guides/coverage-evaluation.md run as written, on a small collection
built here; the report's keys and values; bad files fail before scoring with one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from purecover.cli import main

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "coverage-evaluation.md"
QRELS = "t1 n1 d1 1\nt1 n2 d2 1\nt1 n1 d3 2\nt1 n2 d3 1\nt1 n3 d4 1\nt2 n1 e1 1\nt2 n2 e2 1\n"
RUN = "t1 Q0 d3 1 9 bm25\nt1 Q0 dx 2 8 bm25\nt1 Q0 d4 3 7 bm25\nt2 Q0 e2 1 3 bm25\n"
JUDGE = [{"id": "t1", "docid": "d1", "ratings": [4, 0, 1]}, {"id": "t1", "docid": "d3", "ratings": [3, 3, 0]},
         {"id": "t2", "docid": "e1", "ratings": [5, 0]}]
SELECTIONS = [{"qid": "t1", "selected": [0, 1], "selected_doc_ids": ["d1", "d2"], "logits": [1.0, 0.5],
               "probabilities": [0.6, 0.4]}, {"qid": "t2", "selected": [], "selected_doc_ids": [], "logits": [],
                                               "probabilities": []}]


@pytest.fixture
def collection(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("qrels.txt").write_text(QRELS)
    Path("bm25.trec").write_text(RUN)
    Path("judge.jsonl").write_text("".join(json.dumps(j) + "\n" for j in JUDGE))
    Path("runs/demo").mkdir(parents=True)
    Path("runs/demo/selections.jsonl").write_text("".join(json.dumps(s) + "\n" for s in SELECTIONS))
    return tmp_path


def _guide_commands() -> list[str]:
    """The guide's score-run commands on runs and selections; those on runs/coverage run after the stages that
    write them (tests/data/test_coverage_dataset.py, tests/eval/test_evaluate_coverage.py)."""
    return [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines()
            if line.strip().startswith("purecover score-run ") and "runs/coverage" not in line]


def test_the_guide_commands_run_as_written(collection, capsys):
    commands = _guide_commands()
    assert len(commands) == 3
    outputs = []
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, command
        outputs.append(capsys.readouterr().out)
    table, as_json, comparison = outputs
    assert "alpha_nDCG@20" in table and "topics 2, missing 0" in table
    report = json.loads(as_json)
    assert list(report) == ["nDCG@20", "P@20", "alpha_nDCG@20", "StRecall@20", "Cov@20", "topics", "missing",
                            "unjudged"]
    # by hand: StRecall t1 3/3, t2 1/2; Cov t1 2/3 (d3 rates 3 on two of three), t2 0 (e2 unjudged); P t1 2/20, t2 1/20
    assert report["StRecall@20"] == 0.75 and report["Cov@20"] == pytest.approx(0.3333, abs=1e-4)
    assert report["P@20"] == pytest.approx(0.075, abs=1e-4)
    assert "paired tests against bm25" in comparison and "StRecall@set" in comparison


def test_several_runs_give_intervals_and_paired_tests(collection, capsys):
    assert main(["score-run", "bm25=bm25.trec", "student=runs/demo/selections.jsonl", "--qrels", "qrels.txt",
                 "--judgments", "judge.jsonl", "--depth", "5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"] == "bm25" and set(report["runs"]) == {"bm25", "student"}
    student = report["runs"]["student"]
    assert student["missing"] == 1 and student["StRecall@set"]["mean"] == pytest.approx(0.3333, abs=1e-4)
    assert student["Cov@set"]["mean"] == pytest.approx(0.1667, abs=1e-4)
    low, mean, high = (student["StRecall@5"][k] for k in ("low", "mean", "high"))
    assert low <= mean <= high
    paired = report["paired"]["student"]["StRecall@5"]
    assert paired["diff"] == pytest.approx(mean - report["runs"]["bm25"]["StRecall@5"]["mean"], abs=1e-4)
    assert 0 < paired["p"] <= 1 and "StRecall@set" not in report["paired"]["student"]


@pytest.mark.parametrize(("files", "message"), [
    ({"qrels.txt": "t1 n1 d1\n"}, "qrels.txt:1: a qrels line has 4 columns"),
    ({"bm25.trec": "t1 Q0 d1 first 1 x\n"}, "bm25.trec:1: field 'rank'"),
    ({"judge.jsonl": '{"id": "t1", "docid": "d1", "ratings": [9]}\n'}, "judge.jsonl:1: field 'ratings'"),
])
def test_a_bad_file_is_one_line_naming_file_line_and_field(collection, capsys, files, message):
    for name, text in files.items():
        Path(name).write_text(text)
    assert main(["score-run", "bm25.trec", "--qrels", "qrels.txt", "--judgments", "judge.jsonl"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("purecover score-run: error: ") and message in err and err.count("\n") == 1


def test_depth_and_names_are_checked(collection, capsys):
    assert main(["score-run", "bm25.trec", "--qrels", "qrels.txt", "--depth", "50"]) == 1
    assert "from 1 to 20" in capsys.readouterr().err
    assert main(["score-run", "a=bm25.trec", "a=runs/demo/selections.jsonl", "--qrels", "qrels.txt"]) == 1
    assert "same name" in capsys.readouterr().err
