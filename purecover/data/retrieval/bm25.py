"""BM25 over a corpus with bm25s; the index is saved under a key of the corpus and settings.

The index directory name is ``bm25-<key>``, where the key hashes the corpus fingerprint, the
tokenizer settings and the bm25s version: a changed corpus gets a new index, an unchanged one
is loaded (arrays are plain ``.npy`` loaded without pickle, vocabularies are JSON).
Ranking ties are broken by corpus position, so results are deterministic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

# bm25s takes its top-k with JAX when JAX is installed, and JAX claims 75% of a GPU's memory when it
# starts (XLA preallocation): on a GPU machine with JAX, importing this module (which the label stage
# does through the candidates reader) took 60 GiB of an H100 before the teacher was loaded. Retrieval is
# CPU work: keep JAX on the CPU unless the user chose otherwise.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

from ...utils.io import disk_full_is_explained
from ..corpus import Corpus
from .base import Hit, top_k

log = logging.getLogger(__name__)

__all__ = ["BM25Retriever"]

_META = "purecover_index.json"
_KEPT = ("the index is saved through a temporary directory, so no partial index is left at that path, and it "
         "is rebuilt on the next run; the candidates written so far are kept")


class BM25Retriever:
    """BM25 (bm25s defaults: Lucene variant, k1=1.5, b=0.75) over ``title + text`` of each passage.

    `index_dir`: where to save/load the index (None: in memory only).
    `stopwords`: bm25s stopword list (``"en"``) or None.
    After construction, `from_cache` tells whether the index was loaded instead of built.
    `empty_queries` counts queries with no indexed word (they score every passage 0).
    """

    def __init__(self, corpus: Corpus, index_dir: str | Path | None = None, stopwords: str | None = "en",
                 show_progress: bool = False) -> None:
        if len(corpus) == 0:
            raise ValueError(f"corpus {corpus.source!r} is empty: nothing to index")
        self.corpus = corpus
        self.stopwords = stopwords
        self.show_progress = show_progress
        self.empty_queries = 0
        self.from_cache = False
        settings = {"corpus": corpus.fingerprint, "stopwords": stopwords, "bm25s": bm25s.__version__,
                    "method": "lucene", "k1": 1.5, "b": 0.75, "text": "title+text"}
        self.key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        self.path = Path(index_dir) / f"bm25-{self.key}" if index_dir is not None else None
        if self.path is not None and (self.path / _META).is_file():
            self._load(self.path)
            self.from_cache = True
        else:
            self._build()
            if self.path is not None:
                self._save(self.path, settings)

    def _new_tokenizer(self) -> Tokenizer:
        return Tokenizer(stopwords=self.stopwords if self.stopwords else None)

    def _build(self) -> None:
        self.tokenizer = self._new_tokenizer()
        texts = [d.contents for d in self.corpus.docs]
        ids = self.tokenizer.tokenize(texts, update_vocab=True, return_as="ids", show_progress=self.show_progress)
        self.model = bm25s.BM25()
        self.model.index(self.tokenizer.to_tokenized_tuple(ids), show_progress=self.show_progress)

    def _save(self, path: Path, settings: dict[str, object]) -> None:
        """Write the index to a temporary sibling directory and rename it to `path` when complete.

        `path` is only ever a whole index (the metadata file is written last, then the rename), so a
        failed or killed save is never loaded as a cache. A full disk raises `DiskFullError` naming
        the index directory.
        """
        with disk_full_is_explained(path, _KEPT):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
            try:
                self.model.save(str(tmp))
                self.tokenizer.save_vocab(str(tmp))
                (tmp / _META).write_text(json.dumps({"settings": settings, "n_docs": len(self.corpus)}, indent=2))
                if path.exists():  # a concurrent writer won, or a stale partial directory
                    shutil.rmtree(path)
                tmp.rename(path)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        log.info("saved BM25 index (%d passages) to %s", len(self.corpus), path)

    def _load(self, path: Path) -> None:
        meta = json.loads((path / _META).read_text())
        if meta.get("n_docs") != len(self.corpus):
            raise ValueError(f"BM25 index {path} has {meta.get('n_docs')} passages, corpus has {len(self.corpus)}")
        self.tokenizer = self._new_tokenizer()
        self.tokenizer.load_vocab(str(path))
        self.model = bm25s.BM25.load(str(path), mmap=False)
        log.info("loaded BM25 index from %s", path)

    def _query_ids(self, query: str) -> list[int]:
        words = self.tokenizer.tokenize([query], update_vocab=False, return_as="string", show_progress=False)[0]
        vocab = self.model.vocab_dict  # word -> index row
        return [vocab[w] for w in words if w and w in vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for `query` (float32, length = corpus size)."""
        ids = self._query_ids(query)
        if not ids:
            self.empty_queries += 1
            return np.zeros(len(self.corpus), dtype=np.float32)
        return self.model.get_scores_from_ids(ids)

    def search(self, queries: list[str], k: int, allowed: list[np.ndarray] | None = None) -> list[list[Hit]]:
        """Top-`k` passages per query; `allowed[i]` optionally restricts query i to some positions."""
        results = []
        for i, q in enumerate(queries):
            s = self.scores(q)
            results.append(top_k(s, k, None if allowed is None else allowed[i]))
        return results
