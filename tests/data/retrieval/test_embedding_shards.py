"""Sharded, resumable passage encoding: layout, resume after a kill, manifest checks, ranks = one process."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from purecover.data.corpus import Corpus, load_corpus_jsonl
from purecover.data.retrieval.embedding_shards import (
    MANIFEST_NAME,
    ShardManifestError,
    encode_shards,
    launch_rank,
    missing_shards,
    read_manifest,
    read_rows,
    read_shards,
    shard_path,
)
from tests.data.retrieval.dense_helpers import HashEncoder, synthetic_docs, write_corpus_jsonl
from tests.process_helpers import run_and_kill_when

SCRIPT = Path(__file__).with_name("encode_shards_script.py")
REPO = Path(__file__).resolve().parents[3]


def _shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.safetensors"))}


def test_layout_manifest_and_resume(tmp_path):
    corpus = Corpus(synthetic_docs(50), "fifty")
    model = HashEncoder()
    out = tmp_path / "shards"
    done = encode_shards(corpus, model, out, passage_prefix="passage: ", batch_size=4, shard_size=16,
                         model_name="hash")
    assert done == [0, 1, 2, 3] and model.calls == [16, 16, 16, 2]  # one encode call per shard
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert {k: manifest[k] for k in ("n", "shard_size", "model", "passage_prefix", "dtype", "dim", "normalize")} == {
        "n": 50, "shard_size": 16, "model": "hash", "passage_prefix": "passage: ", "dtype": "float32", "dim": 8,
        "normalize": True}
    assert manifest["corpus"] == corpus.fingerprint and manifest["format_version"] == 1
    blocks = list(read_shards(out))
    assert [(s, e.shape, e.dtype) for s, e in blocks] == [(0, (16, 8), np.float32), (16, (16, 8), np.float32),
                                                          (32, (16, 8), np.float32), (48, (2, 8), np.float32)]
    emb = np.concatenate([e for _, e in blocks])
    expected = HashEncoder().encode(["passage: " + d.contents for d in corpus.docs], 4, True, True)
    assert np.allclose(emb, expected, atol=1e-6) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-6)
    assert np.array_equal(read_rows(out, [49, 3, 17]), emb[[49, 3, 17]])
    before = _shard_bytes(out)
    assert encode_shards(corpus, model, out, passage_prefix="passage: ", batch_size=4, shard_size=16,
                         model_name="hash") == []
    shard_path(out, 2).unlink()  # a shard lost: only it is encoded again, with the same bytes
    assert missing_shards(out) == [2]
    assert encode_shards(corpus, model, out, passage_prefix="passage: ", batch_size=4, shard_size=16,
                         model_name="hash") == [2]
    assert _shard_bytes(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_temporaries_of_killed_encoders_of_this_host_are_removed(tmp_path):
    corpus = Corpus(synthetic_docs(10), "ten")
    encode_shards(corpus, HashEncoder(), tmp_path, shard_size=4, model_name="hash")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    stale = tmp_path / f".shard-000001.safetensors.{host}.{dead.pid}.tmp"
    live = tmp_path / f".shard-000002.safetensors.{host}.{os.getpid()}.tmp"
    elsewhere = tmp_path / f".shard-000001.safetensors.other-host.{dead.pid}.tmp"
    for p in (stale, live, elsewhere):
        p.write_bytes(b"partial")
    encode_shards(corpus, HashEncoder(), tmp_path, shard_size=4, model_name="hash")
    assert not stale.exists() and live.exists() and elsewhere.exists()


def test_ranks_split_shards_and_a_rank_finds_only_its_own(tmp_path):
    corpus = Corpus(synthetic_docs(40), "forty")
    one, two = tmp_path / "one", tmp_path / "two"
    encode_shards(corpus, HashEncoder(), one, shard_size=8, model_name="hash")
    assert encode_shards(corpus, HashEncoder(), two, shard_size=8, rank=1, world_size=2, model_name="hash") == [1, 3]
    assert missing_shards(two) == [0, 2, 4]
    with pytest.raises(FileNotFoundError, match="shard-000000"):
        list(read_shards(two))
    assert encode_shards(corpus, HashEncoder(), two, shard_size=8, rank=0, world_size=2, model_name="hash") == [0, 2, 4]
    assert _shard_bytes(one) == _shard_bytes(two)
    assert (one / MANIFEST_NAME).read_bytes() == (two / MANIFEST_NAME).read_bytes()


def test_a_manifest_of_other_settings_is_refused(tmp_path):
    corpus = Corpus(synthetic_docs(10), "ten")
    encode_shards(corpus, HashEncoder(), tmp_path, shard_size=4, model_name="hash")
    with pytest.raises(ShardManifestError, match=r"passage_prefix: '' there, 'passage: ' asked"):
        encode_shards(corpus, HashEncoder(), tmp_path, passage_prefix="passage: ", shard_size=4, model_name="hash")
    with pytest.raises(ShardManifestError, match="dtype"):
        encode_shards(corpus, HashEncoder(), tmp_path, dtype="float16", shard_size=4, model_name="hash")


def test_manifest_keeps_its_key_and_bytes_and_an_edited_one_is_refused(tmp_path):
    corpus = Corpus(synthetic_docs(10), "ten")
    encode_shards(corpus, HashEncoder(), tmp_path, shard_size=4, model_name="hash")
    path = tmp_path / MANIFEST_NAME
    written = json.loads(path.read_text())
    content = {k: v for k, v in written.items() if k not in ("key", "corpus_source")}
    assert written["key"] == hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    manifest = read_manifest(tmp_path)
    assert path.read_text() == json.dumps(manifest.to_json_dict(), indent=2, sort_keys=True) + "\n"
    assert (manifest.n, manifest.shard_size, manifest.dim, manifest.dtype) == (10, 4, 8, "float32")
    path.write_text(json.dumps({**written, "n": "10"}))
    with pytest.raises(ShardManifestError, match="field n: must be an integer"):
        read_manifest(tmp_path)
    path.write_text(json.dumps({**written, "n": 11}))
    with pytest.raises(ShardManifestError, match="or was edited"):
        read_manifest(tmp_path)


def test_float16_shards_are_float16_and_unit_length(tmp_path):
    corpus = Corpus(synthetic_docs(10), "ten")
    encode_shards(corpus, HashEncoder(), tmp_path, dtype="float16", shard_size=4, model_name="hash")
    emb = np.concatenate([e for _, e in read_shards(tmp_path)])
    assert emb.dtype == np.float16 and np.allclose(np.linalg.norm(emb.astype(np.float32), axis=1), 1, atol=2e-3)


def test_launch_rank_reads_torchrun_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launch_rank() == (0, 1)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launch_rank() == (3, 4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4"):
        launch_rank()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    return env


def _retriever(corpus, model, cache, **kw):
    from purecover.data.retrieval.dense import DenseRetriever

    return DenseRetriever(corpus, str(model), cache_dir=cache, shard_size=16, device="cpu", **kw)


@pytest.mark.slow
def test_killed_encoding_resumes_to_the_same_shards_and_results(tmp_path, tiny_encoder, one_thread):
    path = write_corpus_jsonl(tmp_path / "corpus.jsonl", synthetic_docs(100))
    corpus = load_corpus_jsonl(path)
    killed = tmp_path / "killed"

    def first_shard_written() -> bool:
        return any(killed.glob("dense-*/shard-*.safetensors"))

    run_and_kill_when([sys.executable, str(SCRIPT), str(path), str(tiny_encoder), str(killed), "16", "0.5"],
                      first_shard_written, what="sharded encoding", env=_env(), cwd=REPO)
    (shard_dir,) = killed.glob("dense-*")
    left = missing_shards(shard_dir)
    assert 0 < len(left) < 7, left  # killed after one shard, before the last
    resumed = _retriever(corpus, tiny_encoder, killed)
    assert not resumed.from_cache and resumed.shard_dir == shard_dir
    fresh = _retriever(corpus, tiny_encoder, tmp_path / "fresh")
    assert _shard_bytes(shard_dir) == _shard_bytes(fresh.shard_dir)
    queries = [corpus[3].contents, "a river town with a bell", "harbour ship salt"]
    assert resumed.search(queries, 5) == fresh.search(queries, 5)
    assert _retriever(corpus, tiny_encoder, killed).from_cache


@pytest.mark.slow
def test_torchrun_two_processes_write_the_shards_of_one(tmp_path, tiny_encoder, one_thread):
    from purecover.data.retrieval.dense import encode_dense_shards

    path = write_corpus_jsonl(tmp_path / "corpus.jsonl", synthetic_docs(150))
    two, one = tmp_path / "two", tmp_path / "one"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run([*torchrun, str(SCRIPT), str(path), str(tiny_encoder), str(two), "16"], env=_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    dir_one = encode_dense_shards(load_corpus_jsonl(path), str(tiny_encoder), one, shard_size=16, device="cpu",
                                  rank=0, world_size=1)
    (dir_two,) = two.glob("dense-*")
    assert dir_two.name == dir_one.name and missing_shards(dir_two) == []
    assert len(_shard_bytes(dir_one)) == 10 and _shard_bytes(dir_two) == _shard_bytes(dir_one)
    assert (dir_two / MANIFEST_NAME).read_bytes() == (dir_one / MANIFEST_NAME).read_bytes()
