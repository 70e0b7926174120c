"""The data stage: questions + corpus + retriever → ``candidates.jsonl`` (docs/concepts/file-formats.md).

Record: ``{qid, dataset, question, answers, docs: [{doc_id, title, text, score}], gold_doc_ids,
gold_titles, oracle_steps, meta}``. ``gold_doc_ids`` lists every gold passage id, retrieved or
not, so coverage of the candidates can be measured:

* corpus built from the dataset's paragraphs (``per_question``/``shared``): the content ids of
  the question's supporting paragraphs (HotpotQA/2Wiki supporting-fact titles, MuSiQue
  ``is_supporting``, StrategyQA facts);
* corpus file: passages whose title matches a supporting title (all passages of that title,
  as with 100-word Wikipedia chunks), or, for passages without titles (StrategyQA facts),
  whose text equals a supporting paragraph;
* a coverage collection (``data.dataset: coverage``): the documents its nugget qrels (``data.qrels``) judge
  relevant to one of the topic's nuggets, in the order of the qrels file.

The job appends one record per question and is resumable: rerun it and it skips the qids
already written (a truncated last line from a crash is cut off and redone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Recipe
from ..contract import StageRun
from ..records import (
    CandidateDoc,
    CandidateRecord,
    DataReport,
    DataSummary,
    LineRecordError,
    StageSummary,
    validate_line,
)
from ..rundir import FILES, RunDir
from ..utils.io import ResumableJsonl, atomic_write_json, read_jsonl
from ..utils.memory import peak_rss_mb
from ..utils.progress import tqdm
from .corpus import Corpus, CorpusLike, Doc, content_doc_id, corpus_from_examples, question_docs
from .corpus_store import open_corpus_store
from .errors import InvalidRecord
from .example import Example
from .gold_check import gold_problems
from .index_dir import resolve_index_dir
from .loaders import ExampleSource
from .paths import data_path_entries, show_data_path
from .retrieval.base import Hit

log = logging.getLogger(__name__)

__all__ = ["CANDIDATES_FILE", "build_record", "evaluation_recipe", "gold_doc_ids", "judged_documents", "read_candidate_records", "run_data_stage",
           "supporting_recall", "write_candidates"]

CANDIDATES_FILE = FILES["candidates"]
REPORT_FILE = FILES["data_report"]
_BATCH = 32


def read_candidate_records(path: str | Path, max_docs: int | None = None,
                           max_docs_hint: str = "") -> list[CandidateRecord]:
    """The records of a candidates.jsonl, each validated as a `CandidateRecord` (errors name file, line and
    field: ``PATH:LINE: field 'docs[0].text': missing``), in file order.

    `max_docs`: reject records with more candidates (e.g. more than a selector was trained for).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `purecover data RECIPE` first")
    records: list[CandidateRecord] = []
    seen: set[str] = set()
    for lineno, rec in read_jsonl(path):
        record = validate_line(CandidateRecord, rec, path, lineno)
        if max_docs is not None and len(record.docs) > max_docs:
            raise LineRecordError(path, lineno, "docs",
                                  f"{len(record.docs)} candidates, more than {max_docs}{max_docs_hint}")
        if record.qid in seen:
            raise LineRecordError(path, lineno, "qid", f"duplicate {record.qid!r}")
        seen.add(record.qid)
        records.append(record)
    if not records:
        raise ValueError(f"{path} has no records")
    return records


def judged_documents(qrels: str | Path) -> dict[str, list[str]]:
    """qid -> the documents a qrels file (``qid iteration doc_id rel``; a local path or ``hf://datasets/...``)
    judges relevant (rel > 0), in file order."""
    from ..utils.trec import iter_qrels
    from .loaders.hub import resolve_hub_file

    out: dict[str, dict[str, None]] = {}
    for _, qid, _, doc_id, rel in iter_qrels(resolve_hub_file(qrels)):
        if rel > 0:
            out.setdefault(qid, {})[doc_id] = None
    return {qid: list(docs) for qid, docs in out.items()}


def gold_doc_ids(example: Example, corpus: CorpusLike | None,
                 judged: dict[str, list[str]] | None = None) -> list[str]:
    """Ids of the gold passages of `example` (see module docstring for the rule); a coverage topic's are the
    documents `judged` (its nugget qrels: qid -> documents relevant to one of its nuggets) names."""
    if example.dataset == "coverage":
        return list((judged or {}).get(example.qid, []))
    supporting = example.supporting_paragraphs
    if corpus is None:  # corpus built from the dataset's own paragraphs
        ids = [content_doc_id(p.title, p.text) for p in supporting]
        return list(dict.fromkeys(ids))
    ids = []
    for title in example.supporting_titles:
        ids += corpus.ids_with_title(title)
    for p in supporting:
        if not p.title:
            found = corpus.id_of_text(p.text)
            if found is not None:
                ids.append(found)
    return list(dict.fromkeys(ids))


def build_record(example: Example, docs: list[tuple[Doc, float]], gold: list[str]) -> CandidateRecord:
    """The candidates.jsonl record of one question (docs in retrieval order, best first); its
    `CandidateRecord.to_json_dict` is the line written."""
    return CandidateRecord(
        qid=example.qid,
        dataset=example.dataset,
        question=example.question,
        answers=example.answers,
        docs=[CandidateDoc(doc_id=d.doc_id, title=d.title, text=d.text, score=round(float(s), 6)) for d, s in docs],
        gold_doc_ids=gold,
        gold_titles=example.supporting_titles,
        oracle_steps=example.oracle_steps,
        meta=example.meta,
    )


def supporting_recall(records: Iterable[CandidateRecord]) -> float | None:
    """Mean over questions with gold passages of |retrieved ∩ gold| / |gold| (None if none have gold)."""
    values = []
    for r in records:
        gold = set(r.gold_doc_ids)
        if gold:
            values.append(len(gold & {d.doc_id for d in r.docs}) / len(gold))
    return float(np.mean(values)) if values else None


def make_retriever(recipe: Recipe, corpus: CorpusLike, index_dir: Path | None, show_progress: bool) -> Any:
    """The retriever of ``data.retriever`` over `corpus`, its index kept under `index_dir` (None: in memory)."""
    cfg = recipe.data
    if cfg.retriever == "bm25":
        from .retrieval.bm25 import BM25Retriever

        return BM25Retriever(corpus, index_dir=index_dir, stopwords=cfg.bm25_stopwords, show_progress=show_progress,
                             verify=cfg.index_verify)
    from .retrieval.dense import DenseRetriever

    return DenseRetriever(corpus, cfg.dense_model, cache_dir=index_dir, query_prefix=cfg.query_prefix,
                          passage_prefix=cfg.passage_prefix, batch_size=cfg.dense_batch_size,
                          show_progress=show_progress, index_factory=cfg.faiss_index,
                          embedding_dtype=cfg.embedding_dtype, shard_size=cfg.encode_shard_size,
                          index_path=cfg.index_path, search_params=cfg.faiss_search_params, verify=cfg.index_verify)


def open_recipe_corpus(recipe: Recipe, examples: list[Example] | None = None, show_progress: bool = True,
                       invalid: list[InvalidRecord] | None = None) -> CorpusLike | None:
    """The corpus of ``data.corpus``: the store of a corpus file (built once under the index directory),
    the union of `examples`' paragraphs (``shared``), or None (``per_question``)."""
    cfg = recipe.data
    if cfg.corpus == "per_question":
        return None
    if cfg.corpus == "shared":
        return corpus_from_examples(examples or [])
    return open_corpus_store(cfg.corpus, resolve_index_dir(cfg.index_dir), skip_invalid=cfg.skip_invalid,
                             invalid=invalid, show_progress=show_progress, verify=cfg.index_verify)


def _batched(items: list[Example], n: int) -> Iterator[list[Example]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _split_key(recipe: Recipe) -> str:
    """The recipe key to name in split errors: ``eval.split`` when building eval.path's test set."""
    e = recipe.eval
    building_test_set = recipe.run_path == RunDir(recipe.run_path.parent).test_set().path
    if e.path and recipe.data.path == e.path and recipe.data.split == e.split and building_test_set:
        return "eval.split"
    return "data.split"


def run_data_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Write ``run_dir/candidates.jsonl`` for the recipe; returns the summary also stored in data.run.json (a
    `DataSummary`; a complete stage's stored summary that another version wrote may read as a plain
    `StageSummary`)."""
    from ..contract import run_stage

    return run_stage("data", recipe, show_progress)


def dataset_inputs(recipe: Recipe) -> dict[str, Path]:
    """The data stage's inputs outside the run directory: the local dataset file or folder (data.path; each file
    of a data.path list, named ``data.path[I] FILE``), the aliases file and the qrels file, recorded by content so
    that editing one in place is noticed (adding, removing or reordering the files of a list changes the data
    configuration itself)."""
    cfg = recipe.data
    paths = [(key if key == "data.path" else f"{key} {value}", value) for key, value in data_path_entries(cfg.path)]
    found = {}
    for key, value in (*paths, ("data.aliases", cfg.aliases), ("data.qrels", cfg.qrels)):
        if value and value != "demo" and Path(value).expanduser().exists():
            found[key] = Path(value).expanduser()
    return found


def write_candidates(run: StageRun) -> DataSummary:
    """The data stage's body (`purecover.contract.execute_stage` runs it): retrieve and write candidates.jsonl."""
    recipe, show_progress = run.recipe, run.show_progress
    cfg = recipe.data
    run_dir = recipe.run_path
    external = cfg.corpus not in ("per_question", "shared")
    if external and not Path(cfg.corpus).is_file():
        raise FileNotFoundError(f"data.corpus {cfg.corpus!r} is neither per_question, shared nor an existing file")

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    source = ExampleSource(cfg.dataset, cfg.path, split=cfg.split, limit=cfg.limit, skip_invalid=cfg.skip_invalid,
                           aliases_path=cfg.aliases, require_paragraphs=not external, hub_config=cfg.hub_config,
                           split_key=_split_key(recipe))
    examples = list(tqdm(source, desc="load questions", unit="q", disable=not show_progress))
    if not examples:
        raise ValueError(f"no valid questions in {show_data_path(cfg.path)!r} ({len(source.invalid)} invalid)")
    population = len(examples)
    if cfg.sample is not None:  # before retrieval: only the sampled questions are retrieved
        from .splits import sample_questions

        examples = sample_questions(examples, cfg.sample, cfg.sample_seed, key="data.sample", qid=lambda ex: ex.qid)
    seconds["questions"] = time.perf_counter() - t0
    corpus_invalid: list[InvalidRecord] = []
    index_dir = resolve_index_dir(cfg.index_dir)
    t0 = time.perf_counter()
    corpus = open_recipe_corpus(recipe, examples, show_progress, corpus_invalid)  # a store opens in milliseconds
    seconds["corpus"] = time.perf_counter() - t0
    judged = judged_documents(cfg.qrels) if cfg.qrels else None

    with ResumableJsonl(run_dir / CANDIDATES_FILE) as out:
        pending = [ex for ex in examples if ex.qid not in out.done]
        n_done_before = len(examples) - len(pending)
        retriever = None
        index_state = None
        if pending and corpus is not None:
            t0 = time.perf_counter()
            retriever = make_retriever(recipe, corpus, index_dir, show_progress)
            seconds["index"] = time.perf_counter() - t0
            index_state = "loaded" if retriever.from_cache else "built"
            log.info("%s index over %d passages %s in %.1fs (%s)", cfg.retriever, len(corpus), index_state,
                     seconds["index"], index_dir)
        t0 = time.perf_counter()
        bar = tqdm(total=len(pending), desc="retrieve", unit="q", disable=not show_progress)
        empty_queries = 0
        for batch in _batched(pending, _BATCH):
            if corpus is not None:
                hits = retriever.search([ex.question for ex in batch], cfg.k1)
                for ex, row in zip(batch, hits):
                    docs = list(zip(corpus.docs_at([h.index for h in row]), [h.score for h in row]))
                    out.write(build_record(ex, docs, gold_doc_ids(ex, corpus if external else None, judged))
                              .to_json_dict())
            else:  # per_question: rank each question's own paragraphs
                for ex in batch:
                    own = Corpus(question_docs(ex), f"question {ex.qid}")
                    r = make_retriever(recipe, own, None, False)
                    row: list[Hit] = r.search([ex.question], cfg.k1)[0]
                    empty_queries += getattr(r, "empty_queries", 0)
                    record = build_record(ex, [(own[h.index], h.score) for h in row], gold_doc_ids(ex, None))
                    out.write(record.to_json_dict())
            bar.update(len(batch))
        bar.close()
        elapsed = time.perf_counter() - t0
        seconds["retrieve"] = elapsed
        if retriever is not None:
            empty_queries += getattr(retriever, "empty_queries", 0)
        repaired = out.repaired

    invalid = source.invalid + corpus_invalid
    if invalid or (run_dir / REPORT_FILE).exists():
        report = DataReport(invalid_records=invalid, n_invalid=len(invalid))
        atomic_write_json(run_dir / REPORT_FILE, report.to_json_dict())
    written = read_candidate_records(run_dir / CANDIDATES_FILE)
    recall = supporting_recall(written)
    with_gold = sum(1 for r in written if r.gold_doc_ids)
    with_steps = sum(1 for r in written if r.oracle_steps)
    for problem in gold_problems(recipe, len(written), with_gold, with_steps):
        log.warning("%s", problem)
    summary = DataSummary(
        questions=len(examples),
        sampled_from=population if cfg.sample is not None else None,
        sample_seed=cfg.sample_seed if cfg.sample is not None else None,
        written=len(pending),
        already_done=n_done_before,
        repaired_lines=repaired,
        invalid_records=len(invalid),
        corpus=cfg.corpus,
        corpus_size=len(corpus) if corpus is not None else None,
        corpus_fingerprint=corpus.fingerprint if corpus is not None else None,
        retriever=cfg.retriever,
        index=index_state,  # built, loaded, or null when nothing was retrieved from a corpus
        index_dir=str(index_dir) if corpus is not None else None,
        k1=cfg.k1,
        empty_queries=empty_queries,
        questions_per_second=round(len(pending) / elapsed, 2) if pending and elapsed > 0 else None,
        supporting_recall=None if recall is None else round(recall, 4),
        with_gold=with_gold,
        with_oracle_steps=with_steps,
        seconds={k: round(v, 3) for k, v in seconds.items()},
        peak_rss_mb=peak_rss_mb(),
        candidates=str(run_dir / CANDIDATES_FILE),
    )
    if source.resolved is not None:  # the Hub configuration / split actually read
        summary.hub = source.resolved.to_summary()
    if empty_queries:
        log.warning("%d questions had no indexed word: their candidates are in corpus order", empty_queries)
    return summary


def evaluation_recipe(recipe: Recipe) -> Recipe:
    """The recipe whose data stage builds the test set of ``eval.path`` into its own run directory
    (`purecover.rundir.RunDir.test_set`: ``run_dir/test``), with the same retrieval:
    ``eval.split``, ``eval.limit`` and the seeded sample ``eval.sample``/``eval.seed`` (drawn before retrieval)."""
    import dataclasses

    cfg = recipe.eval
    # The test set's Hub configuration: eval.hub_config, else the training data's when both name one repository
    # (FlashRAG's train and dev of one dataset), else the repository's own default.
    hub_config = cfg.hub_config if cfg.hub_config is not None else (
        recipe.data.hub_config if cfg.path == recipe.data.path else None)
    data = dataclasses.replace(recipe.data, path=cfg.path, split=cfg.split, hub_config=hub_config, limit=cfg.limit,
                               sample=cfg.sample, sample_seed=cfg.seed)
    return dataclasses.replace(recipe, run_dir=str(RunDir.of(recipe).test_set().path), data=data)
