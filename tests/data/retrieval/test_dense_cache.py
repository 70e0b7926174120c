"""DenseRetriever over cached shards with a tiny encoder: FAISS = numpy, factories, prebuilt indexes, keys, dtype."""

from __future__ import annotations

import fcntl
import logging
import threading

import numpy as np
import pytest

from purecover.data.corpus import Corpus
from purecover.data.retrieval import dense
from purecover.data.retrieval.dense import DenseRetriever
from purecover.data.retrieval.embedding_shards import read_shards
from tests.data.retrieval.dense_helpers import synthetic_docs

faiss = pytest.importorskip("faiss")

DUPLICATES = 4  # passages 116..119 repeat passages 0..3: equal scores, broken by position


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus(synthetic_docs(120, duplicates=DUPLICATES), "synthetic-120")


@pytest.fixture(scope="module")
def cached(corpus, tiny_encoder, tmp_path_factory) -> DenseRetriever:
    return DenseRetriever(corpus, str(tiny_encoder), cache_dir=tmp_path_factory.mktemp("cache"), shard_size=32,
                          device="cpu")


def _queries(corpus: Corpus) -> list[str]:
    return [corpus[0].contents, corpus[2].contents, "harbour ship salt wind", "a castle on an island in the lake"]


def _same(a, b) -> None:
    assert [[h.index for h in row] for row in a] == [[h.index for h in row] for row in b]
    assert np.allclose([[h.score for h in row] for row in a], [[h.score for h in row] for row in b], atol=1e-5)


def test_flat_faiss_numpy_and_in_memory_agree_with_the_tie_rule(cached, corpus, tiny_encoder, monkeypatch):
    assert not cached.from_cache and cached.index is not None and cached.index.ntotal == 120
    files = sorted(p.name for p in cached.shard_dir.iterdir())
    assert files == ["faiss-" + cached.index_file.name[6:], cached.index_file.name + ".json",
                     cached.index_file.name + ".verified.json", "manifest.json",
                     *[f"shard-{i:06d}.safetensors" for i in range(4)]]
    queries = _queries(corpus)
    hits = cached.search(queries, 6)
    assert [h.index for h in hits[0][:2]] == [0, 116] and hits[0][0].score == hits[0][1].score
    assert [h.index for h in hits[1][:2]] == [2, 118]
    numpy_held = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cached.shard_dir.parent, shard_size=32,
                                use_faiss=False, device="cpu")
    assert numpy_held.from_cache and numpy_held.index is None
    _same(numpy_held.search(queries, 6), hits)
    monkeypatch.setattr(dense, "HOLD_IN_MEMORY_BYTES", 0)  # stream the shards: running top-k across 4 blocks
    streamed = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cached.shard_dir.parent, shard_size=32,
                              use_faiss=False, device="cpu")
    assert streamed._embeddings is None
    _same(streamed.search(queries, 6), hits)
    in_memory = DenseRetriever(corpus, str(tiny_encoder), shard_size=32, device="cpu")
    _same(in_memory.search(queries, 6), hits)
    assert np.array_equal(in_memory.embeddings, cached.embeddings)
    assert [len(r) for r in cached.search(queries[:1], 500)] == [120]
    assert cached.search(queries[:2], 0) == [[], []] and cached.search([], 3) == []


def test_search_encodes_all_queries_in_one_call_and_allowed_restricts(cached, corpus, monkeypatch):
    calls = []
    encode = cached.model.encode
    monkeypatch.setattr(cached.model, "encode", lambda texts, **kw: calls.append(len(texts)) or encode(texts, **kw))
    queries = _queries(corpus)
    rows = cached.search(queries, 3, allowed=[None, np.array([118, 5, 2, 7]), None, np.array([], dtype=int)])
    assert calls == [4]
    assert rows[0] == cached.search(queries[:1], 3)[0]
    assert [h.index for h in rows[1]][:2] == [118, 2]  # equal scores: the tie goes to the first in `allowed`
    assert rows[3] == []


def test_other_factories_reuse_the_shards(cached, corpus, tiny_encoder):
    for factory, params in (("IVF4,Flat", "nprobe=4"), ("HNSW8", "efSearch=32")):
        other = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cached.shard_dir.parent, shard_size=32,
                               index_factory=factory, search_params=params, device="cpu")
        assert other.from_cache and other.shard_dir == cached.shard_dir and other.index_file != cached.index_file
        assert [row[0].index for row in other.search([corpus[i].contents for i in (5, 60, 100)], 1)] == [5, 60, 100]
    with pytest.raises(ValueError, match="'efSearch'"):
        DenseRetriever(corpus, str(tiny_encoder), cache_dir=cached.shard_dir.parent, shard_size=32,
                       search_params="efSearch=8", device="cpu")


def test_a_changed_corpus_gets_a_new_key_and_float16_keeps_the_ranking(cached, corpus, tiny_encoder):
    cache = cached.shard_dir.parent
    again = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cache, shard_size=32, device="cpu")
    assert again.from_cache and again.key == cached.key
    changed = Corpus([*corpus.docs[:-1], synthetic_docs(1, seed=9)[0]], "synthetic-120b")
    other = DenseRetriever(changed, str(tiny_encoder), cache_dir=cache, shard_size=32, device="cpu")
    assert not other.from_cache and other.key != cached.key and other.shard_dir != cached.shard_dir
    half = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cache, shard_size=32, embedding_dtype="float16",
                          device="cpu")
    assert not half.from_cache and half.key not in (cached.key, other.key)
    assert {e.dtype for _, e in read_shards(half.shard_dir)} == {np.dtype(np.float16)}
    query = [corpus[7].contents]
    assert [h.index for h in half.search(query, 1)[0]] == [h.index for h in cached.search(query, 1)[0]] == [7]


def test_a_prebuilt_index_is_used_as_given(cached, corpus, tiny_encoder, tmp_path):
    flat = faiss.IndexFlatIP(32)
    flat.add(cached.embeddings)
    path = tmp_path / "e5_Flat.index"
    faiss.write_index(flat, str(path))
    cache = tmp_path / "cache"
    given = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cache, index_path=path, device="cpu")
    assert given.from_cache and given.index_file == path and given.shard_dir is None
    assert not cache.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["e5_Flat.index"]
    queries = _queries(corpus)
    _same(given.search(queries, 5), cached.search(queries, 5))
    allowed = [np.array([3, 9, 118, 2])] * len(queries)
    _same(given.search(queries, 2, allowed=allowed), cached.search(queries, 2, allowed=allowed))


def test_a_prebuilt_index_that_does_not_fit_is_refused_in_one_line(cached, corpus, tiny_encoder, tmp_path):
    path = tmp_path / "wiki_Flat.index"
    faiss.write_index(faiss.IndexFlatIP(32), str(path))
    fewer = faiss.IndexFlatIP(32)
    fewer.add(cached.embeddings[:-1])
    faiss.write_index(fewer, str(path))
    with pytest.raises(ValueError) as err:
        DenseRetriever(corpus, str(tiny_encoder), index_path=path, device="cpu")
    message = str(err.value)
    assert f"FAISS index {path} holds 119 vectors, corpus synthetic-120 has 120 passages" in message
    assert "\n" not in message
    narrow = faiss.IndexFlatIP(16)
    narrow.add(np.ascontiguousarray(cached.embeddings[:, :16]))
    faiss.write_index(narrow, str(path))
    with pytest.raises(ValueError) as err:
        DenseRetriever(corpus, str(tiny_encoder), index_path=path, device="cpu")
    message = str(err.value)
    assert str(path) in message and str(tiny_encoder) in message and "synthetic-120" in message
    assert "16-dimensional" in message and "gives 32" in message and "\n" not in message


def test_a_second_process_waits_for_the_key_lock(corpus, tiny_encoder, tmp_path, caplog):
    key = dense.dense_cache_key(corpus, str(tiny_encoder), "", "float32", 32)
    lock = tmp_path / f"dense-{key}.lock"
    built: list[DenseRetriever] = []
    with open(lock, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with caplog.at_level(logging.INFO, logger="purecover"):
            worker = threading.Thread(target=lambda: built.append(
                DenseRetriever(corpus, str(tiny_encoder), cache_dir=tmp_path, shard_size=32, device="cpu")))
            worker.start()
            worker.join(timeout=0.5)
            assert worker.is_alive() and not built  # blocked on the lock
            fcntl.flock(held, fcntl.LOCK_UN)
            worker.join(timeout=60)
    assert built and not built[0].from_cache
    assert "waiting for another process building the dense index" in caplog.text and str(lock) in caplog.text


@pytest.mark.parametrize("damage", ["ten_vectors", "truncated", "vectors_edited"])
def test_a_cached_faiss_file_that_does_not_fit_the_corpus_is_rebuilt(corpus, tiny_encoder, tmp_path, caplog, damage):
    """Issue 32, items 3.2 and 3.4: the index file is checked against the corpus (vector count, dimension) and a
    file that does not read or does not fit is rebuilt with a warning naming it, not loaded."""
    cache = tmp_path / "cache"
    first = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cache, shard_size=32, device="cpu")
    want = first.search(_queries(corpus), 5)
    path = first.index_file
    if damage == "ten_vectors":
        small = faiss.IndexFlatIP(first.dim)
        small.add(np.eye(10, first.dim, dtype=np.float32))
        faiss.write_index(small, str(path))  # its .json beside it still says 120 vectors
    elif damage == "vectors_edited":  # same size, still a valid index of 120 vectors: only the checksum tells
        data = bytearray(path.read_bytes())
        data[-400:] = bytes(400)
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(path.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="purecover.data.retrieval.dense"):
        again = DenseRetriever(corpus, str(tiny_encoder), cache_dir=cache, shard_size=32, device="cpu")
    assert again.index.ntotal == len(corpus) and again.index_file == path
    assert str(path) in caplog.text and "rebuilt" in caplog.text
    _same(again.search(_queries(corpus), 5), want)
