"""``selections:PATH=name``: any external reranker's selections (JSONL or TREC run) evaluated under its name.

The evaluate stage runs on four HotpotQA sample questions (BM25, k1 = 5) with a tiny random generator.
A hand-made "student" selections file is evaluated three ways: as ``student:DIR``, as the same file
through ``selections:`` (positions and doc ids), as doc ids only, and as a TREC run: the figures
must be identical. Format errors are checked on the reader directly (no generation).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.errors import DataFormatError
from purecover.eval.evaluate_stage import MethodSpec, parse_methods
from purecover.eval.external import ExternalSelection, read_external_selections
from purecover.records import CandidateRecord
from purecover.utils.io import read_jsonl
from purecover.utils.trec import read_trec_run, trec_run_lines
from tests.conftest import write_jsonl

_BUDGETS = [1, 2]


def _recipe(run_dir: Path, sample_file, generator: Path, methods: list[str]):
    return load_recipe(None, [
        f"run_dir={run_dir}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}", "data.limit=4",
        "data.k1=5", f"eval.generator={generator}", f"eval.methods={json.dumps(methods)}",
        f"eval.budgets={json.dumps(_BUDGETS)}", "eval.questions=all", "eval.max_new_tokens=3", "eval.batch_size=4",
        "eval.dtype=float32", "eval.device=cpu", "eval.table_budget=2"])


def _stored_selections(candidates: list[dict]) -> list[dict]:
    """A deterministic, non-trivial 'student' selection per question (the last docs first), as the select stage
    writes it (``student:DIR`` reads whole selections.jsonl records)."""
    rows = []
    for c in candidates:
        n = len(c["docs"])
        picked = list(range(n))[::-1][:3]
        rows.append({"qid": c["qid"], "selected": picked,
                     "selected_doc_ids": [c["docs"][k]["doc_id"] for k in picked],
                     "logits": [float(k) for k in range(n)], "probabilities": [1.0 / n] * n})
    return rows


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, sample_file, tiny_generator_dir):
    from purecover.data.data_stage import run_data_stage
    from purecover.eval.evaluate_stage import run_evaluate_stage

    pytest.importorskip("bm25s")
    root = tmp_path_factory.mktemp("external")
    run_dir, other = root / "run", root / "other_run"
    other.mkdir()
    recipe = _recipe(run_dir, sample_file, tiny_generator_dir, ["retrieval"])
    run_data_stage(recipe, show_progress=False)
    candidates = [r for _, r in read_jsonl(run_dir / "candidates.jsonl")]
    stored = _stored_selections(candidates)
    write_jsonl(other / "selections.jsonl", stored)  # read by student:DIR
    write_jsonl(root / "ids_only.jsonl", [{"qid": r["qid"], "selected_doc_ids": r["selected_doc_ids"],
                                           "selected": [0]} for r in stored])  # doc ids win over positions
    lines = [line for r in stored
             for line in trec_run_lines(r["qid"], [(d, -float(i)) for i, d in enumerate(r["selected_doc_ids"])],
                                        "bm25")]
    (root / "run.trec").write_text("".join(line + "\n" for line in reversed(lines)))  # rank, not file order
    methods = [f"student:{other}", f"selections:{other / 'selections.jsonl'}=ext", f"selections:{root / 'ids_only.jsonl'}",
               f"selections:{root / 'run.trec'}=bm25 run"]
    recipe = _recipe(run_dir, sample_file, tiny_generator_dir, methods)
    summary = run_evaluate_stage(recipe, show_progress=False)
    return recipe, summary, candidates, stored


@pytest.mark.samples
def test_external_methods_equal_the_student_under_their_names(evaluated):
    recipe, summary, candidates, stored = evaluated
    eval_dir = recipe.run_path / "eval"
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    student = next(m for m in metrics["methods"] if m.startswith("student:"))
    assert summary.methods[1:] == ["ext", "ids_only", "bm25 run"]
    assert {m: metrics["methods"][m] for m in ("ext", "ids_only", "bm25 run")} == dict.fromkeys(
        ("ext", "ids_only", "bm25 run"), "selections")
    by_qid = {r["qid"]: r for r in stored}
    for k in _BUDGETS:
        figures = metrics["results"][student][str(k)]
        assert figures["mean_k"] == pytest.approx(min(k, 3))
        for name, slug in (("ext", "ext"), ("ids_only", "ids_only"), ("bm25 run", "bm25_run")):
            assert metrics["results"][name][str(k)] == figures, (name, k)
            rows = [r for _, r in read_jsonl(eval_dir / "predictions" / f"{slug}@{k}.jsonl")]
            assert [r["qid"] for r in rows] == [c["qid"] for c in candidates]
            for r in rows:
                assert r["selected"] == by_qid[r["qid"]]["selected"][:k]  # own order kept, cut to K
                assert r["doc_ids"] == by_qid[r["qid"]]["selected_doc_ids"][:k]
    report = (eval_dir / "report.md").read_text()
    for name in ("ext", "ids_only", "bm25 run"):
        assert name in report


def _expected_subtopics(candidate: dict, selected: list[int], k: int) -> tuple[float | None, float | None]:
    """α-nDCG@k and subtopic recall@k worked out directly: every gold paragraph is one subtopic, so a gold passage
    gains 1 at its rank and the ideal ranks every gold candidate first."""
    gold = set(candidate["gold_doc_ids"])
    is_gold = [d["doc_id"] in gold for d in candidate["docs"]]
    dcg = sum(1 / math.log2(r + 2) for r, i in enumerate(selected[:k]) if is_gold[i])
    ideal = sum(1 / math.log2(r + 2) for r in range(min(k, sum(is_gold))))
    recall = sum(is_gold[i] for i in selected[:k]) / len(gold) if gold else None
    return (dcg / ideal if ideal else None), recall


@pytest.mark.samples
def test_external_methods_get_alpha_ndcg_and_subtopic_recall(evaluated):
    """selections:PATH (JSONL and TREC run) are ranked as read: their α-nDCG@K and subtopic recall@K per question,
    their means in metrics.json and their rows in report.md."""
    recipe, _, candidates, stored = evaluated
    eval_dir = recipe.run_path / "eval"
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    by_qid = {r["qid"]: r for r in stored}
    for name, slug in (("ext", "ext"), ("ids_only", "ids_only"), ("bm25 run", "bm25_run")):
        for k in _BUDGETS:
            rows = [r for _, r in read_jsonl(eval_dir / "predictions" / f"{slug}@{k}.jsonl")]
            for c, row in zip(candidates, rows):
                ndcg, recall = _expected_subtopics(c, by_qid[c["qid"]]["selected"], k)
                assert row["alpha_ndcg"] == (pytest.approx(ndcg) if ndcg is not None else None)
                assert row["subtopic_recall"] == pytest.approx(recall)
            sub = metrics["results"][name][str(k)]["subtopics"]
            defined = [r["alpha_ndcg"] for r in rows if r["alpha_ndcg"] is not None]
            assert sub["n_alpha_ndcg"] == len(defined) > 0 and sub["alpha_ndcg"] == pytest.approx(
                sum(defined) / len(defined))
    section = (eval_dir / "report.md").read_text().split("## α-nDCG@K / subtopic recall@K")[1].split("\n## ")[0]
    for name in metrics["methods"]:
        assert f"| {name} |" in section


def test_parse_methods_names_and_errors(tmp_path):
    specs = parse_methods(["retrieval", "selections:runs/a/sel.jsonl=mine", "selections:runs/lam=0.3/b.trec",
                           "selections:c.run"])
    assert specs[1] == MethodSpec("mine", "selections", Path("runs/a/sel.jsonl"))
    assert specs[2] == MethodSpec("b", "selections", Path("runs/lam=0.3/b.trec"))  # '=' inside the path
    assert specs[3] == MethodSpec("c", "selections", Path("c.run"))
    with pytest.raises(ValueError, match="needs the path"):
        parse_methods(["selections:"])
    with pytest.raises(ValueError, match="twice"):
        parse_methods(["selections:a.jsonl=x", "selections:b.jsonl=x"])
    with pytest.raises(ValueError, match="only teacher:DIR and student:DIR"):
        parse_methods(["retrieval:foo"])


def test_pipeline_dry_run_lists_the_file(tmp_path):
    from purecover.pipeline import resolve_resources

    present = write_jsonl(tmp_path / "here.jsonl", [])
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", "data.path=demo",
                                f"eval.methods={json.dumps([f'selections:{present}=a', 'selections:runs/gone.trec=b'])}"])
    found = {r.key: r for r in resolve_resources(recipe)}
    assert (found["eval.methods[a]"].status, found["eval.methods[a]"].value) == ("found", str(present))
    assert found["eval.methods[b]"].status == "missing"


_QUESTIONS = [CandidateRecord.model_validate(q) for q in (
    {"qid": "q1", "question": "?", "answers": [], "docs": [{"doc_id": "d1", "text": "x"}, {"doc_id": "d2", "text": "y"},
                                                           {"text": "no id: named 3"}]},
    {"qid": "q2", "question": "?", "answers": [], "docs": [{"doc_id": "e1", "text": "z"}]})]


def test_reader_resolves_positions_doc_ids_and_trec(tmp_path):
    jsonl = write_jsonl(tmp_path / "s.jsonl", [{"qid": "q1", "selected_doc_ids": ["3", "d1"]},
                                                {"qid": "q2", "selected": [0]}, {"qid": "not evaluated", "selected": [9]}])
    assert read_external_selections(jsonl, _QUESTIONS, "m") == {
        "q1": ExternalSelection("q1", [2, 0]), "q2": ExternalSelection("q2", [0])}
    trec = tmp_path / "r.txt"  # detected by its content
    trec.write_text("q1 Q0 d2 2 0.5 r\nq1 Q0 d1 1 0.9 r\nq9 Q0 zz 1 1 r\n")
    assert read_external_selections(trec, _QUESTIONS, "m") == {"q1": ExternalSelection("q1", [0, 1])}
    assert read_trec_run(trec)["q1"] == [("d1", 2), ("d2", 1)]


@pytest.mark.parametrize(("rows", "match"), [
    ([{"qid": "q1", "selected_doc_ids": ["d1", "nope"]}], r"s\.jsonl:1: field 'selected_doc_ids\[1\]': 'nope' is not"),
    ([{"qid": "q2", "selected": [0]}, {"qid": "q1", "selected": [5]}], r"s\.jsonl:2: field 'selected\[0\]': 5 is not"),
    ([{"qid": "q1"}], r"s\.jsonl:1: field 'selected': neither"),
    ([{"qid": "q1", "selected": [1, 1]}], r"s\.jsonl:1: field 'selected\[1\]'.*twice"),
    ([{"qid": "q1", "selected": [0]}, {"qid": "q1", "selected": [1]}], r"s\.jsonl:2: field 'qid': duplicate"),
    ([{"selected": [0]}], r"s\.jsonl:1: field 'qid'"),
])
def test_jsonl_errors_name_line_and_field(tmp_path, rows, match):
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    with pytest.raises(DataFormatError, match=match):
        read_external_selections(path, _QUESTIONS, "m")


@pytest.mark.parametrize(("text", "match"), [
    ("q1 Q0 d1 1 0.9 r\nq1 Q0 d9 2 0.5 r\n", r"r\.trec:2: field 'doc_id': 'd9' is not among the 3 candidates"),
    ("q1 Q0 d1 1 0.9\n", r"r\.trec:1: a TREC run line has 6 columns"),
    ("q1 Q0 d1 first 0.9 r\n", r"r\.trec:1: field 'rank'"),
    ("q1 Q0 d1 1 0.9 r\nq1 Q0 d1 2 0.5 r\n", r"r\.trec:2: field 'doc_id': 'd1' is listed twice"),
])
def test_trec_errors_name_the_line(tmp_path, text, match):
    path = tmp_path / "r.trec"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_external_selections(path, _QUESTIONS, "m")


@pytest.mark.samples
def test_missing_file_and_missing_questions(tmp_path, evaluated):
    recipe, _, candidates, stored = evaluated
    with pytest.raises(FileNotFoundError, match="method m: .*gone.jsonl does not exist"):
        read_external_selections(tmp_path / "gone.jsonl", _QUESTIONS, "m")
    from dataclasses import replace

    from purecover.eval.evaluate_stage import run_evaluate_stage

    partial = write_jsonl(tmp_path / "partial.jsonl", stored[1:])
    recipe = replace(recipe, eval=replace(recipe.eval, methods=[f"selections:{partial}=part"]))
    with pytest.raises(ValueError, match=rf"method part: 1 of {len(candidates)} evaluation questions have no "
                                         rf"selection in .*partial\.jsonl \(first: {candidates[0]['qid']}\)"):
        run_evaluate_stage(recipe, show_progress=False)
