"""The evaluate stage on the real HotpotQA sample with a tiny random generator (mechanics, not quality).

The first six sample questions over their shared BM25 corpus (k1 = 5). Coverage@K / Purity@K, α-nDCG@K and
subtopic recall@K are checked against values worked out by hand from the candidates (listed per question below).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.eval.qa_metrics import score_prediction
from tests.process_helpers import run_and_kill_when
from tests.run_dirs import new_run_dir

pytestmark = pytest.mark.samples

_METHODS = "[retrieval,gold_support,none]"
_BUDGETS = "[1,2,5]"


def _overrides(run_dir: Path, sample_file, generator: Path) -> list[str]:
    return [f"run_dir={run_dir}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}",
            "data.limit=6", "data.k1=5", f"eval.generator={generator}", f"eval.methods={_METHODS}",
            f"eval.budgets={_BUDGETS}", "eval.questions=all", "eval.max_new_tokens=4", "eval.batch_size=4",
            "eval.dtype=float32", "eval.device=cpu", "eval.table_budget=2"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, sample_file, tiny_generator_dir):
    from purecover.data.data_stage import run_data_stage
    from purecover.eval.evaluate_stage import run_evaluate_stage

    run_dir = tmp_path_factory.mktemp("eval_run")
    recipe = load_recipe(None, _overrides(run_dir, sample_file, tiny_generator_dir))
    run_data_stage(recipe, show_progress=False)
    summary = run_evaluate_stage(recipe, show_progress=False)
    return recipe, summary


def _predictions(run_dir: Path, name: str) -> dict[str, dict]:
    path = run_dir / "eval" / "predictions" / f"{name}.jsonl"
    return {r["qid"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_every_method_and_budget_is_written_and_scored(evaluated):
    recipe, summary = evaluated
    run_dir = recipe.run_path
    candidates = {r["qid"]: r for r in map(json.loads, (run_dir / "candidates.jsonl").read_text().splitlines())}
    metrics = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert summary.questions == 6 and metrics["questions"] == 6
    for method in ("retrieval", "gold_support", "none"):
        for k in (1, 2, 5):
            rows = _predictions(run_dir, f"{method}@{k}")
            assert set(rows) == set(candidates)
            for qid, row in rows.items():
                assert row["k"] == k and len(row["selected"]) <= k
                assert row["doc_ids"] == [candidates[qid]["docs"][i]["doc_id"] for i in row["selected"]]
                assert {m: row[m] for m in ("em", "f1", "acc")} == score_prediction(
                    "hotpotqa", row["prediction"], candidates[qid]["answers"])
                assert row["prompt_tokens"] > 0
            agg = metrics["results"][method][str(k)]
            assert agg["n"] == 6 and agg["select_ms"] == 0.0  # nothing chosen beyond the shared retrieval
            if (method, k) != ("retrieval", 2):  # every result is also paired with retrieval at the main budget
                assert agg["vs_reference"]["em"]["n"] == 6
            else:
                assert "vs_reference" not in agg
            assert agg["em"] == pytest.approx(sum(r["em"] for r in rows.values()) / 6, abs=1e-6)
            assert agg["prompt_tokens"] == pytest.approx(sum(r["prompt_tokens"] for r in rows.values()) / 6, abs=1e-6)
    assert metrics["statistics"]["reference"] == "retrieval@2"  # eval.table_budget
    for qid, row in _predictions(run_dir, "retrieval@5").items():
        assert row["selected"] == list(range(min(5, len(candidates[qid]["docs"]))))
    assert all(row["selected"] == [] for row in _predictions(run_dir, "none@5").values())


def test_more_passages_mean_more_input_tokens(evaluated):
    recipe, _ = evaluated
    metrics = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    tokens = [metrics["results"]["retrieval"][k]["prompt_tokens"] for k in ("1", "2", "5")]
    closed_book = metrics["results"]["none"]["5"]["prompt_tokens"]
    assert closed_book < tokens[0] < tokens[1] < tokens[2]


# Hand-worked from the candidates (k1 = 5, retrieval order):
#   5ab48ec25542991779162cdc (gold "Spurs"): answer in doc 0 only; supporting docs {0, 1}.
#   5ae7909f5542994a481bbda6 (gold "Spyker F1"): answer in docs {2, 3}; supporting docs {0, 2}.
#   5a7f6fd75542992e7d278cfa: no candidate has the answer or is supporting (coverage undefined).
_EXPECTED = {
    ("5ab48ec25542991779162cdc", "retrieval@1"): (1.0, 1.0, 0.5, 1.0),
    ("5ab48ec25542991779162cdc", "retrieval@2"): (1.0, 0.5, 1.0, 1.0),
    ("5ab48ec25542991779162cdc", "retrieval@5"): (1.0, 0.2, 1.0, 0.4),
    ("5ab48ec25542991779162cdc", "gold_support@5"): (1.0, 0.5, 1.0, 1.0),
    ("5ae7909f5542994a481bbda6", "retrieval@1"): (0.0, 0.0, 0.5, 1.0),
    ("5ae7909f5542994a481bbda6", "retrieval@2"): (0.0, 0.0, 0.5, 0.5),
    ("5ae7909f5542994a481bbda6", "retrieval@5"): (1.0, 0.4, 1.0, 0.4),
    ("5ae7909f5542994a481bbda6", "gold_support@1"): (0.0, 0.0, 0.5, 1.0),
    ("5ae7909f5542994a481bbda6", "gold_support@2"): (0.5, 0.5, 1.0, 1.0),
    ("5a7f6fd75542992e7d278cfa", "retrieval@2"): (None, 0.0, None, 0.0),
    ("5a7f6fd75542992e7d278cfa", "gold_support@5"): (None, None, None, None),
}


@pytest.mark.parametrize(("qid", "name"), list(_EXPECTED))
def test_coverage_and_purity_match_hand_computed_values(evaluated, qid, name):
    recipe, _ = evaluated
    row = _predictions(recipe.run_path, name)[qid]
    got = (row["answer_coverage"], row["answer_purity"], row["support_coverage"], row["support_purity"])
    assert got == pytest.approx(_EXPECTED[(qid, name)]) if None not in _EXPECTED[(qid, name)] else \
        got == _EXPECTED[(qid, name)]


_L3 = math.log2(3)
# α-nDCG@K and subtopic recall@K, the two gold paragraphs of each question as subtopics (the same questions as
# above: both gold paragraphs of the first two are candidates, none of the third's; ideal DCG 1 + 1/log2(3)).
_EXPECTED_SUBTOPICS = {
    ("5ab48ec25542991779162cdc", "retrieval@1"): (1.0, 0.5),
    ("5ab48ec25542991779162cdc", "retrieval@2"): (1.0, 1.0),
    ("5ab48ec25542991779162cdc", "retrieval@5"): (1.0, 1.0),
    ("5ab48ec25542991779162cdc", "none@5"): (0.0, 0.0),
    ("5ae7909f5542994a481bbda6", "retrieval@1"): (1.0, 0.5),
    ("5ae7909f5542994a481bbda6", "retrieval@2"): (1 / (1 + 1 / _L3), 0.5),  # gold, then a non-gold passage
    ("5ae7909f5542994a481bbda6", "retrieval@5"): ((1 + 1 / 2) / (1 + 1 / _L3), 1.0),  # second gold at rank 3
    ("5ae7909f5542994a481bbda6", "gold_support@1"): (1.0, 0.5),
    ("5ae7909f5542994a481bbda6", "gold_support@5"): (1.0, 1.0),
    ("5a7f6fd75542992e7d278cfa", "retrieval@2"): (None, 0.0),  # gold not retrieved: left out of α-nDCG
    ("5a7f6fd75542992e7d278cfa", "gold_support@5"): (None, 0.0),
}


@pytest.mark.parametrize(("qid", "name"), list(_EXPECTED_SUBTOPICS))
def test_alpha_ndcg_and_subtopic_recall_match_hand_computed_values(evaluated, qid, name):
    recipe, _ = evaluated
    row = _predictions(recipe.run_path, name)[qid]
    ndcg, recall = _EXPECTED_SUBTOPICS[(qid, name)]
    assert row["alpha_ndcg"] == (pytest.approx(ndcg) if ndcg is not None else None)
    assert row["subtopic_recall"] == pytest.approx(recall)


def test_subtopic_means_in_metrics_json_and_report_for_every_method(evaluated):
    recipe, _ = evaluated
    metrics = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    counts = set()
    for method in ("retrieval", "gold_support", "none"):
        for k in (1, 2, 5):
            rows = _predictions(recipe.run_path, f"{method}@{k}").values()
            sub = metrics["results"][method][str(k)]["subtopics"]
            ndcg = [r["alpha_ndcg"] for r in rows if r["alpha_ndcg"] is not None]
            recall = [r["subtopic_recall"] for r in rows if r["subtopic_recall"] is not None]
            assert sub["alpha_ndcg"] == pytest.approx(sum(ndcg) / len(ndcg)) and sub["n_alpha_ndcg"] == len(ndcg)
            assert sub["recall"] == pytest.approx(sum(recall) / len(recall)) and sub["n_recall"] == len(recall)
            assert (sub["alpha"], sub["unit"]) == (0.5, "passage")  # data.corpus shared: the dataset's paragraphs
            counts.add((sub["n_no_subtopics"], sub["n_none_retrieved"], sub["n_alpha_ndcg"], sub["n_recall"]))
    (no_gold, none_retrieved, n_ndcg, n_recall), = counts  # the same questions for every method and K
    assert no_gold == 0 and none_retrieved >= 1 and n_ndcg == 6 - none_retrieved and n_recall == 6
    assert metrics["results"]["gold_support"]["5"]["subtopics"]["alpha_ndcg"] == 1.0
    assert metrics["results"]["none"]["5"]["subtopics"]["alpha_ndcg"] == 0.0
    report = (recipe.run_path / "eval" / "report.md").read_text()
    section = report.split("## α-nDCG@K / subtopic recall@K against gold supporting paragraphs")[1].split("\n## ")[0]
    assert "Questions without gold supporting paragraphs are left out of both (0 of 6)" in section
    assert f"left out of α-nDCG only ({none_retrieved}; their recall is 0)" in section
    for method in ("retrieval", "gold_support", "none"):
        cells = [f"{100 * v:.2f}" for v in (metrics["results"][method]["5"]["subtopics"]["alpha_ndcg"],
                                             metrics["results"][method]["5"]["subtopics"]["recall"])]
        row = next(line for line in section.splitlines() if line.startswith(f"| {method} |"))
        assert row.endswith(f"| {cells[0]} / {cells[1]} |")  # K = 5, the last column


def test_a_corpus_file_counts_each_supporting_article_once(tmp_path, sample_file, tiny_generator_dir):
    """data.corpus a file of chunks (each paragraph of the first six questions cut into one chunk per sentence):
    a supporting title is one subtopic, its chunks after the first are redundant (unit "title")."""
    from purecover.data.corpus import normalize_title
    from purecover.data.data_stage import run_data_stage
    from purecover.eval.evaluate_stage import run_evaluate_stage

    questions = json.loads(sample_file("hotpotqa").read_text())[:6]
    chunks = {}
    for q in questions:
        for title, sentences in q["context"]:
            for sentence in sentences:
                if sentence.strip():
                    chunks[(title, sentence.strip())] = {"id": f"c{len(chunks)}", "title": title,
                                                         "text": sentence.strip()}
    corpus = tmp_path / "chunks.jsonl"
    corpus.write_text("".join(json.dumps(c) + "\n" for c in chunks.values()))
    run_dir = tmp_path / "run"
    overrides = [o for o in _overrides(run_dir, sample_file, tiny_generator_dir) if not o.startswith("eval.methods")]
    recipe = load_recipe(None, [*overrides, f"data.corpus={corpus}", "data.k1=10", "eval.methods=[retrieval]",
                                "eval.budgets=[10]"])
    run_data_stage(recipe, show_progress=False)
    run_evaluate_stage(recipe, show_progress=False)
    sub = json.loads((run_dir / "eval" / "metrics.json").read_text())["results"]["retrieval"]["10"]["subtopics"]
    assert sub["unit"] == "title" and sub["n_recall"] == 6
    rows = _predictions(run_dir, "retrieval@10")
    repeated = 0
    for c in map(json.loads, (run_dir / "candidates.jsonl").read_text().splitlines()):
        gold, titles = set(c["gold_doc_ids"]), {normalize_title(t) for t in c["gold_titles"]}
        assert len(gold) > len(titles) == 2  # several chunks per supporting article
        keys = [normalize_title(d["title"]) if d["doc_id"] in gold else None for d in c["docs"]]
        seen: dict[str, int] = {}
        dcg = 0.0
        for r, key in enumerate(keys):
            if key is not None:
                dcg += 0.5 ** seen.get(key, 0) / math.log2(r + 2)
                seen[key] = seen.get(key, 0) + 1
        repeated += any(n > 1 for n in seen.values())
        # the ideal: one chunk of each retrieved article first, then the second chunks at gain 1/2, ...
        per_title = sorted((0.5 ** j for t in set(keys) - {None} for j in range(keys.count(t))), reverse=True)
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(per_title))
        row = rows[c["qid"]]
        assert row["alpha_ndcg"] == (pytest.approx(dcg / ideal) if ideal else None)
        assert row["subtopic_recall"] == pytest.approx(len(seen) / len(titles))
    assert repeated  # some ranking repeats an article: α matters here


def test_gold_support_selection_is_pure_against_supporting_paragraphs(evaluated):
    recipe, _ = evaluated
    for k in (1, 2, 5):
        for row in _predictions(recipe.run_path, f"gold_support@{k}").values():
            assert row["support_purity"] in (None, 1.0)


def test_report_and_plots(evaluated):
    recipe, summary = evaluated
    eval_dir = recipe.run_path / "eval"
    report = (eval_dir / "report.md").read_text()
    assert "## QA at K = 2" in report
    assert "| method | hotpotqa EM | hotpotqa F1 | hotpotqa Acc |" in report
    for method in ("retrieval", "gold_support", "none"):
        assert f"| {method} |" in report
    import matplotlib.image

    names = {Path(p).name for p in summary.plots}
    assert names == {"em_vs_k.png", "coverage_purity_vs_k.png", "input_tokens.png"}
    for name in names:
        assert f"(plots/{name})" in report
        image = matplotlib.image.imread(eval_dir / "plots" / name)
        assert image.shape[0] > 200 and image.shape[1] > 300


def test_identical_prompts_are_generated_once(evaluated):
    recipe, summary = evaluated
    keys = set()
    for path in (recipe.run_path / "eval" / "predictions").glob("*.jsonl"):
        keys |= {json.loads(line)["prompt_key"] for line in path.read_text().splitlines()}
    assert summary.prompts == len(keys) < 3 * 3 * 6  # `none` is one prompt per question for all K
    assert summary.generated == len(keys)


def test_rerun_generates_nothing_and_rewrites_the_same_outputs(evaluated):
    from purecover.contract import execute_stage

    recipe, first = evaluated
    pred_dir = recipe.run_path / "eval" / "predictions"
    before = {p.name: p.read_bytes() for p in pred_dir.glob("*.jsonl")}
    manifest = (recipe.run_path / "evaluate.run.json").read_bytes()
    skipped = execute_stage("evaluate", recipe, show_progress=False)
    assert skipped.action == "skip" and skipped.summary == first  # complete, same inputs: nothing is redone
    assert (recipe.run_path / "evaluate.run.json").read_bytes() == manifest
    again = execute_stage("evaluate", recipe, show_progress=False, force=True)  # `--from evaluate`
    assert again.action == "rerun"
    assert again.summary.generated == 0 and again.summary.cached == first.prompts
    assert {p.name: p.read_bytes() for p in pred_dir.glob("*.jsonl")} == before


def test_eval_prompt_file_changes_the_prompts_and_is_recorded(evaluated, tmp_path, sample_file, tiny_generator_dir):
    """eval.prompt_file: other prompts (other cache keys), its name and hash in metrics.json, an in-place edit
    redoes a complete evaluation."""
    import shutil

    from purecover.contract import execute_stage
    from purecover.eval.rag_prompt import RagPrompt

    recipe, _ = evaluated
    ours = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    assert ours["answer_prompt"] == RagPrompt.default().record() and ours["answer_prompt"]["file"] == "rag_answer.txt"
    run_dir = tmp_path / "run"
    new_run_dir(run_dir)
    shutil.copy2(recipe.run_path / "candidates.jsonl", run_dir / "candidates.jsonl")
    prompt = tmp_path / "answer.txt"
    prompt.write_text("[[reply]]\nAnswer in as few words as you can.\n", encoding="utf-8")
    mine = load_recipe(None, [*_overrides(run_dir, sample_file, tiny_generator_dir), f"eval.prompt_file={prompt}",
                              "eval.methods=[retrieval,none]"])
    first = execute_stage("evaluate", mine, show_progress=False)
    metrics = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert metrics["answer_prompt"] == {"file": "answer.txt", "sha256": RagPrompt.from_config(mine.eval).sha256}
    keys = {json.loads(line)["prompt_key"] for line in (run_dir / "eval" / "predictions" / "none@2.jsonl").open()}
    default_keys = {json.loads(line)["prompt_key"]
                    for line in (recipe.run_path / "eval" / "predictions" / "none@2.jsonl").open()}
    assert keys and not keys & default_keys and first.summary.generated == first.summary.prompts
    assert execute_stage("evaluate", mine, show_progress=False).action == "skip"
    prompt.write_text("[[reply]]\nOne word.\n", encoding="utf-8")  # edited in place: same recipe
    assert execute_stage("evaluate", mine, show_progress=False).action != "skip"


def test_score_command_reproduces_the_metrics(evaluated, sample_file):
    from purecover.eval.score_cli import run_score

    recipe, _ = evaluated
    metrics = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    scored = run_score(recipe.run_path / "eval" / "predictions" / "retrieval@5.jsonl", "hotpotqa",
                       sample_file("hotpotqa"), allow_missing=True)
    assert scored.n == 6
    for m in ("em", "f1", "acc"):
        assert getattr(scored, m) == pytest.approx(metrics["results"]["retrieval"]["5"][m], abs=1e-6)


@pytest.mark.slow
def test_killed_evaluation_resumes_to_identical_outputs(tmp_path, sample_file, tiny_generator_dir, evaluated):
    """SIGKILL during generation, rerun: same predictions as the uninterrupted run, no duplicates."""
    recipe, _ = evaluated
    run_dir = tmp_path / "run"
    new_run_dir(run_dir)
    for name in ("candidates.jsonl", "data.run.json"):
        (run_dir / name).write_bytes((recipe.run_path / name).read_bytes())
    args = [sys.executable, "-m", "purecover.cli", "evaluate", "-q"]
    for o in _overrides(run_dir, sample_file, tiny_generator_dir):
        args += ["--set", o.replace("eval.batch_size=4", "eval.batch_size=1")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cache = run_dir / "eval" / "generations.jsonl"
    run_and_kill_when(args, lambda: cache.is_file() and cache.read_text().count("\n") >= 3,
                      what="the evaluation", env=env, poll=0.05)
    written = cache.read_text().count("\n")
    assert 3 <= written < 40
    with cache.open("a") as fh:  # a torn record, as if killed mid-write
        fh.write('{"key": "abc", "predic')
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    keys = [json.loads(line)["key"] for line in cache.read_text().splitlines()]
    assert len(keys) == len(set(keys))
    reference = recipe.run_path / "eval" / "predictions"
    for path in reference.glob("*.jsonl"):
        assert (run_dir / "eval" / "predictions" / path.name).read_bytes() == path.read_bytes()
    manifest = json.loads((run_dir / "evaluate.run.json").read_text())["summary"]
    assert manifest["repaired_lines"] == 1 and manifest["generated"] == manifest["prompts"] - written


def test_unknown_method_suggests_the_closest(tmp_path):
    from purecover.eval.evaluate_stage import parse_methods

    with pytest.raises(ValueError, match="did you mean 'retrieval'"):
        parse_methods(["retreival"])
    with pytest.raises(ValueError, match="only teacher:DIR and student:DIR"):
        parse_methods(["mmr:runs/x"])
    specs = parse_methods(["student", "student:runs/abl"])
    assert [(s.name, s.kind, s.slug) for s in specs] == [("student", "student", "student"),
                                                          ("student:runs/abl", "student", "student_runs_abl")]


def test_vllm_generator_backend(evaluated, tmp_path, fake_vllm, bos_tok):
    """eval.backend=vllm goes through the teacher's vLLM adapter (a stand-in module: no GPU here)."""
    import dataclasses

    from purecover.eval.evaluate_stage import run_evaluate_stage

    recipe, _ = evaluated
    run_dir = tmp_path / "run"
    new_run_dir(run_dir)
    for name in ("candidates.jsonl", "data.run.json"):
        (run_dir / name).write_bytes((recipe.run_path / name).read_bytes())
    ev = dataclasses.replace(recipe.eval, backend="vllm", tensor_parallel_size=2, methods=["retrieval"], budgets=[1])
    vllm_recipe = dataclasses.replace(recipe, run_dir=str(run_dir), eval=ev)
    summary = run_evaluate_stage(vllm_recipe, show_progress=False)
    (llm,) = fake_vllm.instances
    assert llm.kwargs["model"] == recipe.eval.generator and llm.kwargs["tensor_parallel_size"] == 2
    assert len(llm.calls) == 1  # vLLM gets the prompts in chunks of up to 512, not eval.batch_size
    (prompts, params), = llm.calls
    assert params.kwargs["temperature"] == 0.0 and params.kwargs["max_tokens"] == recipe.eval.max_new_tokens
    assert len(prompts) == summary.generated == 6
    rows = _predictions(run_dir, "retrieval@1")
    # vLLM gets token ids tokenised without added special tokens (the engine's tokenizer: the stand-in's here)
    assert all(set(p) == {"prompt_token_ids"} for p in prompts)
    assert sorted(r["prediction"] for r in rows.values()) == sorted(
        f"<{bos_tok.decode(p['prompt_token_ids'])}>".strip() for p in prompts)
