"""The select stage: run the exported selector over candidates.jsonl → selections.jsonl (docs/concepts/file-formats.md).

    purecover select RECIPE [--set ...]
    purecover select --selector DIR --input ANY.jsonl --out FILE [--trec FILE]   (bring your own data: `.byo`)

The stage (`run_select_stage`) selects for the evaluation questions: run_dir/candidates.jsonl →
run_dir/selections.jsonl, or, with ``eval.path``, the test set's run_dir/test/candidates.jsonl (built
by the data stage with the recipe's retrieval) → run_dir/test/selections.jsonl. Without ``eval.path`` and with
``eval.questions: heldout`` (the default) those are the student's test split only (`heldout_split`): the training
and calibration questions, which evaluation never scores, are not selected for; ``eval.questions: all`` selects
for every question. `select_candidates`
does the work for any candidates file and selector directory; `select_into` is the worker that both
it and bring-your-own selection (`purecover.select.byo`) run.

One record per question, in candidates order: ``{qid, selected, selected_doc_ids, logits,
probabilities}`` with the logits and probabilities of all candidates in candidate order
(`selection_record`; a candidate without a doc_id is named by its 1-based position). Questions go
through the selector in fixed batches of `BATCH_SIZE` by position; a rerun skips the qids already written and redoes a
partly written batch whole (writing only its missing records), so a killed run, once rerun,
produces exactly the file of an uninterrupted run. A question without candidates gets an empty
selection (counted in the summary); more candidates than the selector's K1 is an error naming
the file and line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..config import Recipe
from ..contract import StageRun
from ..data.data_stage import evaluation_recipe, read_candidate_records, run_data_stage
from ..data.doc_ids import candidate_doc_id
from ..models.selector import SELECTOR_CONFIG, SelectionResult, Selector, read_selector_config
from ..records import (
    CandidateDoc,
    CandidateRecord,
    SelectInputRecord,
    SelectionRecord,
    SelectorConfig,
    SelectSummary,
    StageSummary,
    validate_line,
)
from ..rundir import FILES, RunDir
from ..stages import config_hash as stage_config_hash
from ..utils.io import ResumableJsonl, read_jsonl
from ..utils.progress import tqdm
from .stage_keys import _selector_fingerprint, heldout_split, selection_inputs, selector_fingerprint

log = logging.getLogger(__name__)

__all__ = ["BATCH_SIZE", "SELECTIONS_FILE", "SelectProgress", "backend_read_info", "run_select_stage",
           "select_candidates", "select_into", "selection_inputs", "selection_record", "selector_config",
           "selector_fingerprint", "summarize_selections", "write_selections"]

SELECTIONS_FILE = FILES["selections"]
BATCH_SIZE = 8

Question = CandidateRecord | SelectInputRecord  # what is selected for: a question and its candidates


@dataclasses.dataclass(frozen=True)
class SelectProgress:
    """What one `select_into` did: records written and found already written, torn lines cut off, the
    seconds spent selecting (without loading the selector) and, when a vLLM selector was loaded, how it read
    the identifiers (`backend_read_info`)."""

    written: int
    already_done: int
    repaired_lines: int
    elapsed: float
    backend_read: dict[str, str] | None = None
    dropped_records: int = 0


def backend_read_info(selector: Selector) -> dict[str, str] | None:
    """How the selector's backend reads the identifier scores (`VLLMSelectorBackend.read_info`: read mode,
    logprobs mode, score space, vLLM version, reason); None for a backend without such a choice (hf)."""
    info = getattr(selector.backend, "read_info", None)
    return {str(k): str(v) for k, v in info().items()} if callable(info) else None


def selector_config(selector_dir: Path) -> SelectorConfig:
    """The selector's ``selector_config.json`` as its record (`read_selector_config` checks it)."""
    return SelectorConfig.model_validate(read_selector_config(selector_dir))


def _load_candidates(path: Path, k1: int) -> list[CandidateRecord]:
    """The records of candidates.jsonl, checked for what selection needs (errors name line and field)."""
    return read_candidate_records(path, max_docs=k1, max_docs_hint=(
        f", the k1={k1} the selector was trained for; rebuild the candidates with data.k1 <= {k1}"))


def _select_batch(selector: Selector, batch: Sequence[Question]) -> list[SelectionResult]:
    """Selections for one batch; questions without candidates get an empty selection."""
    present = [r for r in batch if r.docs]
    results = iter(selector.select_batch([r.question for r in present], [r.docs for r in present]))
    return [next(results) if r.docs else SelectionResult([], [], []) for r in batch]


def selection_record(qid: str, result: SelectionResult, docs: Sequence[CandidateDoc], with_doc_ids: bool = False
                     ) -> SelectionRecord:
    """One selections.jsonl record: ``{qid, selected, selected_doc_ids, logits, probabilities, score_space}``
    (+ ``doc_ids`` of all candidates in candidate order with `with_doc_ids`); doc ids by `candidate_doc_id`.
    `score_space` says what `logits` holds: ``logit`` (the readout's logits) or ``logprob`` (a vLLM log-prob mode,
    renormalised over the identifiers). Its `SelectionRecord.to_json_dict` is the line written."""
    ids = [candidate_doc_id(d, i) for i, d in enumerate(docs)]
    record = SelectionRecord(qid=qid, selected=list(result.indices), selected_doc_ids=[ids[k] for k in result.indices],
                             logits=list(result.logits), probabilities=list(result.probabilities),
                             score_space=result.score_space)
    return record.model_copy(update={"doc_ids": ids}) if with_doc_ids else record


def select_into(out_path: Path, records: Sequence[Question], load_selector: Callable[[], Selector], *,
                batch_size: int = BATCH_SIZE, with_doc_ids: bool = False, show_progress: bool = True
                ) -> SelectProgress:
    """The worker of both `select` paths: select for `records` (questions with their candidates) into `out_path`.

    Appends one `selection_record` per question in `records` order through `ResumableJsonl`, in fixed
    batches of `batch_size` by position: qids already in the file are skipped and a partly written batch
    is redone whole (writing only its missing records), so a killed run, once rerun, writes the file of
    an uninterrupted one. Records of qids not in `records` (a part-written file of a run over other questions
    with the same selector and candidates, e.g. eval.questions all before heldout) are dropped and counted;
    the kept ones were scored in that run's batches. `load_selector` is called only when work is left; the selector is closed at
    the end.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    selector: Selector | None = None
    read: dict[str, str] | None = None
    written = 0
    t0 = time.perf_counter()
    try:
        with ResumableJsonl(out_path, keep={r.qid for r in records}) as out:
            already = sum(1 for r in records if r.qid in out.done)
            repaired, dropped = out.repaired, out.dropped
            if already < len(records):  # load only when there is work left
                selector = load_selector()
                read = backend_read_info(selector)
                if read is not None:
                    log.info("selector backend reads: %s", ", ".join(f"{k}={v}" for k, v in read.items()))
                t0 = time.perf_counter()  # throughput without the loading time
            bar = tqdm(total=len(records), initial=already, desc="select", unit="q", disable=not show_progress)
            for i in range(0, len(records), batch_size):
                batch = records[i : i + batch_size]
                if all(r.qid in out.done for r in batch):
                    continue
                assert selector is not None
                for rec, res in zip(batch, _select_batch(selector, batch)):
                    if rec.qid not in out.done:
                        out.write(selection_record(rec.qid, res, rec.docs, with_doc_ids).to_json_dict())
                        written += 1
                        bar.update(1)
            bar.close()
    finally:
        if selector is not None:
            selector.close()
    return SelectProgress(written=written, already_done=already, repaired_lines=repaired,
                          elapsed=time.perf_counter() - t0, backend_read=read, dropped_records=dropped)


def summarize_selections(out_path: Path, questions: int, progress: SelectProgress, backend: str, sel_dir: Path,
                         config: SelectorConfig) -> SelectSummary:
    """The summary of a finished selection into `out_path` (`progress` from `select_into`); checks
    that the file holds one `SelectionRecord` per question (errors name line and field). A vLLM selector's
    `SelectProgress.backend_read` is added as ``vllm_read`` (read mode, logprobs mode, score space, version)."""
    sizes, empty = [], 0
    for lineno, rec in read_jsonl(out_path):
        record = validate_line(SelectionRecord, rec, out_path, lineno)
        sizes.append(len(record.selected))
        empty += not record.logits
    if len(sizes) != questions:
        raise RuntimeError(f"{out_path} has {len(sizes)} records for {questions} questions")
    written, elapsed = progress.written, progress.elapsed
    backend_read = {"vllm_read": {k: str(v) for k, v in progress.backend_read.items()}} if progress.backend_read else {}
    return SelectSummary(
        status="complete",
        questions=questions,
        written=written,
        already_done=progress.already_done,
        repaired_lines=progress.repaired_lines,
        dropped_records=progress.dropped_records,
        no_candidates=empty,
        mean_selected=round(sum(sizes) / len(sizes), 4) if sizes else None,
        questions_per_second=round(written / elapsed, 3) if written and elapsed > 0 else None,
        backend=backend,
        selector=str(sel_dir),
        tau3=config.tau3,
        k_max=config.k_max,
        min_select=config.min_select,
        selections=str(out_path),
        **backend_read,
    )


def run_select_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """The select stage: the recipe's exported selector over its evaluation questions (module docstring).

    Skipped when complete for the same data/eval sections, the same selector and the same candidates. Returns
    its `SelectSummary` (a complete stage's stored one when skipped).
    """
    from ..contract import run_stage

    return run_stage("select", recipe, show_progress)


def write_selections(run: StageRun) -> SelectSummary:
    """The select stage's body: the test set's data stage first when eval.path names one, then the
    selections of run_dir/selector for the evaluation questions."""
    recipe = run.recipe
    if recipe.eval.path:
        run_data_stage(evaluation_recipe(recipe), show_progress=run.show_progress)
    return _select(run, RunDir.of(recipe).path_of("selector"), "hf", evaluation_only=True)


def select_candidates(recipe: Recipe, selector_dir: str | Path | None = None, show_progress: bool = True, *,
                      backend: str = "hf", config_hash: str | None = None, **backend_kwargs: Any) -> StageSummary:
    """Write run_dir/selections.jsonl for run_dir/candidates.jsonl with the selector in run_dir/selector
    (or `selector_dir`), under the select stage's contract (`purecover.contract.execute_stage`).

    `backend` is ``hf`` (dtype ``student.dtype``, device auto) or ``vllm``; `backend_kwargs` go to
    `Selector.from_pretrained`. `config_hash` defaults to the hash of the recipe's data section and
    the selector's fingerprint. Returns the summary also written to ``select.run.json``.
    """
    from ..contract import execute_stage

    rd = RunDir.of(recipe)
    sel_dir = Path(selector_dir) if selector_dir is not None else rd.path_of("selector")
    if not (sel_dir / SELECTOR_CONFIG).is_file():
        raise FileNotFoundError(f"{sel_dir / SELECTOR_CONFIG} does not exist: run `purecover export RECIPE` first")
    if config_hash is None:
        config_hash = hashlib.sha256(
            (stage_config_hash(recipe, "data") + _selector_fingerprint(sel_dir)).encode()).hexdigest()[:16]
    return execute_stage("select", recipe, show_progress, with_before=False, directory=rd,
                         config_hash_value=config_hash,
                         body=lambda run: _select(run, sel_dir, backend, **backend_kwargs)).summary


def _select(run: StageRun, sel_dir: Path, backend: str, evaluation_only: bool = False,
            **backend_kwargs: Any) -> SelectSummary:
    """Selections of the selector in `sel_dir` for the candidates of the run's directory; `evaluation_only`: only
    for those evaluation scores (`heldout_split`: the student's test split), in candidates order."""
    recipe = run.recipe
    rd = run.run_dir
    if not (sel_dir / SELECTOR_CONFIG).is_file():
        raise FileNotFoundError(f"{sel_dir / SELECTOR_CONFIG} does not exist: run `purecover export RECIPE` first")
    config = selector_config(sel_dir)
    candidates = _load_candidates(rd.path_of("candidates"), config.k1)
    split = heldout_split(recipe) if evaluation_only else None
    if split is not None:
        from ..data.splits import question_split

        every = len(candidates)
        candidates = [c for c in candidates if question_split(c.qid, *split) == "test"]
        if not candidates:
            raise ValueError(f"no question of {rd.path_of('candidates')} falls in the student's test split "
                             f"(student.eval_fraction={split[0]}, student.calibration_share={split[1]}): nothing "
                             "for evaluation to score; set eval.questions=all or raise student.eval_fraction")
        log.info("selecting for the %d of %d questions evaluation scores (eval.questions: heldout, the student's "
                 "test split; eval.questions: all selects for every one)", len(candidates), every)
    out_path = rd.path_of("selections")

    def load() -> Selector:
        kwargs = {"dtype": recipe.student.dtype, **backend_kwargs} if backend == "hf" else backend_kwargs
        return Selector.from_pretrained(sel_dir, backend=backend, trust_remote_code=recipe.student.trust_remote_code,
                                        **kwargs)

    progress = select_into(out_path, candidates, load, show_progress=run.show_progress)
    summary = summarize_selections(out_path, len(candidates), progress, backend, sel_dir, config)
    log.info("selected for %d questions (%s questions/s)", summary.written, summary.questions_per_second)
    return summary
