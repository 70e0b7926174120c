"""Building a BM25 index: pass 1 (tokenize the corpus into sorted runs), pass 2 (the weights, bucket by
bucket), and `build_index`, which runs both into a directory or in memory.

The passes, their memory bounds and the scores (bm25s's bit for bit) are described in
`purecover.data.retrieval.bm25_index`.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path
from typing import Any

# Importing bm25s can start JAX; see purecover.data.retrieval.bm25 (keep JAX off the GPU by default).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
from bm25s.scoring import _score_idf_lucene, _score_tfc_lucene
from bm25s.tokenization import Tokenizer

from ...records import BM25BuildStats
from ...utils.memory import peak_rss_mb
from ...utils.progress import tqdm
from ..corpus import CorpusLike
from .bm25_search import BM25Index, DictVocab, new_tokenizer
from .bm25_store import _NpyWriter, _Runs, _save_npy, write_vocab

log = logging.getLogger("purecover.data.retrieval.bm25_index")  # the name its log lines have always had

K1 = 1.5
B = 0.75
READ_BATCH = 4096  # passages per list read from the corpus and tokenized at once
RUN_TOKENS = 8_000_000  # tokens per sorted run of pass 1 (~40 B each at the sort)
BUCKET_POSTINGS = 16_000_000  # postings per bucket of pass 2 (8 B each while the bucket is assembled)
SCORE_BLOCK = 1 << 20  # postings whose weights are computed at once (~50 B each of temporaries)


class _NoBar:
    """Stands in for a disabled progress bar (a disabled tqdm still costs ~0.2 ms: tiny corpora build often)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(show: bool, **kwargs: Any) -> Any:
    """A tqdm bar when `show`, else a no-op bar."""
    return tqdm(**kwargs) if show else _NoBar()


# --- pass 1: sorted runs ------------------------------------------------------------------------------------

def _sort_run(tokens: np.ndarray, lengths: np.ndarray, first_doc: int) -> dict[str, np.ndarray]:
    """Postings of one run: `tokens` (int32, the run's passages' term ids concatenated), `lengths` (int32
    tokens per passage), `first_doc` the position of the run's first passage. See `_Runs`."""
    n = len(lengths)
    key = tokens.astype(np.int64)
    key *= n
    key += np.repeat(np.arange(n, dtype=np.int64), lengths)  # term * n + passage: sorts by (term, passage)
    key.sort()
    new = np.empty(len(key), dtype=bool)
    new[:1] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    del new
    tf = np.diff(starts, append=len(key))
    key = key[starts]
    del starts
    term = key // n
    docs = (key - term * n + first_doc).astype(np.int32)
    del key
    new = np.empty(len(term), dtype=bool)
    new[:1] = True
    np.not_equal(term[1:], term[:-1], out=new[1:])
    term_starts = np.flatnonzero(new)
    return {"terms": term[term_starts].astype(np.int32),
            "counts": np.diff(term_starts, append=len(term)).astype(np.int32),
            "docs": docs,
            "tf": tf.astype(np.uint16 if tf.max(initial=0) <= np.iinfo(np.uint16).max else np.uint32)}


def _tokenize(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Term ids of `texts` concatenated (int32) and tokens per text (int32), growing the tokenizer's vocabulary.

    As ``Tokenizer.tokenize(texts, update_vocab=True)``: a text without indexed words gets the empty token.
    """
    ids = list(tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True))
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    tokens = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    return tokens, lengths


def _pass1(corpus: CorpusLike, tokenizer: Tokenizer, runs: _Runs, read_batch: int, run_tokens: int,
           show_progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize the corpus into sorted runs; returns (document frequency per term int64 [V], length per
    passage int32 [n_docs])."""
    df = np.zeros(0, dtype=np.int64)
    lengths: list[np.ndarray] = []
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_tokens = 0
    done = 0
    bar = _bar(show_progress, total=len(corpus), unit="passage", unit_scale=True, desc="BM25 index: tokenize")

    def flush() -> None:
        nonlocal df, pending, pending_tokens
        run_lengths = np.concatenate([p[1] for p in pending])
        run = _sort_run(np.concatenate([p[0] for p in pending]), run_lengths, done - len(run_lengths))
        pending, pending_tokens = [], 0
        vocab = len(tokenizer.word_to_id)
        if len(df) < vocab:
            df = np.concatenate([df, np.zeros(max(vocab, 2 * len(df)) - len(df), dtype=np.int64)])
        df[run["terms"]] += run["counts"]
        runs.add(run)

    for texts in corpus.iter_contents(batch_size=read_batch):
        tokens, counts = _tokenize(tokenizer, texts)
        pending.append((tokens, counts))
        lengths.append(counts)
        pending_tokens += len(tokens)
        done += len(texts)
        if pending_tokens >= run_tokens:
            flush()
        bar.update(len(texts))
    if pending:
        flush()
    bar.close()
    if done != len(corpus):
        raise RuntimeError(f"corpus {corpus.source!r} yielded {done} passages, not {len(corpus)}")
    return df[:len(tokenizer.word_to_id)], np.concatenate(lengths)


# --- pass 2: weights, bucket by bucket ----------------------------------------------------------------------

def _idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """bm25s's Lucene idf per term (float32 [V]; 0 where df is 0), computed once per distinct df."""
    values, inverse = np.unique(df, return_inverse=True)
    table = np.array([_score_idf_lucene(int(v), N=n_docs) if v else 0.0 for v in values.tolist()],
                     dtype=np.float32)
    return table[inverse]


def _bucket_bounds(indptr: np.ndarray, budget: int) -> list[int]:
    """Term boundaries 0 = b0 < b1 < ... = V with at most `budget` postings per bucket (or one term)."""
    n_terms = len(indptr) - 1
    bounds = [0]
    while bounds[-1] < n_terms:
        t0 = bounds[-1]
        t1 = int(np.searchsorted(indptr, indptr[t0] + budget, side="right")) - 1
        bounds.append(min(n_terms, max(t1, t0 + 1)))
    return bounds


def _weights(idf: np.ndarray, tf: np.ndarray, doc_len: np.ndarray, avg_doc_len: np.float64) -> np.ndarray:
    """float32 weights as bm25s computes them: idf (float32) × tfc (float64 from float32 tf, int lengths)."""
    tfc = _score_tfc_lucene(tf.astype(np.float32), doc_len, avg_doc_len, K1, B)
    return (idf * tfc).astype(np.float32)


def _pass2(runs: _Runs, df: np.ndarray, lengths: np.ndarray, bucket_postings: int, score_block: int,
           emit: Any, show_progress: bool) -> tuple[np.ndarray, int]:
    """Weights bucket by bucket; `emit(data, indices)` receives each bucket's columns in order.

    Returns (indptr int64 [V+1], number of buckets).
    """
    n_docs = len(lengths)
    avg_doc_len = np.float64(int(lengths.sum(dtype=np.int64))) / n_docs  # = bm25s's np.mean of the lengths
    idf = _idf(df, n_docs)
    indptr = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    bounds = _bucket_bounds(indptr, bucket_postings)
    cuts = np.asarray(bounds, dtype=np.int64)
    term_at, post_at = [], []  # per run: where each bucket starts in its terms / postings
    for r in range(len(runs)):
        terms = runs.read(r, "terms", 0, runs.n_terms[r])
        counts = runs.read(r, "counts", 0, runs.n_terms[r])
        at = np.searchsorted(terms, cuts)
        term_at.append(at)
        post_at.append(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])[at])
    bar = _bar(show_progress, total=int(indptr[-1]), unit="posting", unit_scale=True, desc="BM25 index: weights")
    for b in range(len(bounds) - 1):
        t0, t1 = bounds[b], bounds[b + 1]
        base = int(indptr[t0])
        data = np.empty(int(indptr[t1]) - base, dtype=np.float32)
        indices = np.empty(len(data), dtype=np.int32)
        fill = indptr[t0:t1] - base  # next free slot of each column of the bucket
        for r in range(len(runs)):
            i0, i1 = int(term_at[r][b]), int(term_at[r][b + 1])
            if i0 == i1:
                continue
            p0, p1 = int(post_at[r][b]), int(post_at[r][b + 1])
            terms = runs.read(r, "terms", i0, i1)
            counts = runs.read(r, "counts", i0, i1).astype(np.int64)
            docs = runs.read(r, "docs", p0, p1)
            tf = runs.read(r, "tf", p0, p1)
            local = terms.astype(np.int64) - t0
            shift = fill[local] - (np.cumsum(counts) - counts)  # slot of posting j of term i: shift[i] + j
            fill[local] += counts
            which = np.repeat(np.arange(len(terms), dtype=np.int32), counts)
            for a in range(0, p1 - p0, score_block):
                z = min(a + score_block, p1 - p0)
                term_index = which[a:z]
                slots = shift[term_index] + np.arange(a, z, dtype=np.int64)
                block_docs = docs[a:z]
                data[slots] = _weights(idf[terms[term_index]], tf[a:z], lengths[block_docs], avg_doc_len)
                indices[slots] = block_docs
        if not np.array_equal(fill, indptr[t0 + 1:t1 + 1] - base):
            raise RuntimeError(f"BM25 build: bucket {b} got postings that do not match its frequencies")
        if len(data) and not data.min() > 0:  # `BM25Index.matched` relies on it (Lucene: idf > 0, tfc > 0)
            raise RuntimeError(f"BM25 build: bucket {b} has a weight <= 0")
        emit(data, indices)
        bar.update(len(data))
    bar.close()
    return indptr, len(bounds) - 1


# --- build --------------------------------------------------------------------------------------------------

def build_index(corpus: CorpusLike, out_dir: Path | None, stopwords: str | None, *, read_batch: int = READ_BATCH,
                run_tokens: int = RUN_TOKENS, bucket_postings: int = BUCKET_POSTINGS,
                score_block: int = SCORE_BLOCK, show_progress: bool = False) -> BM25Index | BM25BuildStats:
    """Index `corpus` (``title + "\\n" + text`` of each passage).

    With `out_dir` (an existing, empty directory), writes the index files there (not the metadata) and
    returns build statistics; without it, builds in memory and returns the `BM25Index` (its `stats` set). The
    result does not depend on `read_batch`, `run_tokens`, `bucket_postings` or `score_block` (memory/speed knobs).
    """
    started = time.perf_counter()
    n_docs = len(corpus)
    tokenizer = new_tokenizer(stopwords)
    runs = _Runs(out_dir)
    index: BM25Index | None = None
    try:
        df, lengths = _pass1(corpus, tokenizer, runs, read_batch, run_tokens, show_progress)
        tokenized = time.perf_counter()
        word_to_id = tokenizer.word_to_id
        n_terms = len(word_to_id)
        if out_dir is not None:
            write_vocab(out_dir, word_to_id)
            del tokenizer, word_to_id  # the dict is the largest object of the build: gone before pass 2
        nnz = int(df.sum())
        if out_dir is None:
            parts: list[tuple[np.ndarray, np.ndarray]] = []
            indptr, n_buckets = _pass2(runs, df, lengths, bucket_postings, score_block,
                                       lambda d, i: parts.append((d, i)), show_progress)
            data = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
            indices = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
            index = BM25Index(data, indices, indptr, n_docs, DictVocab(tokenizer.word_to_id))
        else:
            n_buckets = _write_matrix(out_dir, runs, df, lengths, nnz, bucket_postings, score_block, show_progress)
    finally:
        runs.remove()
    seconds = time.perf_counter() - started
    stats = BM25BuildStats(passages=n_docs, terms=n_terms, postings=nnz, tokens=int(lengths.sum(dtype=np.int64)),
                           runs=len(runs), buckets=n_buckets, read_batch=read_batch, run_tokens=run_tokens,
                           bucket_postings=bucket_postings, tokenize_seconds=round(tokenized - started, 2),
                           build_seconds=round(seconds, 2), build_peak_rss_mb=peak_rss_mb())
    if index is not None:
        index.stats = stats
        return index
    log.info("BM25 index: %d passages, %d terms, %d postings in %d runs and %d buckets (%.1f s)",
             n_docs, n_terms, nnz, len(runs), n_buckets, seconds)
    return stats


def _write_matrix(out_dir: Path, runs: _Runs, df: np.ndarray, lengths: np.ndarray, nnz: int, bucket_postings: int,
                  score_block: int, show_progress: bool) -> int:
    """Pass 2 into ``data.npy``/``indices.npy``/``indptr.npy`` of `out_dir`; returns the number of buckets."""
    with _NpyWriter(out_dir / "data.npy", np.float32, nnz) as data_file, \
            _NpyWriter(out_dir / "indices.npy", np.int32, nnz) as indices_file:
        def emit(d: np.ndarray, i: np.ndarray) -> None:
            data_file.append(d)
            indices_file.append(i)

        indptr, n_buckets = _pass2(runs, df, lengths, bucket_postings, score_block, emit, show_progress)
    _save_npy(out_dir / "indptr.npy", indptr)
    return n_buckets

