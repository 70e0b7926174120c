"""Searching a BM25 index: the tokenizer and term hashing shared with the build, the vocabularies that map
words to columns, and `BM25Index` (memory-mapped load, sparse batched scoring, top k).

The index format, the build and the memory bounds are described in `purecover.data.retrieval.bm25_index`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

# Importing bm25s can start JAX; see purecover.data.retrieval.bm25 (keep JAX off the GPU by default).
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
from bm25s.tokenization import Tokenizer

from ...records import BM25BuildStats
from .base import Hit

_ARRAYS = ("data", "indices", "indptr", "vocab_hash", "vocab_col", "vocab_offsets", "vocab_utf8")
INDEX_FILES = tuple(f"{name}.npy" for name in _ARRAYS)  # what `build_index` writes into its directory


def new_tokenizer(stopwords: str | None) -> Tokenizer:
    """The bm25s tokenizer the index and its queries use (lower-cased, ``\\w\\w+`` words, `stopwords`)."""
    return Tokenizer(stopwords=stopwords if stopwords else None)


def hash_terms(encoded: Sequence[bytes]) -> np.ndarray:
    """64-bit BLAKE2b of each byte string, as uint64 (little-endian digest) [len(encoded)]."""
    digests = b"".join(hashlib.blake2b(e, digest_size=8).digest() for e in encoded)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


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


# --- queries ------------------------------------------------------------------------------------------------

def query_words(texts: Iterable[str], tokenizer: Tokenizer) -> Iterable[list[str]]:
    """Words of each text as `tokenizer` splits them (lower-cased, ``\\w\\w+``), stopwords left out.

    The indexed words among them are what bm25s's ``tokenize(..., update_vocab=False)`` keeps.
    """
    stop = frozenset(tokenizer.stopwords or ())
    for text in texts:
        if tokenizer.lower:
            text = text.lower()
        yield [w for w in tokenizer.splitter(text) if w not in stop]
