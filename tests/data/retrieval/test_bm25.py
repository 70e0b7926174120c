from __future__ import annotations

from purecover.data.corpus import Corpus, Doc
from purecover.data.retrieval.bm25 import BM25Retriever

TEXTS = [
    ("Tollbridge", "Tollbridge is a market town on the river Mirren."),
    ("Corven", "Corven is a fishing village with a lighthouse."),
    ("Ada Brill", "Ada Brill was a clockmaker born in Tollbridge."),
    ("Mirren", "The Mirren is a river that rises in the Hollin hills."),
]


def corpus(texts=TEXTS) -> Corpus:
    return Corpus([Doc(str(i), t, x) for i, (t, x) in enumerate(texts)], "test")


def test_ranks_the_matching_passage_first_and_queries_differ():
    r = BM25Retriever(corpus())
    lighthouse, clock = r.search(["Which village has a lighthouse?", "Who was the clockmaker?"], 2)
    assert lighthouse[0].index == 1 and lighthouse[0].score > lighthouse[1].score
    assert clock[0].index == 2
    assert [h.index for h in lighthouse] != [h.index for h in clock]
    assert r.empty_queries == 0


def test_query_without_indexed_words_is_counted():
    r = BM25Retriever(corpus())
    (hits,) = r.search(["zzz qqq"], 3)
    assert [h.index for h in hits] == [0, 1, 2] and all(h.score == 0 for h in hits)
    assert r.empty_queries == 1


def test_index_is_saved_reused_and_rebuilt_when_corpus_changes(tmp_path):
    first = BM25Retriever(corpus(), index_dir=tmp_path)
    assert not first.from_cache and first.path.is_dir()
    again = BM25Retriever(corpus(), index_dir=tmp_path)
    assert again.from_cache and again.path == first.path
    q = ["river through the market town"]
    assert again.search(q, 4) == first.search(q, 4)
    changed = BM25Retriever(corpus([*TEXTS, ("Hollin", "Hollin is a range of hills.")]), index_dir=tmp_path)
    assert not changed.from_cache and changed.path != first.path
    assert len(changed.corpus) == 5
    leftovers = [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")]  # the per-key locks stay
    assert not any(name.endswith(".tmp") or name.startswith(".") for name in leftovers)


def test_allowed_restricts_ranking():
    r = BM25Retriever(corpus())
    import numpy as np

    (hits,) = r.search(["lighthouse village"], 2, allowed=[np.array([0, 2, 3])])
    assert 1 not in [h.index for h in hits]


def test_importing_bm25_keeps_jax_off_the_gpu_unless_the_user_chose():
    # bm25s uses JAX when installed; JAX would claim 75% of a GPU at start (measured: 60 GiB of an H100)
    import os
    import subprocess
    import sys

    code = "import os, purecover.data.retrieval.bm25; print(os.environ['JAX_PLATFORMS'], os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "false"]
    chosen = subprocess.run([sys.executable, "-c", code], env={**env, "JAX_PLATFORMS": "cuda"}, capture_output=True,
                            text=True, check=True).stdout
    assert chosen.split() == ["cuda", "false"]
