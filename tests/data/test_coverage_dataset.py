"""A coverage collection as the data stage's questions (``data.dataset: coverage``): topics from a file, gold
passages from the nugget qrels, documents from the collection's corpus file; the retrieval ranking is then scored
with `purecover score-run`, as docs/guides/coverage-evaluation.md shows."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import ConfigError, load_recipe
from tests.conftest import write_coverage_collection

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "coverage-evaluation.md"
@pytest.fixture
def collection(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_coverage_collection(tmp_path)
    return tmp_path


def _guide_commands(prefix: str) -> list[str]:
    return [line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines() if line.strip().startswith(prefix)]


def test_the_guide_retrieves_candidates_for_a_collection_and_scores_them(collection, capsys):
    (data_command,) = _guide_commands("purecover data ")
    assert main(shlex.split(data_command)[1:]) == 0
    records = [json.loads(line) for line in Path("runs/coverage/candidates.jsonl").read_text().splitlines()]
    by_qid = {r["qid"]: r for r in records}
    assert by_qid["101"]["gold_doc_ids"] == ["a1", "a2"] and by_qid["102"]["gold_doc_ids"] == ["a3"]
    assert by_qid["101"]["answers"] == [] and by_qid["101"]["meta"]["nuggets"] == ["crops lost", "farms evacuated"]
    assert by_qid["101"]["oracle_steps"] == ["crops lost", "farms evacuated"]  # teacher.steps: oracle
    assert by_qid["102"]["docs"][0]["doc_id"] == "a3" and len(by_qid["102"]["docs"]) == 3
    capsys.readouterr()
    (score_command,) = [c for c in _guide_commands("purecover score-run ") if "candidates.jsonl" in c]
    assert main([*shlex.split(score_command)[1:], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["topics"] == 2 and "StRecall@set" not in report  # a ranking, not a set
    assert report["StRecall@20"] == 1.0  # 3 candidates of 5 documents hold every judged nugget here


def test_a_coverage_recipe_needs_qrels_and_a_corpus_file(collection):
    with pytest.raises(ConfigError, match="data.qrels"):
        load_recipe(None, ["data.dataset=coverage", "data.path=topics.jsonl", "data.corpus=corpus.jsonl"])
    with pytest.raises(ConfigError, match="data.corpus"):
        load_recipe(None, ["data.dataset=coverage", "data.path=topics.jsonl", "data.qrels=qrels.txt"])


def test_a_changed_qrels_file_is_an_input_of_the_data_stage(collection):
    from purecover.data.data_stage import dataset_inputs

    recipe = load_recipe(None, ["data.dataset=coverage", "data.path=topics.jsonl", "data.corpus=corpus.jsonl",
                                "data.qrels=qrels.txt"])
    assert dataset_inputs(recipe)["data.qrels"] == Path("qrels.txt")
