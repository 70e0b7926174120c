"""The evaluate stage: methods × budgets → selections → RAG answers → QA and selection metrics (Coverage@K,
Purity@K, CRUX Cov, α-nDCG@K, subtopic recall@K), report, plots.

    purecover evaluate RECIPE [--set ...]

Evaluation questions (``eval.path``, ``eval.questions``):

* ``eval.path`` set: the questions of that file or Hub dataset (``eval.split``, ``eval.limit``, and the
  seeded random ``eval.sample`` / ``eval.seed``, drawn before retrieval),
  retrieved with the recipe's data settings into the test set's own run directory,
  ``run_dir/test/candidates.jsonl`` (the data stage, resumable); the student selects them into
  ``run_dir/test/selections.jsonl``, and ``label --test-set`` labels them there.
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
``predictions/<method>@<K>.jsonl`` (one `purecover.records.PredictionRecord` per question: ``{qid, prediction,
...}``, readable by ``purecover score``), ``metrics.json`` (a `purecover.records.MetricsFile`), ``report.md`` and
``plots/*.png``. A rerun regenerates
nothing that is cached; everything else is recomputed from the cache and rewritten atomically.

The stage body is here; which questions (`purecover.eval.questions`), what each method selects
(`purecover.eval.method_selection`), the methods' mini-language (`purecover.eval.methods`) and the answer
generator (`purecover.eval.generator`) each have their own module.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..config import Recipe, recipe_to_dict
from ..contract import StageRun
from ..models.prompt_tokens import encode_prompt
from ..records import (
    BudgetResult,
    CandidateRecord,
    CruxCoverage,
    EvaluateSummary,
    EvaluationStatistics,
    MetricsFile,
    PredictionRecord,
    QuestionSample,
    StageSummary,
)
from ..rundir import FILES, RunDir
from ..utils.io import atomic_write_json, atomic_write_text, ensure_output_dir, write_jsonl_atomic
from ..utils.provenance import package_versions
from .generation_cache import GenerationCache, prompt_key
from .generator import generator_id, generator_loader, load_generator_tokenizer
from .method_selection import method_labels, select_for_methods
from .methods import EMBEDDING_METHODS, MethodSpec, parse_methods
from .qa_metrics import score_prediction
from .questions import check_budgets, evaluation_questions
from .rag_prompt import RagPrompt, render_qa_prompt
from .selection_metrics import QuestionSelection, question_selection, summarize_selection
from .subtopic_metrics import ALPHA, subtopic_unit

log = logging.getLogger(__name__)

__all__ = ["EMBEDDING_METHODS", "EVAL_DIR", "MethodSpec", "parse_methods", "run_evaluate_stage"]

EVAL_DIR = FILES["eval"]
VLLM_CHUNK = 512  # prompts per vLLM generate call


# --------------------------------------------------------------------------- metrics


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(sum(kept) / len(kept), 6) if kept else None


def _aggregate(rows: Sequence[PredictionRecord], selection_rows: Sequence[QuestionSelection],
               select_ms: float | None) -> BudgetResult:
    """Means over questions: QA scores and tokens from `rows`, coverage/purity via `summarize_selection`; the
    method's selection time per question `select_ms`."""
    selection = summarize_selection(selection_rows)
    return BudgetResult(
        n=len(rows),
        em=_mean([r.em for r in rows]),
        f1=_mean([r.f1 for r in rows]),
        acc=_mean([r.acc for r in rows]),
        mean_k=selection.mean_k,
        answer=selection.answer,
        supporting=selection.supporting,
        crux=selection.crux,
        subtopics=selection.subtopics,
        prompt_tokens=_mean([r.prompt_tokens for r in rows]),
        completion_tokens=_mean([r.completion_tokens for r in rows]),
        select_ms=select_ms,
    )


def _main_budget(table_budget: int, budgets: Sequence[int]) -> str:
    """The report's main budget K as results key it: eval.table_budget, else the largest budget."""
    return str(table_budget if table_budget in budgets else budgets[-1])


def _dataset(question: CandidateRecord, recipe: Recipe) -> str:
    """The dataset whose prompt and scoring rules apply to `question` (its own, else data.dataset)."""
    return question.dataset or recipe.data.dataset


def run_evaluate_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Evaluate every method at every budget; returns the summary also written to ``evaluate.run.json`` (an
    `EvaluateSummary`; a complete stage's stored one when it is skipped)."""
    from ..contract import run_stage

    return run_stage("evaluate", recipe, show_progress)


def evaluate_methods(run: StageRun) -> EvaluateSummary:
    """The evaluate stage's body: every method at every budget, answered and scored."""
    from .stats import annotate_results

    recipe, show_progress = run.recipe, run.show_progress
    cfg = recipe.eval
    specs = parse_methods(cfg.methods)
    budgets = check_budgets(cfg.budgets)
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    eval_dir = rd.path_of("eval")  # evaluate's own outputs
    test_dir = rd.test_set().path  # the test set's run directory (eval.path)
    ensure_output_dir(eval_dir)

    questions, source, sample = evaluation_questions(recipe, test_dir, show_progress)
    chosen, fallbacks, select_ms = select_for_methods(specs, budgets, questions, recipe, test_dir, show_progress)
    # The teacher's LANCER ratings, when labelling rated the candidates: CRUX coverage of every method.
    ratings = {qid: rec.ratings for qid, rec in method_labels(recipe, test_dir, MethodSpec("teacher", "teacher")).items()
               if rec.ratings is not None}
    # α-nDCG@K / subtopic recall@K: gold passages counted as the data stage made them (paragraphs or titles)
    unit = subtopic_unit(recipe.data.corpus)
    if recipe.data.dataset == "coverage":  # topics without answers: the selections are scored for coverage only
        return _evaluate_coverage(run, specs, budgets, questions, source, sample, chosen, fallbacks, ratings,
                                  select_ms)

    tokenizer = load_generator_tokenizer(recipe)
    generator_key = generator_id(recipe)
    answer_prompt = RagPrompt.from_config(cfg)  # ours, or eval.prompt_file's parts over ours
    prompts: dict[str, str] = {}
    keys: dict[tuple[str, int], list[str]] = {}
    for (name, k), rows in chosen.items():
        keys[(name, k)] = []
        for q, positions in zip(questions, rows):
            text = render_qa_prompt(tokenizer, q.question, [q.docs[i] for i in positions], _dataset(q, recipe),
                                    answer_prompt)
            key = prompt_key(generator_key, cfg.max_new_tokens, text)
            prompts[key] = text
            keys[(name, k)].append(key)

    def count_tokens(text: str) -> int:
        return len(encode_prompt(tokenizer, text)[0])

    with GenerationCache(eval_dir / "generations.jsonl") as cache:
        # vLLM schedules its own batches: hand it large chunks (each chunk is one resumable unit)
        chunk = cfg.batch_size if cfg.backend == "hf" else max(cfg.batch_size, VLLM_CHUNK)
        gen_stats = cache.fill(prompts, generator_loader(recipe, tokenizer, show_progress), count_tokens,
                               cfg.max_new_tokens, chunk, show_progress)
        repaired = cache.repaired
        results: dict[str, dict[str, BudgetResult]] = {}
        question_scores: dict[tuple[str, str], dict[str, list[float]]] = {}  # (method, K) -> metric -> per question
        pred_dir = eval_dir / "predictions"
        pred_dir.mkdir(exist_ok=True)
        for spec in specs:
            per_k: dict[str, BudgetResult] = {}
            for k in budgets:
                rows: list[PredictionRecord] = []
                selection_rows: list[QuestionSelection] = []
                for q, positions, key in zip(questions, chosen[(spec.name, k)], keys[(spec.name, k)]):
                    gen = cache[key]
                    scores = score_prediction(_dataset(q, recipe), gen.prediction, q.answers)
                    sel = question_selection(q, positions, ratings.get(q.qid), k=k, unit=unit, alpha=ALPHA)
                    selection_rows.append(sel)
                    rows.append(PredictionRecord(
                        qid=q.qid, prediction=gen.prediction, method=spec.name, k=k, selected=positions,
                        doc_ids=[q.docs[i].doc_id for i in positions], prompt_key=key,
                        prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens, **scores,
                        answer_coverage=sel.answer_coverage, answer_purity=sel.answer_purity,
                        support_coverage=sel.support_coverage, support_purity=sel.support_purity,
                        crux_coverage=sel.crux_coverage, alpha_ndcg=sel.alpha_ndcg,
                        subtopic_recall=sel.subtopic_recall))
                write_jsonl_atomic(pred_dir / f"{spec.slug}@{k}.jsonl", [r.to_json_dict() for r in rows])
                per_k[str(k)] = _aggregate(rows, selection_rows, select_ms.get(spec.name))
                question_scores[(spec.name, str(k))] = {"em": [r.em for r in rows], "f1": [r.f1 for r in rows],
                                                        "acc": [r.acc for r in rows]}
            results[spec.name] = per_k

    datasets = sorted({_dataset(q, recipe) for q in questions})
    # bootstrap intervals (`ci`), paired tests against retrieval at the same K (`vs_retrieval`) and at the main
    # budget (`vs_reference`) added to each result
    annotated, statistics = annotate_results(results, question_scores, seed=recipe.seed,
                                             reference_k=_main_budget(cfg.table_budget, budgets))
    dataset = datasets[0] if len(datasets) == 1 else "+".join(datasets)
    metrics, plots = _write_metrics_and_report(recipe, dataset, questions, source, sample, specs, budgets,
                                               answer_prompt, fallbacks, annotated, statistics)

    main_k = _main_budget(cfg.table_budget, budgets)
    summary = EvaluateSummary(
        status="complete",
        questions=len(questions),
        methods=[s.name for s in specs],
        budgets=budgets,
        prompts=len(prompts),
        generated=gen_stats.generated,
        cached=gen_stats.cached,
        repaired_lines=repaired,
        prompts_per_second=gen_stats.prompts_per_second,
        report=str(rd.path_of("report")),
        metrics=str(rd.path_of("metrics")),
        plots=[str(p) for p in plots],
        # the mean EM of every method at the report's main budget, written after prompts_per_second
        **{f"em@{main_k}": {name: res[main_k].em for name, res in results.items()}},
    )

    def track(summary: StageSummary) -> None:
        from ..utils.tracking import track_stage  # no-op unless tracking.report_to is wandb
        from .report import metrics_table

        track_stage(recipe, "evaluate", summary.to_json_dict(), tables={"metrics": metrics_table(metrics)})

    run.after_complete.append(track)
    return summary


def _evaluate_coverage(run: StageRun, specs: Sequence[MethodSpec], budgets: list[int],
                       questions: Sequence[CandidateRecord], source: str, sample: QuestionSample | None,
                       chosen: dict[tuple[str, int], list[list[int]]], fallbacks: dict[str, int],
                       ratings: dict, select_ms: dict[str, float | None]) -> EvaluateSummary:
    """The evaluate stage on a coverage collection (``data.dataset: coverage``): no answer is generated (a topic
    has no gold answer). Every method's selection at every budget is scored with the topic's nuggets as
    subtopics (α-nDCG@K, subtopic recall@K; `purecover.eval.subtopic_metrics`, ``nugget``), Coverage@K and
    Purity@K against the passages the qrels judge relevant, CRUX coverage from the teacher's LANCER ratings
    when labelling rated the candidates, and CRUX's Cov@K from the collection's judge file (``eval.judgments``);
    each selection is written as a TREC run, ``eval/runs/<method>@<K>.trec``,
    for `purecover score-run` (the field's tools, bootstrap intervals, paired tests)."""
    from ..utils.trec import trec_run_lines
    from .coverage_collections import read_judgments, read_nugget_qrels
    from .coverage_scoring import cov_at
    from .stats import BASELINE, statistics_meta

    recipe = run.recipe
    rd = RunDir(recipe.run_path)
    eval_dir = rd.path_of("eval")
    assert recipe.data.qrels is not None  # the data section's check
    qrels = read_nugget_qrels(recipe.data.qrels)
    judgments = read_judgments(recipe.eval.judgments) if recipe.eval.judgments else None
    runs_dir = eval_dir / "runs"
    ensure_output_dir(runs_dir)
    results: dict[str, dict[str, BudgetResult]] = {}
    for spec in specs:
        per_k: dict[str, BudgetResult] = {}
        for k in budgets:
            rows = [question_selection(q, positions, ratings.get(q.qid), k=k, unit="nugget", alpha=ALPHA,
                                       judged=qrels.get(q.qid, {}))
                    for q, positions in zip(questions, chosen[(spec.name, k)])]
            lines = [line for q, positions in zip(questions, chosen[(spec.name, k)])
                     for line in trec_run_lines(q.qid, [(str(q.docs[i].doc_id), float(len(positions) - r))
                                                        for r, i in enumerate(positions)], spec.slug)]
            atomic_write_text(runs_dir / f"{spec.slug}@{k}.trec", "".join(line + "\n" for line in lines))
            selection = summarize_selection(rows)
            judged = None
            if judgments is not None:  # CRUX's Cov@K over the topics the judge file rates
                values = [cov_at([str(q.docs[i].doc_id) for i in positions], judgments[q.qid], k)
                          for q, positions in zip(questions, chosen[(spec.name, k)]) if judgments.get(q.qid)]
                kept = [v for v in values if v is not None]
                judged = CruxCoverage(coverage=round(sum(kept) / len(kept), 6) if kept else None, n=len(kept))
            per_k[str(k)] = BudgetResult(n=len(rows), em=None, f1=None, acc=None, mean_k=selection.mean_k,
                                         answer=selection.answer, supporting=selection.supporting,
                                         crux=selection.crux, judged=judged, subtopics=selection.subtopics,
                                         prompt_tokens=None, completion_tokens=None,
                                         select_ms=select_ms.get(spec.name))
        results[spec.name] = per_k
    cfg = recipe.eval
    _, plots = _write_metrics_and_report(recipe, "coverage", questions, source, sample, specs, budgets,
                                         RagPrompt.from_config(cfg), fallbacks, results,
                                         statistics_meta(recipe.seed, BASELINE in results))
    main_k = _main_budget(cfg.table_budget, budgets)
    return EvaluateSummary(
        status="complete", questions=len(questions), methods=[s.name for s in specs], budgets=budgets, prompts=0,
        generated=0, cached=0, repaired_lines=0, prompts_per_second=None, report=str(rd.path_of("report")),
        metrics=str(rd.path_of("metrics")), plots=[str(p) for p in plots],
        **{f"em@{main_k}": {name: None for name in results}},
    )


def _write_metrics_and_report(recipe: Recipe, dataset: str, questions: Sequence[CandidateRecord], source: str,
                              sample: QuestionSample | None, specs: Sequence[MethodSpec], budgets: list[int],
                              answer_prompt: RagPrompt, fallbacks: dict[str, int],
                              results: dict[str, dict[str, BudgetResult]], statistics: EvaluationStatistics
                              ) -> tuple[MetricsFile, list[Path]]:
    """Write eval/metrics.json, the plots and eval/report.md of an evaluation; returns the metrics and the plots."""
    from .report import plot_metrics, render_report

    cfg = recipe.eval
    rd = RunDir.of(recipe)
    eval_dir = rd.path_of("eval")
    metrics = MetricsFile(
        dataset=dataset,
        run_dir=str(recipe.run_path),
        questions=len(questions),
        question_source=source,
        question_sample=sample,
        generator=cfg.generator,
        backend=cfg.backend,
        max_new_tokens=cfg.max_new_tokens,
        answer_prompt=answer_prompt.record(),
        budgets=budgets,
        table_budget=cfg.table_budget,
        methods={s.name: s.kind for s in specs},
        fallbacks=fallbacks,
        results=results,
        statistics=statistics,
        versions=package_versions(),
        recipe=recipe_to_dict(recipe),
    )
    atomic_write_json(rd.path_of("metrics"), metrics.to_json_dict())
    plots = plot_metrics(metrics, eval_dir / "plots")
    atomic_write_text(rd.path_of("report"), render_report(metrics, plots=[p.relative_to(eval_dir) for p in plots]))
    return metrics, plots
