"""BM25 over a corpus, with bm25s's scores; the index is saved under a key of the corpus and settings.

The index directory is ``<index_dir>/bm25-<key>``, where the key hashes the corpus fingerprint, the
tokenizer settings, the bm25s version, the BM25 parameters and the index format: a changed corpus gets
a new index, an unchanged one is loaded. The files and the build are described in
`purecover.data.retrieval.bm25_index`: the build streams the corpus in chunks with bounded memory (the
vocabulary dict aside), and loading maps the arrays (milliseconds, no dict, whatever the size).

A build writes into a temporary sibling (``.bm25-<key>.XXXX``), writes ``purecover_index.json`` last (with
the size and CRC-32 of every array file) and renames the directory into place, so the final path only ever
holds a whole index: a killed build leaves nothing there and the next run builds again. Opening checks the
files against that record (`purecover.utils.built_files`: sizes always, the CRC-32 of a file changed since its
last check, or of every file with ``verify="always"``); a file that differs (a truncated ``data.npy``, a
shuffled or reversed array) or metadata that does not fit the corpus is named in a warning and the index is
built again. A per-key lock (``.bm25-<key>.lock``) makes a second process wait for the first and then
load its index instead of building it twice. Ranking ties are broken by corpus position.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

# bm25s takes its top-k with JAX when JAX is installed, and JAX claims 75% of a GPU's memory when it
# starts (XLA preallocation): on a GPU machine with JAX, importing this module (which the label stage
# does through the candidates reader) took 60 GiB of an H100 before the teacher was loaded. Retrieval is
# CPU work: keep JAX on the CPU unless the user chose otherwise.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import bm25s
import numpy as np

from ...records import BM25BuildStats, BM25IndexMeta, BM25Settings, RecordError, load_json_record
from ...utils.built_files import check_built_files, record_built_files, write_stamp
from ...utils.index_lock import building_directory, key_lock
from ...utils.io import disk_full_is_explained
from ..corpus import CorpusLike
from .base import Hit, top_k
from .bm25_index import (
    BUCKET_POSTINGS,
    FORMAT_VERSION,
    INDEX_FILES,
    K1,
    READ_BATCH,
    RUN_TOKENS,
    B,
    BM25Index,
    build_index,
    new_tokenizer,
    query_words,
)

log = logging.getLogger(__name__)

__all__ = ["BM25Retriever"]

_META = "purecover_index.json"
_KEPT = ("the index is saved through a temporary directory, so no partial index is left at that path, and it "
         "is rebuilt on the next run; the candidates written so far are kept")


class BM25Retriever:
    """BM25 (bm25s's Lucene variant, k1=1.5, b=0.75) over ``title + text`` of each passage.

    `index_dir`: where to save/load the index (None: built in memory, for small corpora).
    `stopwords`: bm25s stopword list (``"en"``) or None.
    `read_batch`, `run_tokens`, `bucket_postings`: memory knobs of the build (see `bm25_index`); they do
    not change the index. `verify` (``data.index_verify``): ``changed`` or ``always`` (see the module docstring).
    After construction, `from_cache` tells whether the index was loaded instead of built, `key` and `path`
    name it, and `empty_queries` counts queries with no indexed word (they score every passage 0).
    """

    def __init__(self, corpus: CorpusLike, index_dir: str | Path | None = None, stopwords: str | None = "en",
                 show_progress: bool = False, *, read_batch: int = READ_BATCH, run_tokens: int = RUN_TOKENS,
                 bucket_postings: int = BUCKET_POSTINGS, verify: str = "changed") -> None:
        if verify not in ("changed", "always"):
            raise ValueError(f"verify must be changed or always, got {verify!r}")
        if len(corpus) == 0:
            raise ValueError(f"corpus {corpus.source!r} is empty: nothing to index")
        self.corpus = corpus
        self.stopwords = stopwords
        self.show_progress = show_progress
        self.empty_queries = 0
        self.from_cache = False
        self.verify = verify
        self._knobs = {"read_batch": read_batch, "run_tokens": run_tokens, "bucket_postings": bucket_postings}
        self.settings = BM25Settings(corpus=corpus.fingerprint, stopwords=stopwords, bm25s=bm25s.__version__,
                                     method="lucene", k1=K1, b=B, text="title+text", format=FORMAT_VERSION)
        self.key = hashlib.sha256(json.dumps(self.settings.to_json_dict(), sort_keys=True).encode()).hexdigest()[:16]
        self.path = Path(index_dir) / f"bm25-{self.key}" if index_dir is not None else None
        self.tokenizer = new_tokenizer(stopwords)  # for queries: its splitting rules, not its vocabulary
        if self.path is None:
            index = build_index(corpus, None, stopwords, show_progress=show_progress, **self._knobs)
            assert isinstance(index, BM25Index)
            self.index = index
        else:
            self.index = self._open_or_build(self.path)

    # --- the index on disk --------------------------------------------------------------------------------

    def _open_or_build(self, path: Path) -> BM25Index:
        built = False
        if not self._usable(path, self.verify):
            with disk_full_is_explained(path, _KEPT):
                path.parent.mkdir(parents=True, exist_ok=True)
                with key_lock(path.parent / f".{path.name}.lock", f"the BM25 index {path}"):
                    if not self._usable(path, self.verify, warn=False):  # unless another process built it meanwhile
                        self._build(path)
                        built = True
        self.from_cache = not built
        return self._load(path)

    def _usable(self, path: Path, verify: str, warn: bool = True) -> bool:
        """Whether `path` holds a whole index of this corpus whose files are as built; a damaged one is named in a
        warning (and then built again)."""
        if not (path / _META).is_file():
            return False
        try:
            meta = load_json_record(path / _META, BM25IndexMeta)
        except (OSError, RecordError) as exc:
            problem: str | None = str(exc)
        else:
            if meta.n_docs != len(self.corpus):
                problem = f"{path / _META} records {meta.n_docs} passages, the corpus has {len(self.corpus)}"
            elif meta.files is None:
                problem = f"{path / _META} records no checksums (built by an earlier version)"
            else:
                check = check_built_files(path, meta.files, _META, full=verify == "always")
                if check.read:
                    log.info("BM25 index %s: checked %d files against their build checksums (%.0f MB, %.2f s)", path,
                             len(check.read), check.bytes_read / 1e6, check.seconds)
                problem = check.problem
        if problem is not None and warn:
            log.warning("BM25 index %s does not hold what was built (%s): the index is built again", path, problem)
        return problem is None

    def _build(self, path: Path) -> None:
        """Build the index in a temporary sibling of `path` and rename it to `path` when complete.

        `path` is only ever a whole index (the metadata file is written last, then the rename), so a
        failed or killed build is never loaded. A full disk raises `DiskFullError` naming the index.
        """
        log.info("building the BM25 index of %s (%d passages) in %s", self.corpus.source, len(self.corpus), path)
        with building_directory(path, _META) as tmp:
            stats = build_index(self.corpus, tmp, self.stopwords, show_progress=self.show_progress, **self._knobs)
            assert isinstance(stats, BM25BuildStats)
            meta = BM25IndexMeta(settings=self.settings, n_docs=len(self.corpus), source=self.corpus.source,
                                 build=stats, files=record_built_files(tmp, INDEX_FILES))
            (tmp / _META).write_text(json.dumps(meta.to_json_dict(), indent=2), encoding="utf-8")
        write_stamp(path, INDEX_FILES, _META)  # after the rename: the build directory's chmod moved the files' ctime
        log.info("saved BM25 index (%d passages) to %s", len(self.corpus), path)

    def _load(self, path: Path) -> BM25Index:
        meta = load_json_record(path / _META, BM25IndexMeta)  # `_usable` checked it
        index = BM25Index.load(path, len(self.corpus))
        index.stats = meta.build
        log.info("loaded BM25 index from %s", path)
        return index

    # --- queries ------------------------------------------------------------------------------------------

    def _columns(self, queries: list[str]) -> list[list[int]]:
        """Index columns of each query's indexed words, in query order (repeats kept)."""
        words = list(query_words(queries, self.tokenizer))
        distinct = list(dict.fromkeys(w for ws in words for w in ws))
        column = dict(zip(distinct, self.index.vocab.lookup(distinct)))
        cols = [[column[w] for w in ws if w and column[w] >= 0] for ws in words]
        self.empty_queries += sum(not c for c in cols)
        return cols

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for `query` (float32, length = corpus size)."""
        return self.index.scores(self._columns([query])[0])

    def search(self, queries: list[str], k: int, allowed: list[np.ndarray] | None = None) -> list[list[Hit]]:
        """Top-`k` passages per query, best first, ties → earlier position.

        Without `allowed`, only the postings of each query's words are read (no array over the corpus);
        `allowed[i]` (int positions) restricts query i to those passages (scored densely: small corpora).
        """
        results = []
        for i, cols in enumerate(self._columns(queries)):
            if allowed is None:
                results.append(self.index.top_k(cols, k))
            else:
                results.append(top_k(self.index.scores(cols), k, allowed[i]))
        return results
