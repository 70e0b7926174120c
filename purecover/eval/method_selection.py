"""What every method of ``eval.methods`` selects for every question at every budget.

Baselines select from the candidates (`purecover.eval.baselines`); ``teacher`` and the LANCER methods read
the teacher's labels, ``student`` the select stage's selections, ``selections:PATH`` an external
reranker's file. The labels and selections of the test set live in its own run directory
(`purecover.rundir.RunDir.test_set`). Labels are checked line by line as `purecover.records.LabelRecord`s and
the select stage's selections as `purecover.records.SelectionRecord`s (errors name file, line and field); an
external file keeps its own, more lenient, reader (`purecover.eval.external`).
"""

from __future__ import annotations

import time
from collections.abc import Container, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from ..config import Recipe
from ..records import CandidateRecord, LabelRecord, LineRecordError, SelectionRecord, validate_line
from ..rundir import RunDir
from ..utils.io import read_jsonl
from ..utils.progress import tqdm
from .baselines import BaselineSelector, StoredSelection, make_baseline
from .external import read_external_selections
from .methods import EMBEDDING_METHODS, EXTERNAL, NO_RETRIEVAL, MethodSpec

__all__ = ["method_labels", "select_for_methods"]

_NEEDS_LABELS = ("teacher", "lancer_sum", "lancer_rrf", "lancer_greedy_sum", "lancer_greedy_cov",
                 "lancer_greedy_alpha")
_OPTIONAL_LABELS = ("xquad", "ia_select")  # subtopics from the teacher's steps when labels exist
_TRAINS_ON_LABELS = ("cross_encoder_ft",)  # fine-tuned on the run's labels of the student's training questions
_NOTHING_TO_SELECT = ("retrieval", "gold_support", NO_RETRIEVAL)  # nothing beyond the shared retrieval: 0 ms

R = TypeVar("R", LabelRecord, SelectionRecord)


def _read_by_qid(path: Path, record: type[R]) -> dict[str, R]:
    """qid -> line of the JSONL `path` (none when it does not exist), each line checked as a `record`; a
    repeated qid is an error naming its line."""
    if not path.is_file():
        return {}
    out: dict[str, R] = {}
    for lineno, line in read_jsonl(path):
        rec = validate_line(record, line, path, lineno)
        if rec.qid in out:
            raise LineRecordError(path, lineno, "qid", f"duplicate {rec.qid!r}")
        out[rec.qid] = rec
    return out


def method_labels(recipe: Recipe, test_dir: Path, spec: MethodSpec) -> dict[str, LabelRecord]:
    """qid -> the teacher's label record that `spec` selects with: its own run directory's labels.jsonl
    (``teacher:DIR``), else those of run_dir and of the test set (the test set's win)."""
    if spec.source is not None:
        path = spec.source / "labels.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"method {spec.name}: {path} does not exist")
        return _read_by_qid(path, LabelRecord)
    rd = RunDir.of(recipe)
    return {**_read_by_qid(rd.path_of("labels"), LabelRecord),
            **_read_by_qid(RunDir(test_dir).path_of("labels"), LabelRecord)}


def _selections(recipe: Recipe, test_dir: Path, spec: MethodSpec) -> dict[str, SelectionRecord]:
    if spec.source is not None:
        path = spec.source / "selections.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"method {spec.name}: {path} does not exist")
        return _read_by_qid(path, SelectionRecord)
    # The select stage writes them (`purecover evaluate` and the pipeline run it first).
    rd = RunDir(test_dir if recipe.eval.path else recipe.run_path)
    path = rd.path_of("selections")
    manifest = rd.manifest("select")
    if not path.is_file() or manifest is None or manifest.summary.status != "complete":
        raise FileNotFoundError(f"method {spec.name}: {path} is missing or incomplete: run `purecover select RECIPE` "
                                "first (`purecover evaluate` and `purecover pipeline` run it for you)")
    return _read_by_qid(path, SelectionRecord)


def _require(records: Container[str], questions: Sequence[CandidateRecord], spec: MethodSpec,
             what: str, remedy: str) -> None:
    """`records` (by qid) must hold every question."""
    missing = [q.qid for q in questions if q.qid not in records]
    if missing:
        raise ValueError(f"method {spec.name}: {len(missing)} of {len(questions)} evaluation questions have no "
                         f"{what} (first: {', '.join(missing[:3])}); {remedy}")


def _make_selector(spec: MethodSpec, recipe: Recipe, embedder: Any, shared: dict[str, Any],
                   labels: Mapping[str, LabelRecord], questions: Sequence[CandidateRecord],
                   show_progress: bool) -> BaselineSelector | None:
    """The selector of `spec`; `shared` holds what methods of one evaluation share (the ICR model); `labels` and
    `questions` are what a method trained here learns from and is scored on."""
    if spec.kind == NO_RETRIEVAL:
        return None
    if spec.kind == "cross_encoder_ft":  # trained first when its labels, candidates or settings changed
        from .cross_encoder_ft import ensure_fine_tuned

        model_dir, record = ensure_fine_tuned(recipe, dict(labels), {q.qid for q in questions}, show_progress)
        device = None if recipe.eval.device == "auto" else recipe.eval.device
        return make_baseline(spec.kind, model_dir=model_dir, threshold=record.threshold, device=device)
    if spec.kind == EXTERNAL:  # stored selections cut to K: the student's baseline reads them
        return make_baseline("student")
    if spec.kind in ("xquad", "ia_select"):
        return make_baseline(spec.kind, embedder=embedder, subtopics=recipe.eval.subtopics)
    if spec.kind in EMBEDDING_METHODS:
        return make_baseline(spec.kind, embedder=embedder)
    if spec.kind == "cross_encoder":
        return make_baseline(spec.kind, model_name=recipe.eval.cross_encoder)
    if spec.kind in ("icr", "icr_fused"):  # one model and one score cache for both (`share_with`)
        e = recipe.eval
        extra = {"fusion_weight": e.icr_fusion_weight} if spec.kind == "icr_fused" else {}
        selector = make_baseline(spec.kind, model_name=e.icr_model or recipe.student.model, layers=e.icr_layers,
                                 max_passage_tokens=e.icr_max_passage_tokens, device=e.device,
                                 share_with=shared.get("icr"), **extra)
        shared.setdefault("icr", selector)
        return selector
    return make_baseline(spec.kind)


def _seconds_between(started: str, finished: str) -> float:
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()


def _stored_select_ms(spec: MethodSpec, recipe: Recipe, test_dir: Path) -> float | None:
    """Milliseconds per question of the stage that made a stored method's sets: the select stage's throughput for
    ``student`` (model loading excluded), the label stage's wall time per question written for the teacher's labels
    (loading included); None when its manifest does not say."""
    if spec.kind == "student":
        rd = RunDir(spec.source) if spec.source is not None else RunDir(test_dir if recipe.eval.path
                                                                       else recipe.run_path)
        manifest = rd.manifest("select")
        qps = getattr(manifest.summary, "questions_per_second", None) if manifest is not None else None
        return round(1000.0 / qps, 3) if qps else None
    places = [RunDir(spec.source)] if spec.source is not None else [RunDir.of(recipe)]
    for rd in places:
        manifest = rd.manifest("label")
        if manifest is None or manifest.summary.status != "complete":
            continue
        summary = manifest.summary
        done = getattr(summary, "written", None) or getattr(summary, "questions", None)
        if done:
            return round(1000.0 * _seconds_between(manifest.started, manifest.finished) / done, 3)
    return None


def select_for_methods(specs: Sequence[MethodSpec], budgets: Sequence[int], questions: Sequence[CandidateRecord],
                       recipe: Recipe, test_dir: Path, show_progress: bool
                       ) -> tuple[dict[tuple[str, int], list[list[int]]], dict[str, int], dict[str, float | None]]:
    """Selected positions per (method name, K), one list per question; fallback counts per method; and the
    milliseconds per question each method spent selecting (`purecover.records.BudgetResult.select_ms`): measured
    here over loading-free selection at the first budget for the methods computed here (a method's one-off setup,
    such as loading or fine-tuning a model, is not counted), taken from the stage that made them for stored sets."""
    embedder = None
    if any(s.kind in EMBEDDING_METHODS for s in specs):
        from ..data.retrieval.dense import load_sentence_transformer

        embedder = load_sentence_transformer(recipe.eval.embedding_model)
    chosen: dict[tuple[str, int], list[list[int]]] = {}
    fallbacks: dict[str, int] = {}
    select_ms: dict[str, float | None] = {}
    labels_by_source: dict[Path | None, dict[str, LabelRecord]] = {}  # each labels file is read once
    shared: dict[str, Any] = {}
    for spec in specs:
        labels: dict[str, LabelRecord] = {}
        selections: Mapping[str, StoredSelection] = {}
        if spec.kind in _NEEDS_LABELS or spec.kind in _OPTIONAL_LABELS or spec.kind in _TRAINS_ON_LABELS:
            if spec.source not in labels_by_source:
                labels_by_source[spec.source] = method_labels(recipe, test_dir, spec)
            labels = labels_by_source[spec.source]
            if spec.kind in _NEEDS_LABELS:
                _require(labels, questions, spec, "teacher label",
                         "run `purecover label RECIPE` on them (with eval.path: `purecover calibrate RECIPE "
                         "--test-set` when calibrating, then `purecover label RECIPE --test-set`) or drop the method")
        if spec.kind == "student":
            selections = _selections(recipe, test_dir, spec)
            _require(selections, questions, spec, "student selection", "run `purecover select` on them")
        if spec.kind == EXTERNAL:  # positions resolved against these questions' candidates
            assert spec.source is not None
            selections = read_external_selections(spec.source, questions, spec.name)
            _require(selections, questions, spec, f"selection in {spec.source}",
                     "add them to the file (e.g. `purecover select --selector DIR --input ... --out ...`)")
        selector = _make_selector(spec, recipe, embedder, shared, labels, questions, show_progress)
        if selector is not None and questions:
            getattr(selector, "model", None)  # a model is loaded before the clock starts: selection, not loading
        started = time.perf_counter()
        if hasattr(selector, "prepare"):
            selector.prepare(questions)  # one batched embedding call instead of one per question
        for k in budgets:
            rows = []
            for q in tqdm(questions, desc=f"select {spec.name}@{k}", unit="q", disable=not show_progress,
                          leave=False):
                if selector is None or not q.docs:
                    rows.append([])
                    continue
                rows.append(selector.select(q, labels.get(q.qid), selections.get(q.qid), k))
            chosen[(spec.name, k)] = rows
            if k == budgets[0]:  # count questions once, not once per budget
                fallbacks[spec.name] = int(getattr(selector, "fallback_count", 0) or 0)
                seconds = time.perf_counter() - started  # the first budget does the work; later ones reuse caches
                select_ms[spec.name] = _select_ms(spec, recipe, test_dir, seconds, len(questions))
    return chosen, fallbacks, select_ms


def _select_ms(spec: MethodSpec, recipe: Recipe, test_dir: Path, seconds: float, n: int) -> float | None:
    """`select_for_methods`' milliseconds per question of `spec`, given `seconds` measured here over `n` questions."""
    if spec.kind in _NOTHING_TO_SELECT:
        return 0.0
    if spec.kind == EXTERNAL:
        return None  # made elsewhere, at a cost this evaluation cannot see
    if spec.kind == "student" or spec.kind in _NEEDS_LABELS:
        return _stored_select_ms(spec, recipe, test_dir)
    return round(1000.0 * seconds / n, 3) if n else None
