"""The evaluate stage: methods × budgets → selections → RAG answers → QA and selection metrics, report, plots.

    purecover evaluate RECIPE [--set ...]

Evaluation questions (``eval.path``, ``eval.questions``):

* ``eval.path`` set: the questions of that file or Hub dataset (``eval.split``, ``eval.limit``, and the
  seeded random ``eval.sample`` / ``eval.seed``, drawn before retrieval),
  retrieved with the recipe's data settings into ``run_dir/eval/candidates.jsonl`` (the data stage,
  resumable); the student selects them into ``run_dir/eval/selections.jsonl``.
* otherwise the questions of ``run_dir/candidates.jsonl``: with ``eval.questions: heldout`` (the
  default) only the student's held-out split (the hash split of ``student.eval_fraction``), so the
  student is never scored on questions it was trained on; ``all`` takes every question.

Methods (``eval.methods``): the baselines of `purecover.eval.baselines` (``retrieval``,
``cross_encoder``, ``mmr``, ``xquad``, ``ia_select``, ``lancer_*``, ``teacher``, ``student``),
``none`` (closed book, no passage), and ``teacher:DIR`` / ``student:DIR`` for the labels or
selections of another run directory (e.g. an ablation's), and ``selections:PATH=name`` for any external
reranker's selections (a JSONL of ``{qid, selected?, selected_doc_ids?}`` or a TREC run file,
`purecover.eval.external`), shown as ``name`` (default: the file stem). Each method picks at most K
passages for every budget K of ``eval.budgets``; ``teacher``, ``student`` and ``selections:`` keep
their own set, cut to K (a TREC run: its top K by rank).

Outputs in ``run_dir/eval/``: ``generations.jsonl`` (the cache, keyed by prompt hash),
``predictions/<method>@<K>.jsonl`` (one record per question: ``{qid, prediction, ...}``, readable by
``purecover score``), ``metrics.json``, ``report.md`` and ``plots/*.png``. A rerun regenerates
nothing that is cached; everything else is recomputed from the cache and rewritten atomically.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..config import Recipe, recipe_to_dict
from ..data.candidates import read_candidates
from ..rundir import FILES, RunDir
from ..stages import StageRun
from ..utils.io import atomic_write_json, atomic_write_text, ensure_output_dir, read_jsonl, write_jsonl_atomic
from ..utils.provenance import package_versions
from .baselines import BaselineSelector, make_baseline
from .external import read_external_selections
from .generation_cache import GenerationCache, prompt_key
from .methods import EMBEDDING_METHODS, EXTERNAL, NO_RETRIEVAL, MethodSpec, parse_methods
from .qa_metrics import score_prediction
from .rag_prompt import render_qa_prompt
from .selection_metrics import question_selection, summarize_selection

log = logging.getLogger(__name__)

__all__ = ["EMBEDDING_METHODS", "EVAL_DIR", "MethodSpec", "parse_methods", "run_evaluate_stage"]

EVAL_DIR = FILES["eval"]
VLLM_CHUNK = 512  # prompts per vLLM generate call
_NEEDS_LABELS = ("teacher", "lancer_sum", "lancer_rrf", "lancer_greedy_sum", "lancer_greedy_cov",
                 "lancer_greedy_alpha")
_OPTIONAL_LABELS = ("xquad", "ia_select")  # subtopics from the teacher's steps when labels exist


def _check_budgets(budgets: Sequence[int]) -> list[int]:
    if not budgets:
        raise ValueError("eval.budgets is empty")
    for k in budgets:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"eval.budgets: {k!r} is not an integer ≥ 1")
    return sorted(set(budgets))


# --------------------------------------------------------------------------- inputs


def _questions(recipe: Recipe, eval_dir: Path,
               show_progress: bool) -> tuple[list[dict[str, Any]], str, dict[str, Any] | None]:
    """The evaluation questions (candidates records), a description of where they came from, and the
    record of the seeded sample (``{size, seed, population, population_source}``; None without ``eval.sample``).

    Order: the held-out filter (without ``eval.path``), then ``eval.limit`` (the first N), then
    ``eval.sample`` (`purecover.data.splits.sample_questions`). With ``eval.path`` the data stage
    already drew the sample before retrieval (`evaluation_recipe`); drawing it again here is a no-op
    (samples are nested) that guards against a candidates file of another sample.
    """
    from ..data.splits import sample_questions

    cfg = recipe.eval
    if cfg.path:
        from ..data.candidates import evaluation_recipe, run_data_stage

        run_data_stage(evaluation_recipe(recipe), show_progress=show_progress)
        rd = RunDir(eval_dir)
        path = rd.path_of("candidates")
        records = read_candidates(path)
        source = f"{cfg.path} (split {cfg.split}) → {path}"
        population = ((rd.manifest("data") or {}).get("summary") or {}).get("sampled_from") or len(records)
        population_source = f"{cfg.path} (split {cfg.split}" + (f", first {cfg.limit}" if cfg.limit else "") + ")"
    else:
        path = RunDir.of(recipe).path_of("candidates")
        records = read_candidates(path)
        source = f"{path} (all questions)"
        if cfg.questions == "heldout":
            from ..data.splits import question_split  # the student's own split rule

            frac, share = recipe.student.eval_fraction, recipe.student.calibration_share
            records = [r for r in records if question_split(r["qid"], frac, share, recipe.seed) == "test"]
            source = (f"{path} (the student's test split: held out from training and from τ3, "
                      f"student.eval_fraction={frac}, student.calibration_share={share})")
            if not records:
                raise ValueError(f"no question of {path} falls in the student's test split (student.eval_fraction="
                                 f"{frac}, student.calibration_share={share}); set eval.questions=all, raise "
                                 "student.eval_fraction, lower student.calibration_share, or set eval.path to a "
                                 "test set")
        if cfg.limit is not None:
            records = records[: cfg.limit]
            source += f", first {cfg.limit}"
        population, population_source = len(records), source
    if cfg.sample is None:
        return records, source, None
    if cfg.sample > population:
        raise ValueError(f"eval.sample: cannot sample {cfg.sample} questions from the {population} of "
                         f"{population_source}; lower eval.sample or set it to null (every question)")
    records = sample_questions(records, cfg.sample, cfg.seed, key="eval.sample")
    sample = {"size": len(records), "seed": cfg.seed, "population": population, "population_source": population_source}
    return records, f"a random sample of {len(records)} (eval.seed {cfg.seed}) of {population} questions: {source}", sample


def _read_by_qid(path: Path) -> dict[str, dict[str, Any]]:
    return {str(rec["qid"]): rec for _, rec in read_jsonl(path)} if path.is_file() else {}


def _labels(recipe: Recipe, eval_dir: Path, spec: MethodSpec) -> dict[str, dict[str, Any]]:
    if spec.source is not None:
        path = spec.source / "labels.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"method {spec.name}: {path} does not exist")
        return _read_by_qid(path)
    return {**_read_by_qid(RunDir.of(recipe).path_of("labels")), **_read_by_qid(RunDir(eval_dir).path_of("labels"))}


def _selections(recipe: Recipe, eval_dir: Path, spec: MethodSpec, show_progress: bool) -> dict[str, dict[str, Any]]:
    if spec.source is not None:
        path = spec.source / "selections.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"method {spec.name}: {path} does not exist")
        return _read_by_qid(path)
    # The select stage writes them (`purecover evaluate` and the pipeline run it first).
    rd = RunDir(eval_dir if recipe.eval.path else recipe.run_path)
    path = rd.path_of("selections")
    manifest = rd.manifest("select") or {}
    if not path.is_file() or (manifest.get("summary") or {}).get("status") != "complete":
        raise FileNotFoundError(f"method {spec.name}: {path} is missing or incomplete: run `purecover select RECIPE` "
                                "first (`purecover evaluate` and `purecover pipeline` run it for you)")
    return _read_by_qid(path)


def _require(records: dict[str, dict[str, Any]], questions: Sequence[dict[str, Any]], spec: MethodSpec,
             what: str, remedy: str) -> None:
    missing = [q["qid"] for q in questions if q["qid"] not in records]
    if missing:
        raise ValueError(f"method {spec.name}: {len(missing)} of {len(questions)} evaluation questions have no "
                         f"{what} (first: {', '.join(missing[:3])}); {remedy}")


# --------------------------------------------------------------------------- selection


def _make_selector(spec: MethodSpec, recipe: Recipe, embedder: Any) -> BaselineSelector | None:
    if spec.kind == NO_RETRIEVAL:
        return None
    kwargs: dict[str, Any] = {}
    if spec.kind in EMBEDDING_METHODS:
        kwargs["embedder"] = embedder
    if spec.kind in ("xquad", "ia_select"):
        kwargs["subtopics"] = recipe.eval.subtopics
    if spec.kind == "cross_encoder":
        kwargs["model_name"] = recipe.eval.cross_encoder
    if spec.kind == EXTERNAL:  # stored selections cut to K: the student's baseline reads them
        return make_baseline("student")
    return make_baseline(spec.kind, **kwargs)


def _select_all(specs: Sequence[MethodSpec], budgets: Sequence[int], questions: Sequence[dict[str, Any]],
                recipe: Recipe, eval_dir: Path, show_progress: bool) -> tuple[dict[tuple[str, int], list[list[int]]],
                                                                            dict[str, int]]:
    """Selected positions per (method name, K), one list per question; and fallback counts per method."""
    embedder = None
    if any(s.kind in EMBEDDING_METHODS for s in specs):
        from ..data.retrieval.dense import load_sentence_transformer

        embedder = load_sentence_transformer(recipe.eval.embedding_model)
    chosen: dict[tuple[str, int], list[list[int]]] = {}
    fallbacks: dict[str, int] = {}
    labels_by_source: dict[Path | None, dict[str, dict[str, Any]]] = {}  # each labels file is read once
    for spec in specs:
        labels: dict[str, dict[str, Any]] = {}
        selections: dict[str, dict[str, Any]] = {}
        if spec.kind in _NEEDS_LABELS or spec.kind in _OPTIONAL_LABELS:
            if spec.source not in labels_by_source:
                labels_by_source[spec.source] = _labels(recipe, eval_dir, spec)
            labels = labels_by_source[spec.source]
            if spec.kind in _NEEDS_LABELS:
                _require(labels, questions, spec, "teacher label",
                         "run `purecover label RECIPE` on them (with eval.path: `purecover calibrate RECIPE "
                         "--test-set` when calibrating, then `purecover label RECIPE --test-set`) or drop the method")
        if spec.kind == "student":
            selections = _selections(recipe, eval_dir, spec, show_progress)
            _require(selections, questions, spec, "student selection", "run `purecover select` on them")
        if spec.kind == EXTERNAL:  # positions resolved against these questions' candidates
            assert spec.source is not None
            selections = read_external_selections(spec.source, questions, spec.name)
            _require(selections, questions, spec, f"selection in {spec.source}",
                     "add them to the file (e.g. `purecover select --selector DIR --input ... --out ...`)")
        selector = _make_selector(spec, recipe, embedder)
        if hasattr(selector, "prepare"):
            selector.prepare(questions)  # one batched embedding call instead of one per question
        for k in budgets:
            rows = []
            for q in tqdm(questions, desc=f"select {spec.name}@{k}", unit="q", disable=not show_progress,
                          leave=False):
                if selector is None or not q["docs"]:
                    rows.append([])
                    continue
                rows.append(selector.select(q, labels.get(q["qid"]), selections.get(q["qid"]), k))
            chosen[(spec.name, k)] = rows
            if k == budgets[0]:  # count questions once, not once per budget
                fallbacks[spec.name] = int(getattr(selector, "fallback_count", 0) or 0)
    return chosen, fallbacks


# --------------------------------------------------------------------------- generation


def _load_tokenizer(recipe: Recipe) -> Any:
    from ..models.loading import load_tokenizer

    return load_tokenizer(recipe.eval.generator, trust_remote_code=recipe.eval.trust_remote_code)


def _backend_loader(recipe: Recipe, tokenizer: Any, show_progress: bool) -> Any:
    cfg = recipe.eval

    def load() -> Any:
        from ..models.generation import make_generator

        if cfg.backend == "vllm":
            return make_generator("vllm", model_name=cfg.generator, tensor_parallel_size=cfg.tensor_parallel_size,
                                  dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code, seed=recipe.seed)
        from ..models.loading import load_causal_lm

        model = load_causal_lm(cfg.generator, dtype=cfg.dtype, device=cfg.device,
                               trust_remote_code=cfg.trust_remote_code)
        return make_generator("hf", model=model, tokenizer=tokenizer, batch_size=cfg.batch_size)

    return load


def _generator_id(recipe: Recipe) -> str:
    """What identifies the generator in cache keys: its name, plus a fingerprint of local weights."""
    name = recipe.eval.generator
    local = Path(name)
    if local.is_dir():
        h = hashlib.sha256()
        for p in sorted(local.glob("*.safetensors")) + sorted(local.glob("config.json")):
            h.update(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())
        return f"{local.resolve()}#{h.hexdigest()[:12]}"
    return name


# --------------------------------------------------------------------------- metrics


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(sum(kept) / len(kept), 6) if kept else None


def _aggregate(rows: Sequence[dict[str, Any]], selection_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over questions: QA scores and tokens from `rows`, coverage/purity via `summarize_selection`."""
    selection = summarize_selection(selection_rows)
    return {
        "n": len(rows),
        "em": _mean([r["em"] for r in rows]),
        "f1": _mean([r["f1"] for r in rows]),
        "acc": _mean([r["acc"] for r in rows]),
        "mean_k": selection["mean_k"],
        "answer": selection["answer"],
        "supporting": selection["supporting"],
        "crux": selection["crux"],
        "prompt_tokens": _mean([r["prompt_tokens"] for r in rows]),
        "completion_tokens": _mean([r["completion_tokens"] for r in rows]),
    }


def run_evaluate_stage(recipe: Recipe, show_progress: bool = True) -> dict[str, Any]:
    """Evaluate every method at every budget; returns the summary also written to ``evaluate.run.json``."""
    from ..stages import run_stage

    return run_stage("evaluate", recipe, show_progress)


def evaluation_inputs(recipe: Recipe) -> dict[str, Path]:
    """What the evaluate stage reads, by name: the candidates, labels and selections of run_dir and of the test
    set (run_dir/eval), and every other run's labels or selections and every selections file eval.methods
    names. A complete evaluation is redone when one of them changed."""
    rd = RunDir.of(recipe)
    places = [rd] + ([RunDir(rd.path_of("eval"))] if recipe.eval.path else [])
    found: dict[str, Path] = {}
    for place in places:
        for key in ("candidates", "labels", "selections"):
            path = place.path_of(key)
            found[str(path.relative_to(rd.path))] = path
    for spec in parse_methods(recipe.eval.methods):
        if spec.source is None:
            continue
        if spec.kind == "selections":
            found[f"eval.methods[{spec.name}]"] = spec.source
        else:
            need = "labels.jsonl" if spec.kind == "teacher" else "selections.jsonl"
            found[f"eval.methods[{spec.name}]"] = spec.source / need
    return found


def evaluate_methods(run: StageRun) -> dict[str, Any]:
    """The evaluate stage's body: every method at every budget, answered and scored."""
    from .report import plot_metrics, render_report
    from .stats import annotate_results

    recipe, show_progress = run.recipe, run.show_progress
    cfg = recipe.eval
    specs = parse_methods(cfg.methods)
    budgets = _check_budgets(cfg.budgets)
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    eval_dir = rd.path_of("eval")
    ensure_output_dir(eval_dir)

    questions, source, sample = _questions(recipe, eval_dir, show_progress)
    chosen, fallbacks = _select_all(specs, budgets, questions, recipe, eval_dir, show_progress)
    # The teacher's LANCER ratings, when labelling rated the candidates: CRUX coverage of every method.
    ratings = {qid: rec["ratings"] for qid, rec in _labels(recipe, eval_dir, MethodSpec("teacher", "teacher")).items()
               if rec.get("ratings") is not None}

    tokenizer = _load_tokenizer(recipe)
    generator_id = _generator_id(recipe)
    prompts: dict[str, str] = {}
    keys: dict[tuple[str, int], list[str]] = {}
    for (name, k), rows in chosen.items():
        keys[(name, k)] = []
        for q, positions in zip(questions, rows):
            text = render_qa_prompt(tokenizer, q["question"], [q["docs"][i] for i in positions],
                                    q.get("dataset", recipe.data.dataset))
            key = prompt_key(generator_id, cfg.max_new_tokens, text)
            prompts[key] = text
            keys[(name, k)].append(key)

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    with GenerationCache(eval_dir / "generations.jsonl") as cache:
        # vLLM schedules its own batches: hand it large chunks (each chunk is one resumable unit)
        chunk = cfg.batch_size if cfg.backend == "hf" else max(cfg.batch_size, VLLM_CHUNK)
        gen_stats = cache.fill(prompts, _backend_loader(recipe, tokenizer, show_progress), count_tokens,
                               cfg.max_new_tokens, chunk, show_progress)
        repaired = cache.repaired
        results: dict[str, dict[str, Any]] = {}
        question_scores: dict[tuple[str, str], dict[str, list[float]]] = {}  # (method, K) -> metric -> per question
        pred_dir = eval_dir / "predictions"
        pred_dir.mkdir(exist_ok=True)
        for spec in specs:
            per_k: dict[str, Any] = {}
            for k in budgets:
                rows, selection_rows = [], []
                for q, positions, key in zip(questions, chosen[(spec.name, k)], keys[(spec.name, k)]):
                    gen = cache[key]
                    scores = score_prediction(q.get("dataset", recipe.data.dataset), gen["prediction"], q["answers"])
                    sel = question_selection(q, positions, ratings.get(q["qid"]))
                    selection_rows.append(sel)
                    rows.append({"qid": q["qid"], "prediction": gen["prediction"], "method": spec.name, "k": k,
                                 "selected": positions, "doc_ids": [q["docs"][i].get("doc_id") for i in positions],
                                 "prompt_key": key, "prompt_tokens": gen["prompt_tokens"],
                                 "completion_tokens": gen["completion_tokens"], **scores,
                                 **{f: sel[f] for f in ("answer_coverage", "answer_purity", "support_coverage",
                                                        "support_purity", "crux_coverage")}})
                write_jsonl_atomic(pred_dir / f"{spec.slug}@{k}.jsonl", rows)
                per_k[str(k)] = _aggregate(rows, selection_rows)
                question_scores[(spec.name, str(k))] = {m: [r[m] for r in rows] for m in ("em", "f1", "acc")}
            results[spec.name] = per_k

    datasets = sorted({str(q.get("dataset", recipe.data.dataset)) for q in questions})
    metrics = {
        "dataset": datasets[0] if len(datasets) == 1 else "+".join(datasets),
        "run_dir": str(run_dir),
        "questions": len(questions),
        "question_source": source,
        "question_sample": sample,  # {size, seed, population, population_source}; null without eval.sample
        "generator": cfg.generator,
        "backend": cfg.backend,
        "max_new_tokens": cfg.max_new_tokens,
        "budgets": budgets,
        "table_budget": cfg.table_budget,
        "methods": {s.name: s.kind for s in specs},
        "fallbacks": fallbacks,
        "results": results,
        # bootstrap intervals (`ci`) and paired tests against retrieval (`vs_retrieval`) added to `results`
        "statistics": annotate_results(results, question_scores, seed=recipe.seed),
        "versions": package_versions(),
        "recipe": recipe_to_dict(recipe),
    }
    atomic_write_json(rd.path_of("metrics"), metrics)
    plots = plot_metrics(metrics, eval_dir / "plots")
    atomic_write_text(rd.path_of("report"), render_report(metrics, plots=[p.relative_to(eval_dir) for p in plots]))

    main_k = str(cfg.table_budget if cfg.table_budget in budgets else budgets[-1])
    summary = {
        "status": "complete",
        "questions": len(questions),
        "methods": [s.name for s in specs],
        "budgets": budgets,
        "prompts": len(prompts),
        "generated": gen_stats["generated"],
        "cached": gen_stats["cached"],
        "repaired_lines": repaired,
        "prompts_per_second": gen_stats["prompts_per_second"],
        f"em@{main_k}": {name: res[main_k]["em"] for name, res in results.items()},
        "report": str(rd.path_of("report")),
        "metrics": str(rd.path_of("metrics")),
        "plots": [str(p) for p in plots],
    }

    def track(summary: dict[str, Any]) -> None:
        from ..utils.tracking import track_stage  # no-op unless tracking.report_to is wandb
        from .report import metrics_table

        track_stage(recipe, "evaluate", summary, tables={"metrics": metrics_table(metrics)})

    run.after_complete.append(track)
    return summary
