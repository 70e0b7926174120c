"""FAISS indexes from embedding shards: factories, memory-mapped loading, search parameters, the GPU guard."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from purecover.data.corpus import Corpus
from purecover.data.retrieval.embedding_shards import encode_shards, read_manifest, read_shards
from purecover.data.retrieval.faiss_index import (
    apply_search_params,
    build_faiss_index,
    load_faiss_index,
    metadata_path,
    read_index_metadata,
    training_positions,
)
from purecover.utils.built_files import crc32_of
from tests.data.retrieval.dense_helpers import HashEncoder, synthetic_docs

faiss = pytest.importorskip("faiss")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """300 passages of well-separated 32-dim unit vectors in shards of 64."""
    out = tmp_path_factory.mktemp("shards")
    encode_shards(Corpus(synthetic_docs(300), "synthetic-300"), HashEncoder(32), out, shard_size=64, model_name="hash")
    return out


def _all(shard_dir) -> np.ndarray:
    return np.concatenate([e for _, e in read_shards(shard_dir)]).astype(np.float32)


def test_training_positions_are_evenly_spaced_and_bounded():
    assert training_positions(5, 10).tolist() == [0, 1, 2, 3, 4]
    pos = training_positions(1000, 10)
    assert len(pos) == 10 and pos[0] == 0 and pos[-1] == 999 and np.all(np.diff(pos) > 0)


def test_flat_index_is_exact_and_memory_mapped(shards, tmp_path, caplog):
    path = build_faiss_index(shards, "Flat", tmp_path / "flat.index")
    meta = read_index_metadata(path)
    assert meta is not None and (meta.factory, meta.ntotal, meta.dim, meta.shards_key, meta.metric) == (
        "Flat", 300, 32, read_manifest(shards).key, "inner_product")
    written = json.loads(metadata_path(path).read_text())
    assert written["trained_on"] == 0 and list(written) == [
        "format_version", "factory", "metric", "ntotal", "dim", "shards_key", "trained_on", "seed", "faiss_version",
        "files"]
    assert written["files"] == {"flat.index": {"bytes": path.stat().st_size, "crc32": crc32_of(path)}}
    assert json.dumps(meta.to_json_dict(), ensure_ascii=False, indent=2) + "\n" == metadata_path(path).read_text()
    with caplog.at_level(logging.INFO, logger="purecover.data.retrieval.faiss_index"):
        index = load_faiss_index(path, mmap=True)
    assert "IO_FLAG_MMAP_IFC" in caplog.text
    emb = _all(shards)
    scores, idx = index.search(emb[:5], 3)
    exact = emb[:5] @ emb.T
    assert idx[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert np.allclose(scores, np.sort(exact, axis=1)[:, ::-1][:, :3], atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flat.index", "flat.index.json", "flat.index.verified.json"]


# "np": no polysemous training (FAISS's default for PQ factories; ~4 s on 2 cores for 4 sub-quantizers).
@pytest.mark.parametrize(("factory", "params"), [("IVF4,Flat", "nprobe=4"), ("IVF4,PQ4np", "nprobe=4"),
                                                 ("HNSW8", "efSearch=64")])
def test_approximate_factories_find_each_passage_itself(shards, tmp_path, factory, params):
    path = build_faiss_index(shards, factory, tmp_path / "x.index", train_size=280, seed=0)
    meta = read_index_metadata(path)
    assert meta is not None and meta.trained_on == (0 if factory.startswith("HNSW") else 280)
    index = load_faiss_index(path, mmap=True)
    apply_search_params(index, params)
    emb = _all(shards)
    _, idx = index.search(emb, 1)
    assert idx[:, 0].tolist() == list(range(300))


def test_search_params_errors_name_the_parameter(shards, tmp_path):
    ivf = load_faiss_index(build_faiss_index(shards, "IVF4,Flat", tmp_path / "ivf.index"))
    apply_search_params(ivf, " nprobe = 2 ")
    assert faiss.extract_index_ivf(ivf).nprobe == 2
    apply_search_params(ivf, None)
    with pytest.raises(ValueError, match=r"'efSearch' \(in 'nprobe=2,efSearch=16'\) does not apply .*IndexIVFFlat"):
        apply_search_params(ivf, "nprobe=2,efSearch=16")
    with pytest.raises(ValueError, match="'nprobe' in 'nprobe' is not name=value"):
        apply_search_params(ivf, "nprobe")
    with pytest.raises(ValueError, match="nprobe='many'"):
        apply_search_params(ivf, "nprobe=many")
    flat = faiss.IndexFlatIP(4)
    with pytest.raises(ValueError, match="'nprobe'"):
        apply_search_params(flat, "nprobe=8")


def test_bad_factory_and_missing_index_are_clear(shards, tmp_path):
    with pytest.raises(ValueError, match="factory 'IVF4,Bogus' is not valid for 32 dims"):
        build_faiss_index(shards, "IVF4,Bogus", tmp_path / "x.index")
    with pytest.raises(FileNotFoundError, match=r"nothing\.index does not exist"):
        load_faiss_index(tmp_path / "nothing.index")


@pytest.mark.parametrize("factory", ["IVF4,PQ4x4", "IVF4,Flat", "PCA16,IVF4,Flat", "HNSW8"])
def test_the_gpu_path_builds_the_same_index(shards, tmp_path, monkeypatch, factory):
    """A stand-in "GPU" (CPU clones) runs the GPU code path: k-means and list assignment on the clone.

    The two builds' files are equal byte for byte (so a build is also deterministic)."""
    cpu = build_faiss_index(shards, factory, tmp_path / "cpu.index", use_gpu=False)
    cloned = []

    def fake_gpu(index, ngpu=1):
        cloned.append(type(faiss.downcast_index(index)).__name__)
        return faiss.clone_index(index)

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", fake_gpu)
    gpu = build_faiss_index(shards, factory, tmp_path / "gpu.index")
    expected = {"IVF4,PQ4x4": ["IndexFlat", "IndexFlat"], "IVF4,Flat": ["IndexFlat", "IndexFlat"],
                "PCA16,IVF4,Flat": ["IndexFlat"], "HNSW8": []}[factory]
    assert cloned == expected
    assert gpu.read_bytes() == cpu.read_bytes()


def test_without_a_gpu_version_the_build_falls_back_to_the_cpu(shards, tmp_path, monkeypatch, caplog):
    calls = []

    def no_gpu_version(index, ngpu=1):
        calls.append(type(faiss.downcast_index(index)).__name__)
        raise RuntimeError("Error: not implemented for this index type")

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", no_gpu_version)
    with caplog.at_level(logging.INFO, logger="purecover.data.retrieval.faiss_index"):
        path = build_faiss_index(shards, "IVF4,Flat", tmp_path / "ivf.index")
    assert calls == ["IndexFlat", "IndexFlat"] and "no GPU version" in caplog.text
    assert path.read_bytes() == build_faiss_index(shards, "IVF4,Flat", tmp_path / "cpu.index", use_gpu=False).read_bytes()
    with pytest.raises(RuntimeError, match="use_gpu=True"):
        monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
        build_faiss_index(shards, "Flat", tmp_path / "x.index", use_gpu=True)


def test_ivf_training_takes_forty_rows_per_list(tmp_path, caplog):
    import logging

    import numpy as np

    from purecover.data.retrieval import faiss_index

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((400, 8)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    with caplog.at_level(logging.INFO, logger="purecover.data.retrieval.faiss_index"):
        index = faiss_index.build_index(lambda: [(0, emb)], 400, 8, "IVF8,Flat", train_size=50)
    assert index.ntotal == 400
    assert "training sample raised from 50 to 320 rows (40 per IVF list)" in caplog.text
    assert "training FAISS IVF8,Flat on 320 of 400 rows" in caplog.text
