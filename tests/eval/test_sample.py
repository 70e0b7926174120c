"""`eval.sample` / `eval.seed` (and `data.sample`, drawn before retrieval): a seeded random sample of the
evaluation questions that is deterministic, independent of file order, nested, and recorded."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import evaluation_recipe, run_data_stage
from purecover.data.splits import in_heldout, question_split, sample_questions
from purecover.eval.questions import evaluation_questions as _questions
from purecover.records import QuestionSample


def _items(n: int) -> list[dict[str, str]]:
    return [{"qid": f"q{i:04d}"} for i in range(n)]


def _qids(items) -> list[str]:
    return [it["qid"] if isinstance(it, dict) else it.qid for it in items]


def test_sample_is_deterministic_order_free_and_nested():
    items = _items(400)
    first = sample_questions(items, 50, seed=3)
    assert _qids(first) == _qids(sample_questions(items, 50, seed=3))
    assert _qids(first) != _qids(items[:50])  # not the first N
    assert _qids(first) == sorted(_qids(first))  # kept in input order
    shuffled = items[:]
    random.Random(0).shuffle(shuffled)
    assert set(_qids(sample_questions(shuffled, 50, seed=3))) == set(_qids(first))  # file order does not matter
    assert set(_qids(sample_questions(items, 20, seed=3))) < set(_qids(first))  # 20 ⊂ 50 for one seed
    assert set(_qids(sample_questions(items, 50, seed=4))) != set(_qids(first))  # another seed, another sample
    assert _qids(sample_questions(items, 400, seed=3)) == _qids(items)  # N = population: everything
    # a salted hash: with the same seed, the sample is not just the held-out split's smallest units
    heldout = {q for q in _qids(items) if in_heldout(q, 0.125, 0)}
    assert set(_qids(sample_questions(items, 50, seed=0))) != heldout


def test_sample_larger_than_the_population_is_an_error():
    with pytest.raises(ValueError, match=r"eval\.sample: cannot sample 11 questions from 10"):
        sample_questions(_items(10), 11, key="eval.sample")


def _write_candidates(run_dir: Path, n: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "candidates.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"qid": f"q{i:03d}", "question": f"question {i}?", "answers": ["a"],
                                "docs": [{"doc_id": "d", "title": "t", "text": "x"}], "gold_doc_ids": []}) + "\n")


def test_questions_apply_limit_then_sample_and_record_it(tmp_path):
    _write_candidates(tmp_path, 60)
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "eval.questions=all", "eval.limit=40", "eval.sample=10",
                                "eval.seed=7"])
    records, source, sample = _questions(recipe, tmp_path / "test", show_progress=False)
    assert len(records) == 10 and all(int(r.qid[1:]) < 40 for r in records)  # drawn from the first 40
    assert _qids(records) == _qids(sample_questions([{"qid": f"q{i:03d}"} for i in range(40)], 10, 7))
    assert sample == QuestionSample(size=10, seed=7, population=40,
                                    population_source=f"{tmp_path / 'candidates.jsonl'} (all questions), first 40")
    assert source.startswith("a random sample of 10 (eval.seed 7) of 40 questions: ")  # report.md's header line

    heldout = load_recipe(None, [f"run_dir={tmp_path}", "student.eval_fraction=0.5", "eval.sample=5"])
    records, _, sample = _questions(heldout, tmp_path / "test", show_progress=False)
    assert all(question_split(r.qid, 0.5, 0.5, 0) == "test" for r in records) and len(records) == 5
    assert sample.population == sum(question_split(f"q{i:03d}", 0.5, 0.5, 0) == "test" for i in range(60))

    none = load_recipe(None, [f"run_dir={tmp_path}", "eval.questions=all"])
    assert _questions(none, tmp_path / "test", show_progress=False)[2] is None
    too_many = load_recipe(None, [f"run_dir={tmp_path}", "eval.questions=all", "eval.sample=61"])
    with pytest.raises(ValueError, match=r"eval\.sample: cannot sample 61 questions from the 60 of .*candidates"):
        _questions(too_many, tmp_path / "test", show_progress=False)


def test_test_set_is_sampled_before_retrieval(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "data.path=demo", "data.k1=4", "eval.path=demo",
                                "eval.sample=5", "eval.seed=1", "data.limit=3"])
    data = evaluation_recipe(recipe).data
    assert (data.path, data.limit, data.sample, data.sample_seed) == ("demo", None, 5, 1)
    records, source, sample = _questions(recipe, tmp_path / "test", show_progress=False)
    written = [json.loads(line) for line in (tmp_path / "test" / "candidates.jsonl").read_text().splitlines()]
    assert len(written) == 5 and _qids(written) == _qids(records)  # only the sample was retrieved
    summary = json.loads((tmp_path / "test" / "data.run.json").read_text())["summary"]
    assert summary["questions"] == 5 and summary["sampled_from"] > 5 and summary["sample_seed"] == 1
    assert sample == QuestionSample(size=5, seed=1, population=summary["sampled_from"],
                                    population_source="demo (split dev)")
    assert f"of {summary['sampled_from']} questions" in source

    # the same draw as sampling the whole retrieved test set afterwards (one rule for both paths)
    full = load_recipe(None, [f"run_dir={tmp_path / 'full'}", "data.path=demo", "data.k1=4"])
    run_data_stage(full, show_progress=False)
    everything = [json.loads(line) for line in (tmp_path / "full" / "candidates.jsonl").read_text().splitlines()]
    assert len(everything) == summary["sampled_from"]
    assert set(_qids(sample_questions(everything, 5, 1))) == set(_qids(records))
