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

The code is in three modules, re-exported here: `purecover.data.retrieval.bm25_search` (the tokenizer, the
vocabularies and `BM25Index`: searching), `purecover.data.retrieval.bm25_store` (the ``.npy`` writer, the
vocabulary files and the sorted runs: storing) and `purecover.data.retrieval.bm25_build` (the two passes and
`build_index`: building).
"""

from __future__ import annotations

from .bm25_build import BUCKET_POSTINGS, K1, READ_BATCH, RUN_TOKENS, SCORE_BLOCK, B, build_index
from .bm25_search import INDEX_FILES, BM25Index, hash_terms, new_tokenizer, query_words
from .bm25_store import _NpyWriter as _NpyWriter  # the writer and the runs the disk-full tests break into
from .bm25_store import _Runs as _Runs
from .bm25_store import write_vocab

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
