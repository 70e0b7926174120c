"""The coverage demo as docs/guides/coverage-evaluation.md writes it: `python -m purecover.demo` writes the fictional
collection beside the tiny model, and `purecover pipeline configs/recipes/coverage_demo_cpu.yaml` runs every stage
on it: teacher labels with the nuggets as steps, the student, and evaluate scoring every method against the
nuggets, with the judge file's Cov@K; each selection is a TREC run that `purecover score-run` reads."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.demo.assets import main as demo_main

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guides" / "coverage-evaluation.md"


ONE_THREAD = "OMP_NUM_THREADS=1 "  # the guide runs the tiny models on one torch thread, as make demo-coverage does


def _commands(prefix: str) -> list[str]:
    """The guide's command lines starting with `prefix` once the one-thread setting in front of them is taken off
    (every such line carries it)."""
    lines = [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines()]
    found = [line for line in lines if line.removeprefix(ONE_THREAD).startswith(prefix)]
    assert all(line.startswith(ONE_THREAD) for line in found), found
    return [line.removeprefix(ONE_THREAD) for line in found]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("coverage-demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        (build,) = _commands("python -m purecover.demo")
        assert build == "python -m purecover.demo" and demo_main([]) == 0
        (pipeline,) = _commands("purecover pipeline ")
        args = shlex.split(pipeline)[1:]
        assert main([args[0], str(REPO / args[1]), *args[2:], "-q"]) == 0
    return root / "runs" / "coverage-demo"


def test_the_coverage_demo_runs_every_stage(demo_run):
    for stage in ("data", "label", "train", "export", "select", "evaluate"):
        assert json.loads((demo_run / f"{stage}.run.json").read_text())["summary"]["status"] == "complete", stage
    records = [json.loads(line) for line in (demo_run / "candidates.jsonl").read_text().splitlines()]
    assert len(records) == 24 and all(r["gold_doc_ids"] and r["oracle_steps"] == r["meta"]["nuggets"] for r in records)
    metrics = json.loads((demo_run / "eval" / "metrics.json").read_text())
    assert set(metrics["results"]) == {"retrieval", "gold_support", "mmr", "xquad", "lancer_sum", "lancer_greedy_cov",
                                       "teacher", "student"}
    for per_k in metrics["results"].values():
        for result in per_k.values():
            assert result["em"] is None and result["subtopics"]["unit"] == "nugget"
            assert result["judged"]["n"] == metrics["questions"]
            assert result["crux"]["n"] == metrics["questions"]  # the teacher's LANCER ratings of every topic
    # gold_support keeps the judged-relevant candidates first: its subtopic recall is the best any method gets
    best = max(per_k["5"]["subtopics"]["recall"] for per_k in metrics["results"].values())
    assert metrics["results"]["gold_support"]["5"]["subtopics"]["recall"] == best


def test_the_student_selections_are_scored_with_the_field_tools(demo_run, capsys):
    capsys.readouterr()
    run = demo_run / "eval" / "runs" / "student@3.trec"
    assert main(["score-run", f"student={run}", "--qrels", str(demo_run.parents[1] / "runs" / "demo-assets" /
                                                                 "coverage" / "qrels.txt"), "--depth", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    metrics = json.loads((demo_run / "eval" / "metrics.json").read_text())
    ours = metrics["results"]["student"]["3"]["subtopics"]["recall"]
    # evaluate scores the held-out topics only; score-run counts the others as missing, with 0
    assert report["topics"] == 24 and report["missing"] == 24 - metrics["questions"]
    assert report["StRecall@3"] == pytest.approx(ours * metrics["questions"] / 24, abs=1e-4)


def test_the_dry_run_names_the_collection_files_before_the_demo_writes_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["pipeline", str(REPO / "configs" / "recipes" / "coverage_demo_cpu.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for key in ("data.path", "data.corpus", "data.qrels", "eval.judgments"):
        assert any(line.split()[:2] == [key, "missing"] for line in out.splitlines() if line.strip()), key


def test_make_demo_coverage_runs_the_guides_commands_on_one_thread():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    body = makefile.split("\ndemo-coverage:", 1)[1].split("\n\n", 1)[0]
    recipe = [line for line in body.splitlines() if line.startswith("\t")]
    assert len(recipe) == 2 and all("OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}" in line for line in recipe)
    assert recipe[0].endswith("-m purecover.demo")
    assert recipe[1].endswith(_commands("purecover pipeline ")[0].removeprefix("purecover "))
