"""The evaluate stage on the real HotpotQA sample with a tiny random generator (mechanics, not quality).

The first six sample questions over their shared BM25 corpus (k1 = 5). Coverage@K / Purity@K are
checked against values worked out by hand from the candidates (listed per question below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.eval.qa_metrics import score_prediction
from tests.process_helpers import run_and_kill_when

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
    from purecover.data.candidates import run_data_stage
    from purecover.eval.job import run_evaluate_stage

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
            assert agg["n"] == 6
            assert agg["em"] == pytest.approx(sum(r["em"] for r in rows.values()) / 6, abs=1e-6)
            assert agg["prompt_tokens"] == pytest.approx(sum(r["prompt_tokens"] for r in rows.values()) / 6, abs=1e-6)
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
    from purecover.stages import execute_stage

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

    from purecover.eval.rag_prompt import RagPrompt
    from purecover.stages import execute_stage

    recipe, _ = evaluated
    ours = json.loads((recipe.run_path / "eval" / "metrics.json").read_text())
    assert ours["answer_prompt"] == RagPrompt.default().record() and ours["answer_prompt"]["file"] == "rag_answer.txt"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
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


def test_killed_evaluation_resumes_to_identical_outputs(tmp_path, sample_file, tiny_generator_dir, evaluated):
    """SIGKILL during generation, rerun: same predictions as the uninterrupted run, no duplicates."""
    recipe, _ = evaluated
    run_dir = tmp_path / "run"
    run_dir.mkdir()
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
    from purecover.eval.job import parse_methods

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

    from purecover.eval.job import run_evaluate_stage

    recipe, _ = evaluated
    run_dir = tmp_path / "run"
    run_dir.mkdir()
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
