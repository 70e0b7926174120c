"""The chunked BM25 index: bm25s's scores bit for bit, memory-mapped reload, kill safety, the key, the lock."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from purecover.data.corpus import Corpus, Doc
from purecover.data.retrieval import bm25_index, bm25_search, bm25_store
from purecover.data.retrieval.base import top_k
from purecover.data.retrieval.bm25 import _META, BM25Retriever
from tests.data.retrieval.bm25_helpers import (
    QUERIES,
    SMALL,
    Bm25sReference,
    generated_corpus,
    generated_queries,
)
from tests.process_helpers import run_and_kill_when

ROOT = Path(__file__).resolve().parents[3]
N = 3000
FILES = ("data", "indices", "indptr", "vocab_hash", "vocab_col", "vocab_offsets", "vocab_utf8")


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return generated_corpus(N)


@pytest.fixture(scope="module")
def reference(corpus) -> Bm25sReference:
    return Bm25sReference(corpus)


def _assert_same_as_bm25s(r: BM25Retriever, ref: Bm25sReference, queries: list[str]) -> None:
    empty = 0
    for q in queries:
        expected = ref.scores(q)
        got = r.scores(q)
        assert got.dtype == np.float32 and np.array_equal(got, expected), q
        matched = int(np.count_nonzero(expected))
        empty += matched == 0
        for k in (1, 20, matched + 7):
            assert r.search([q], k) == [top_k(expected, k)], (q, k)
    assert r.search(queries, 20) == [top_k(ref.scores(q), 20) for q in queries]  # one batch = one by one
    assert empty >= 3  # the queries include some with no indexed word


def test_chunked_build_gives_bm25s_scores_bit_for_bit(corpus, reference):
    r = BM25Retriever(corpus, **SMALL)
    assert r.index.stats is not None and r.index.stats.runs > 5 and r.index.stats.buckets > 5  # really chunked
    model = reference.model.scores
    for name in ("data", "indices", "indptr"):  # the very same matrix, column for column
        assert np.array_equal(getattr(r.index, name), model[name]), name
    assert r.index.data.dtype == np.float32
    _assert_same_as_bm25s(r, reference, generated_queries(150))
    assert r.empty_queries > 0


def test_without_stopwords_and_with_default_chunks(corpus):
    small = generated_corpus(400, seed=3)
    ref = Bm25sReference(small, stopwords=None)
    r = BM25Retriever(small, stopwords=None)
    assert r.index.stats is not None and r.index.stats.runs == 1 and r.index.stats.buckets == 1
    assert r.index.stats.passages == len(small) and r.index.stats.postings == len(r.index.data)
    assert np.array_equal(r.index.data, ref.model.scores["data"])
    _assert_same_as_bm25s(r, ref, [*generated_queries(40), "the of and was"])


def test_equal_scores_go_to_the_smaller_position_at_the_kth_place(tmp_path):
    # passages 0-4 hold "beta", 5-9 "alpha", all of one length: "alpha beta" scores all ten equally, and the
    # postings of "alpha" (5-9) are read first; the top 3 must still be 0, 1, 2
    docs = [Doc(str(i), "", f"{'beta' if i < 5 else 'alpha'} pad{i}") for i in range(10)]
    docs += [Doc(str(i), "", f"other{i} pad{i}") for i in range(10, 14)]
    for r in (BM25Retriever(Corpus(docs, "ties")), BM25Retriever(Corpus(docs, "ties"), index_dir=tmp_path)):
        full = r.scores("alpha beta")
        assert len(set(full[:10].tolist())) == 1 and full[10:].max() == 0
        for k in (1, 3, 7, 12):
            assert r.search(["alpha beta"], k) == [top_k(full, k)]
        assert [h.index for h in r.search(["alpha beta"], 3)[0]] == [0, 1, 2]
        assert [h.index for h in r.search(["alpha beta"], 12)[0]][10:] == [10, 11]


def test_index_on_disk_is_reloaded_memory_mapped_with_the_same_results(corpus, reference, tmp_path):
    built = BM25Retriever(corpus, index_dir=tmp_path, **SMALL)
    assert not built.from_cache and (built.path / _META).is_file()
    assert sorted(p.name for p in built.path.iterdir()) == sorted([_META, "verified.json", *(f"{f}.npy" for f in FILES)])
    started = time.perf_counter()
    again = BM25Retriever(corpus, index_dir=tmp_path)  # other build knobs: same key
    assert time.perf_counter() - started < 1.0
    assert again.from_cache and again.path == built.path
    index = again.index
    for name in ("data", "indices", "indptr"):
        assert isinstance(getattr(index, name), np.memmap), name  # mapped, not read
    assert isinstance(index.vocab.hashes, np.memmap) and isinstance(index.vocab.utf8, np.memmap)
    assert not hasattr(index.vocab, "word_to_id")
    assert np.array_equal(index.data, reference.model.scores["data"])
    _assert_same_as_bm25s(again, reference, generated_queries(60))
    assert again.search(QUERIES, 5) == built.search(QUERIES, 5)
    vocab = reference.tokenizer.word_to_id  # every term maps to its bm25s column
    assert index.vocab.lookup(list(vocab)) == list(vocab.values())
    assert index.vocab.lookup(["nosuchterm", "Café", "café"]) == [-1, -1, vocab["café"]]
    meta = json.loads((again.path / _META).read_text())
    assert meta["n_docs"] == N and meta["build"]["runs"] > 1 and meta["settings"]["format"] == 3
    assert list(meta) == ["settings", "n_docs", "source", "build", "files"] and list(meta["settings"]) == [
        "corpus", "stopwords", "bm25s", "method", "k1", "b", "text", "format"]
    assert (again.path / _META).read_text() == json.dumps(meta, indent=2)  # as the dict it replaces wrote it
    assert index.stats is not None and index.stats.to_json_dict() == meta["build"] and again.settings.k1 == 1.5
    assert [p.name for p in tmp_path.iterdir() if p.name != f".{built.path.name}.lock"] == [built.path.name]


def test_hash_collisions_never_give_another_terms_column(corpus, reference, tmp_path, monkeypatch):
    real = bm25_index.hash_terms
    for module in (bm25_search, bm25_store):  # the lookups and the vocabulary files hash alike: all collide
        monkeypatch.setattr(module, "hash_terms", lambda encoded: real(encoded) % np.uint64(3))
    r = BM25Retriever(corpus, index_dir=tmp_path, **SMALL)
    assert len(np.unique(np.asarray(r.index.vocab.hashes))) == 3
    vocab = reference.tokenizer.word_to_id
    assert r.index.vocab.lookup([*vocab, "nosuchterm"]) == [*vocab.values(), -1]
    _assert_same_as_bm25s(r, reference, generated_queries(30))


def _child(index_dir: Path, sleep_read: float = 0.0, sleep_write: float = 0.0, gate: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "tests.data.retrieval.bm25_helpers", str(index_dir), str(N), str(sleep_read),
            str(sleep_write), *([str(gate)] if gate else [])]


def _building(index_dir: Path, pattern: str) -> bool:
    return any(index_dir.glob(f".bm25-*/{pattern}"))


@pytest.mark.parametrize(("when", "sleeps", "ready"), [
    ("after the first sorted run", (0.05, 0.0), "run-00000.tf"),
    ("while writing the weights", (0.0, 0.05), "data.npy"),
])
def test_killed_build_leaves_no_index_and_the_rerun_equals_an_uninterrupted_build(corpus, tmp_path, caplog, when,
                                                                                   sleeps, ready):
    killed = tmp_path / "killed"
    killed.mkdir()
    run_and_kill_when(_child(killed, *sleeps), lambda: _building(killed, ready), what=f"BM25 build ({when})",
                      cwd=ROOT, timeout=60)
    assert not any(p.name.startswith("bm25-") for p in killed.iterdir())  # nothing at the final path
    assert _building(killed, ".building")  # the killed build's temporary directory, marked as ours
    with caplog.at_level(logging.WARNING, logger="purecover"):
        rerun = BM25Retriever(corpus, index_dir=killed, **SMALL)
    assert not rerun.from_cache and "removing the partial build of a killed process" in caplog.text
    assert not [p for p in killed.glob(".bm25-*") if p.is_dir()], "the rerun removes the killed build's directory"
    whole = BM25Retriever(corpus, index_dir=tmp_path / "whole", read_batch=500)
    assert rerun.key == whole.key
    for name in FILES:
        a, b = (np.load(r.path / f"{name}.npy", allow_pickle=False) for r in (rerun, whole))
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert rerun.search(QUERIES, 10) == whole.search(QUERIES, 10)


def test_changed_corpus_or_settings_get_a_new_index_and_the_old_one_stays(tmp_path):
    docs = [Doc(f"p{i}", f"Title {i}", f"river town number{i} lighthouse") for i in range(20)]
    first = BM25Retriever(Corpus(docs, "a"), index_dir=tmp_path)
    edited = [*docs[:5], Doc("p5", "Title 5", "river town number5 clockmaker"), *docs[6:]]
    changed = BM25Retriever(Corpus(edited, "a"), index_dir=tmp_path)
    assert not changed.from_cache and changed.key != first.key and changed.path.is_dir()
    assert changed.search(["clockmaker"], 1)[0][0].index == 5
    assert first.search(["clockmaker"], 1)[0][0].score == 0
    no_stop = BM25Retriever(Corpus(docs, "a"), index_dir=tmp_path, stopwords=None)
    assert not no_stop.from_cache and no_stop.key not in (first.key, changed.key)
    reloaded = BM25Retriever(Corpus(docs, "a"), index_dir=tmp_path)
    assert reloaded.from_cache and reloaded.path == first.path
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("bm25-")]) == 3


def _wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"{what}: the process ended (rc={proc.returncode})"
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.01)


def test_a_second_process_waits_for_the_first_and_loads_its_index(reference, tmp_path):
    index_dir, gate = tmp_path / "index", tmp_path / "go"
    logs = {name: tmp_path / f"{name}.err" for name in ("first", "second")}
    procs = {}
    with logs["first"].open("w") as first_err, logs["second"].open("w") as second_err:
        procs["first"] = subprocess.Popen(_child(index_dir, 0.0, 0.0, gate), cwd=ROOT, stdout=subprocess.PIPE,
                                          stderr=first_err, text=True)
        try:  # the first holds the lock and builds, held at the gate after its first passages
            _wait_for(lambda: _building(index_dir, ".building"), "first build", procs["first"])
            procs["second"] = subprocess.Popen(_child(index_dir), cwd=ROOT, stdout=subprocess.PIPE,
                                               stderr=second_err, text=True)
            _wait_for(lambda: "waiting for another process building the BM25 index" in logs["second"].read_text(),
                      "second process waiting", procs["second"])
            gate.touch()
            outs = {name: p.communicate(timeout=120)[0] for name, p in procs.items()}
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert all(p.returncode == 0 for p in procs.values()), "".join(log.read_text() for log in logs.values())
    first, second = json.loads(outs["first"]), json.loads(outs["second"])
    assert not first["from_cache"] and second["from_cache"] and first["path"] == second["path"]
    assert first["hits"] == second["hits"]
    assert first["hits"][8] == [[h.index, h.score] for h in top_k(reference.scores(QUERIES[8]), 5)]
    assert [p.name for p in index_dir.iterdir() if not p.name.endswith(".lock")] == [Path(first["path"]).name]
