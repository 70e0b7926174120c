"""BM25 index: a chunked build in bounded memory, a memory-mapped load, sparse batched scoring.

The scores are those of bm25s's in-memory ``BM25().index(...)`` bit for bit (Lucene variant, k1=1.5,
b=0.75, float32 weights): the passages are tokenized by ``bm25s.tokenization.Tokenizer`` (one tokenizer
over all chunks, so term ids are bm25s's), idf is `bm25s.scoring._score_idf_lucene` per term (Python
float stored as float32), the term-frequency part is `bm25s.scoring._score_tfc_lucene` with float32 term
counts, integer passage lengths and the float64 mean length, and a query's score of a passage is the
float32 sum of its terms' weights added in query order (a repeated query word counts again).

On-disk layout of an index directory (V = vocabulary size including bm25s's empty token, nnz = postings,
i.e. (passage, term) pairs; every array is a ``.npy`` file opened with ``mmap_mode="r"``, no pickle):

* ``data.npy`` float32 [nnz], ``indices.npy`` int32 [nnz], ``indptr.npy`` int64 [V + 1]: the passage ×
  term weight matrix in CSC form, as bm25s keeps it. Term t's postings are ``indptr[t]:indptr[t+1]``,
  passage positions ascending, weight idf(t)·tfc(t, d). Column t is the term's bm25s tokenizer id
  (first-seen order; 0 is the empty token "" bm25s gives a passage without any indexed word).
* ``vocab_hash.npy`` uint64 [V]: 64-bit BLAKE2b of each term's UTF-8, sorted; ``vocab_col.npy`` int32 [V]:
  the column of each. ``vocab_offsets.npy`` int64 [V + 1] and ``vocab_utf8.npy`` uint8: the terms' UTF-8
  in column order (term t is ``vocab_utf8[vocab_offsets[t]:vocab_offsets[t+1]]``). A query word is hashed,
  found by binary search in the mapped hashes (about log2 V entries read) and then compared with the
  stored string of each column with that hash, so a hash collision never maps a word to another term.
  Loading builds no dict and reads nothing but the file headers: it takes milliseconds at any size.
* The caller's metadata file (`purecover.data.retrieval.bm25`), written last.

Build (`build_index`). Pass 1 streams ``corpus.iter_contents`` in lists of `READ_BATCH` passages,
tokenizes them, and gathers runs of about `RUN_TOKENS` tokens; each run is sorted by (term, passage) with
one int64 sort, reduced to postings with their term frequencies, and written as raw files
``run-NNNNN.{terms,counts,docs,tf}`` in the build directory; document frequencies (int64 per term) and
passage lengths (int32 per passage) stay in memory. The vocabulary files are then written and the
tokenizer's dict is dropped. Pass 2 computes idf and ``indptr``, cuts the term range into buckets of at
most `BUCKET_POSTINGS` postings, and for each bucket reads every run's slice (``np.fromfile``: no mapping,
so file pages do not count as resident memory), computes its weights in blocks of `SCORE_BLOCK` and
appends the bucket to ``data.npy``/``indices.npy`` sequentially. The run files are deleted at the end.

Memory, besides the tokenizer's vocabulary dict (a Python dict, ~100 B per term, which bm25s needs as
well): pass 1 holds ~40 B per token of one run (RUN_TOKENS = 8M: ~300 MB at the sort), 4 B per passage
and 8 B per term; pass 2 holds 8 B per posting of one bucket (BUCKET_POSTINGS = 16M: 128 MB), ~14 B per
posting of one run's slice, SCORE_BLOCK temporaries (~50 MB), and 16 B per term (indptr, idf, fill).
Nothing grows with the corpus except the per-passage lengths and the per-term arrays. Measured on 1M
generated passages of 100 words (100M tokens, 61M postings, 1.4M terms): 125 s (tokenizing: 120 s),
peak RSS 315 MB above the process's baseline (bm25s's own ``BM25.index``: 765 MB above it for 200k).
Disk: the runs take ~6-8 B per posting until pass 2 ends, the index 8 B per posting plus the vocabulary.

Queries (`BM25Index.top_k`) read only the postings of the query's terms and add them into one float32
accumulator per index (allocated on first use, reset entry by entry), so a query costs time in
proportion to its postings and nothing per passage.

Without a directory (``out_dir=None``, tiny per-question corpora) the same two passes run in memory and
the tokenizer's dict serves as the vocabulary.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

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
from .base import Hit

log = logging.getLogger(__name__)

__all__ = [
    "BUCKET_POSTINGS",
    "FORMAT_VERSION",
    "INDEX_FILES",
    "K1",
    "READ_BATCH",
    "RUN_TOKENS",
    "SCORE_BLOCK",
    "B",
    "BM25Index",
    "build_index",
    "hash_terms",
    "new_tokenizer",
    "query_words",
    "write_vocab",
]

FORMAT_VERSION = 3  # 1 was bm25s's own save format; 3: the metadata records each file's size and CRC-32
K1 = 1.5
B = 0.75
READ_BATCH = 4096  # passages per list read from the corpus and tokenized at once
RUN_TOKENS = 8_000_000  # tokens per sorted run of pass 1 (~40 B each at the sort)
BUCKET_POSTINGS = 16_000_000  # postings per bucket of pass 2 (8 B each while the bucket is assembled)
SCORE_BLOCK = 1 << 20  # postings whose weights are computed at once (~50 B each of temporaries)

_ARRAYS = ("data", "indices", "indptr", "vocab_hash", "vocab_col", "vocab_offsets", "vocab_utf8")
INDEX_FILES = tuple(f"{name}.npy" for name in _ARRAYS)  # what `build_index` writes into its directory
_RUN_FIELDS = ("terms", "counts", "docs", "tf")


def new_tokenizer(stopwords: str | None) -> Tokenizer:
    """The bm25s tokenizer the index and its queries use (lower-cased, ``\\w\\w+`` words, `stopwords`)."""
    return Tokenizer(stopwords=stopwords if stopwords else None)


def hash_terms(encoded: Sequence[bytes]) -> np.ndarray:
    """64-bit BLAKE2b of each byte string, as uint64 (little-endian digest) [len(encoded)]."""
    digests = b"".join(hashlib.blake2b(e, digest_size=8).digest() for e in encoded)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


class _NoBar:
    """Stands in for a disabled progress bar (a disabled tqdm still costs ~0.2 ms: tiny corpora build often)."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(show: bool, **kwargs: Any) -> Any:
    """A tqdm bar when `show`, else a no-op bar."""
    return tqdm(**kwargs) if show else _NoBar()


def _encode(word: str) -> bytes:
    return word.encode("utf-8", "surrogatepass")


# --- vocabularies -------------------------------------------------------------------------------------------

class Vocab(Protocol):
    """Maps words to columns of the index."""

    def lookup(self, words: Sequence[str]) -> list[int]:
        """Column of each word, -1 for words not in the index."""
        ...


class DictVocab:
    """The tokenizer's own dict (in-memory indexes)."""

    def __init__(self, word_to_id: dict[str, int]) -> None:
        self.word_to_id = word_to_id

    def lookup(self, words: Sequence[str]) -> list[int]:
        get = self.word_to_id.get
        return [get(w, -1) for w in words]


class HashedVocab:
    """Sorted term hashes and the terms' UTF-8, memory-mapped: no dict, nothing read up front."""

    def __init__(self, hashes: np.ndarray, cols: np.ndarray, offsets: np.ndarray, utf8: np.ndarray) -> None:
        self.hashes, self.cols, self.offsets, self.utf8 = hashes, cols, offsets, utf8

    def term(self, col: int) -> bytes:
        """UTF-8 of the term in column `col`."""
        return bytes(self.utf8[int(self.offsets[col]):int(self.offsets[col + 1])])

    def lookup(self, words: Sequence[str]) -> list[int]:
        if not words:
            return []
        encoded = [_encode(w) for w in words]
        wanted = hash_terms(encoded)
        found = np.searchsorted(self.hashes, wanted)  # binary search: ~log2 V entries of the mapped file
        n = len(self.hashes)
        out = []
        for e, h, pos in zip(encoded, wanted, found.tolist()):
            col = -1
            while pos < n and self.hashes[pos] == h:  # equal hashes: compare the strings themselves
                c = int(self.cols[pos])
                if self.term(c) == e:
                    col = c
                    break
                pos += 1
            out.append(col)
        return out


# --- the index ----------------------------------------------------------------------------------------------

class BM25Index:
    """BM25 weights in CSC form (`data` float32 [nnz], `indices` int32 [nnz], `indptr` int64 [V+1]) over
    `n_docs` passages, and the `vocab` mapping words to columns; `stats` describes the build (None when not
    known)."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n_docs: int, vocab: Vocab,
                 stats: BM25BuildStats | None = None) -> None:
        self.data, self.indices, self.indptr = data, indices, indptr
        self.n_docs = n_docs
        self.vocab = vocab
        self.stats = stats
        self._acc: np.ndarray | None = None  # float32 [n_docs] accumulator of `matched`, all zero between calls

    @classmethod
    def load(cls, path: str | Path, n_docs: int) -> BM25Index:
        """Open the index files in `path` memory-mapped (reads only the ``.npy`` headers)."""
        path = Path(path)
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in _ARRAYS}
        vocab = HashedVocab(arrays["vocab_hash"], arrays["vocab_col"], arrays["vocab_offsets"], arrays["vocab_utf8"])
        return cls(arrays["data"], arrays["indices"], arrays["indptr"], n_docs, vocab)

    @property
    def n_terms(self) -> int:
        """Vocabulary size V (columns), bm25s's empty token included."""
        return len(self.indptr) - 1

    def columns(self, words: Sequence[str]) -> list[int]:
        """Columns of the indexed `words`, in order (repeats kept, unknown words and "" dropped)."""
        return [c for w, c in zip(words, self.vocab.lookup(words)) if c >= 0 and w]

    def scores(self, cols: Sequence[int]) -> np.ndarray:
        """Score of every passage (float32 [n_docs]) for a query of columns `cols`: bm25s's sum, dense."""
        scores = np.zeros(self.n_docs, dtype=np.float32)
        for c in cols:
            s, e = int(self.indptr[c]), int(self.indptr[c + 1])
            np.add.at(scores, self.indices[s:e], self.data[s:e])
        return scores

    def matched(self, cols: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Passages with a posting of some column in `cols` (int32, distinct, unordered) and their scores
        (float32); every other passage scores 0.

        The sums are bm25s's: each column's weights are added with ``np.add.at`` in the order of `cols`
        into an accumulator over the corpus, allocated once per index (float32 per passage; zeroed pages
        are not resident until touched), and only its touched entries are read and reset, so a query
        costs time in proportion to its postings (a sort-based union of the postings measured 2× slower).
        A passage is new to the query while its accumulated score is 0 (every weight is > 0).
        Not thread-safe.
        """
        if self._acc is None:
            self._acc = np.zeros(self.n_docs, dtype=np.float32)
        acc = self._acc
        fresh = []
        try:
            for c in cols:
                s, e = int(self.indptr[c]), int(self.indptr[c + 1])
                docs = np.asarray(self.indices[s:e])
                fresh.append(docs[acc[docs] == 0])  # distinct within a column: earlier columns' passages repeat
                np.add.at(acc, docs, self.data[s:e])
        except BaseException:
            self._acc = None  # interrupted: start the next query from a fresh accumulator
            raise
        docs = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int32)
        sums = acc[docs]
        acc[docs] = 0
        return docs, sums

    def top_k(self, cols: Sequence[int], k: int) -> list[Hit]:
        """The `k` best passages for columns `cols`, best first: equal to ``base.top_k(self.scores(cols), k)``.

        Matched passages score > 0 (Lucene idf and tfc are positive), the others 0; when fewer than `k`
        match, the rest are the first unmatched positions with score 0. Ties go to smaller positions.
        """
        k = min(k, self.n_docs)
        if k <= 0:
            return []
        docs, sums = self.matched(cols)
        if len(docs) > k:  # keep the k best: all above the k-th score, the smallest positions at it
            kth = np.partition(sums, len(sums) - k)[len(sums) - k]
            above = np.flatnonzero(sums > kth)
            tied = np.flatnonzero(sums == kth)
            tied = tied[np.argsort(docs[tied], kind="stable")[: k - len(above)]]
            keep = np.concatenate([above, tied])
            docs, sums = docs[keep], sums[keep]
        elif len(docs) < k:
            free = np.setdiff1d(np.arange(k, dtype=np.int32), docs, assume_unique=True)[: k - len(docs)]
            docs = np.concatenate([docs, free])
            sums = np.concatenate([sums, np.zeros(len(free), dtype=np.float32)])
        order = np.lexsort((docs, -sums))
        return [Hit(int(docs[i]), float(sums[i])) for i in order]


# --- writing .npy files sequentially ------------------------------------------------------------------------

class _NpyWriter:
    """A 1-D ``.npy`` file of known `length` written front to back: header first, then appended blocks.

    Plain file writes (no memory map, whose dirty pages would count as this process's memory), through
    Python's file object so a full disk raises OSError with its errno.
    """

    def __init__(self, path: Path, dtype: np.dtype | type, length: int) -> None:
        self.path, self.dtype, self.left = path, np.dtype(dtype), int(length)
        self.file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()/__exit__
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.left,)}
        try:
            np.lib.format.write_array_header_1_0(self.file, header)
        except BaseException:
            self.file.close()
            raise

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if len(values) > self.left:
            raise ValueError(f"{self.path}: {len(values)} more values than the {self.left} left")
        self.file.write(memoryview(values).cast("B"))
        self.left -= len(values)

    def close(self) -> None:
        self.file.close()
        if self.left:
            raise RuntimeError(f"{self.path}: {self.left} values missing")

    def __enter__(self) -> _NpyWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.file.close()


def _save_npy(path: Path, values: np.ndarray) -> None:
    with _NpyWriter(path, values.dtype, len(values)) as w:
        w.append(values)


def write_vocab(out_dir: Path, word_to_id: dict[str, int], block: int = 1 << 20) -> None:
    """Write the vocabulary files (hashes sorted with their columns; UTF-8 in column order) to `out_dir`.

    `word_to_id` maps each term to its column 0..V-1 (a bm25s tokenizer's dict, whose insertion order is
    the id order); works in blocks of `block` terms.
    """
    n = len(word_to_id)
    encoded_len = sum(len(_encode(w)) for w in word_to_id)
    hashes = np.empty(n, dtype=np.uint64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    words, ids = iter(word_to_id), iter(word_to_id.values())
    with _NpyWriter(out_dir / "vocab_utf8.npy", np.uint8, encoded_len) as utf8:
        for start in range(0, n, block):
            stop = min(start + block, n)
            got = np.fromiter(itertools.islice(ids, stop - start), dtype=np.int64, count=stop - start)
            if not np.array_equal(got, np.arange(start, stop)):
                raise RuntimeError("the tokenizer's vocabulary is not in id order")  # bm25s without a stemmer is
            encoded = [_encode(w) for w in itertools.islice(words, stop - start)]
            hashes[start:stop] = hash_terms(encoded)
            offsets[start + 1:stop + 1] = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
            offsets[start + 1:stop + 1] += offsets[start]
            utf8.append(np.frombuffer(b"".join(encoded), dtype=np.uint8))
    _save_npy(out_dir / "vocab_offsets.npy", offsets)
    del offsets
    order = np.argsort(hashes, kind="stable")  # equal hashes (collisions) keep column order
    hashes.sort()
    _save_npy(out_dir / "vocab_hash.npy", hashes)
    del hashes
    _save_npy(out_dir / "vocab_col.npy", order.astype(np.int32))


# --- pass 1: sorted runs ------------------------------------------------------------------------------------

class _Runs:
    """Sorted runs of pass 1, in memory or as raw files in a directory.

    Run r holds its distinct terms ascending (``terms`` int32), postings per term (``counts`` int32), and
    per posting, grouped by term with passages ascending, the passage (``docs`` int32) and the term
    frequency (``tf`` uint16, or uint32 when a count does not fit).
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.dtypes: list[dict[str, np.dtype]] = []
        self.n_terms: list[int] = []
        self._memory: list[dict[str, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self.dtypes)

    def _path(self, r: int, field: str) -> Path:
        assert self.directory is not None
        return self.directory / f"run-{r:05d}.{field}"

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        r = len(self.dtypes)
        if self.directory is None:
            self._memory.append(arrays)
        else:
            for field in _RUN_FIELDS:
                with open(self._path(r, field), "wb") as f:
                    f.write(memoryview(np.ascontiguousarray(arrays[field])).cast("B"))
        self.dtypes.append({f: arrays[f].dtype for f in _RUN_FIELDS})
        self.n_terms.append(len(arrays["terms"]))

    def read(self, r: int, field: str, start: int, stop: int) -> np.ndarray:
        if self.directory is None:
            return self._memory[r][field][start:stop]
        dtype = self.dtypes[r][field]
        return np.fromfile(self._path(r, field), dtype=dtype, count=stop - start, offset=start * dtype.itemsize)

    def remove(self) -> None:
        self._memory.clear()
        if self.directory is not None:
            for r in range(len(self.dtypes)):
                for field in _RUN_FIELDS:
                    self._path(r, field).unlink(missing_ok=True)


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


def query_words(texts: Iterable[str], tokenizer: Tokenizer) -> Iterable[list[str]]:
    """Words of each text as `tokenizer` splits them (lower-cased, ``\\w\\w+``), stopwords left out.

    The indexed words among them are what bm25s's ``tokenize(..., update_vocab=False)`` keeps.
    """
    stop = frozenset(tokenizer.stopwords or ())
    for text in texts:
        if tokenizer.lower:
            text = text.lower()
        yield [w for w in tokenizer.splitter(text) if w not in stop]
