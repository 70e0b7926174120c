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


def test_tied_scores_give_exactly_what_the_fields_tools_give_on_the_same_files(tmp_path, capsys):
    """Scores tie in pairs while the ranks are distinct: trec_eval and ndeval ignore the rank column and each break
    a tie by its own rule; score-run must match them (it read the rank column before, and printed 4 decimals)."""
    import random

    import ir_measures
    from ir_measures import P, StRecall, alpha_nDCG, nDCG

    rng = random.Random(3)
    qrels_lines, run_lines = [], []
    for t in range(8):
        docs = [f"d{t}_{i:02d}" for i in range(20)]
        for d in rng.sample(docs, 8):
            for n in rng.sample(["n1", "n2", "n3", "n4"], rng.randint(1, 2)):
                qrels_lines.append(f"t{t} {n} {d} {rng.randint(1, 3)}")
        rng.shuffle(docs)
        run_lines += [f"t{t} Q0 {d} {r} {10 - r // 2} tied" for r, d in enumerate(docs, 1)]
    (tmp_path / "qrels.txt").write_text("\n".join(qrels_lines) + "\n")
    (tmp_path / "run.trec").write_text("\n".join(run_lines) + "\n")
    assert main(["score-run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)

    run = list(ir_measures.read_trec_run(str(tmp_path / "run.trec")))
    nuggets = [ir_measures.Qrel(q, d, int(g), n) for q, n, d, g in (line.split() for line in qrels_lines)]
    best: dict[tuple[str, str], int] = {}
    for q in nuggets:
        best[(q.query_id, q.doc_id)] = max(q.relevance, best.get((q.query_id, q.doc_id), 0))
    levels = [ir_measures.Qrel(q, d, g) for (q, d), g in best.items()]
    expected = {**ir_measures.calc_aggregate([nDCG @ 20, P @ 20], levels, run),
                **ir_measures.calc_aggregate([alpha_nDCG @ 20, StRecall @ 20], nuggets, run)}
    for measure, value in expected.items():
        assert report[str(measure)] == pytest.approx(value, abs=1e-12), measure
    by_rank = [f"t{t} Q0 {d} {r} {100 - r} tied" for t in range(8) for r, d in  # the rank column's order, untied
               enumerate([line.split()[2] for line in run_lines if line.startswith(f"t{t} ")], 1)]
    (tmp_path / "untied.trec").write_text("\n".join(by_rank) + "\n")
    assert main(["score-run", str(tmp_path / "untied.trec"), "--qrels", str(tmp_path / "qrels.txt"), "--json"]) == 0
    untied = json.loads(capsys.readouterr().out)
    assert untied["nDCG@20"] != report["nDCG@20"]  # the ties matter here: the test would catch reading by rank


def test_a_score_that_is_not_finite_is_refused_naming_the_line(tmp_path, capsys):
    (tmp_path / "q.txt").write_text("t1 n1 a 1\n")
    for bad in ("inf", "nan", "1e999", "-inf"):
        (tmp_path / "r.trec").write_text(f"t1 Q0 a 1 2.0 x\nt1 Q0 b 2 {bad} x\n")
        assert main(["score-run", str(tmp_path / "r.trec"), "--qrels", str(tmp_path / "q.txt")]) == 1
        assert f"r.trec:2: field 'score': '{bad}' is not a finite number" in capsys.readouterr().err
