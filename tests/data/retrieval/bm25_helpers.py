"""Shared by the BM25 index tests: a generated corpus, bm25s's own index of it, and a child process.

Run as ``python -m tests.data.retrieval.bm25_helpers INDEX_DIR N_PASSAGES SLEEP1 SLEEP2 [GATE]`` it builds
(or loads) the index of `generated_corpus(N_PASSAGES)` under INDEX_DIR with small runs and buckets, sleeping
SLEEP1 seconds per list of passages read (pass 1) and SLEEP2 per block written to the index arrays (pass 2),
and, with GATE, waiting after the first list until the file GATE exists, so a test can kill it or start a
rival mid-build; it prints the retriever's `from_cache` and the hits of `QUERIES` as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from purecover.data.corpus import Corpus, Doc

WORDS_ASCII = 600
EXTRA = ["café", "naïve", "Zürich", "東京", "Ωmega", "straße", "STRASSE", "x1", "2024", "co_op", "ñandú"]
STOPS = ["the", "of", "and", "a", "is", "in", "to", "was", "it", "on"]
SMALL = {"read_batch": 64, "run_tokens": 1500, "bucket_postings": 2000}  # several runs and buckets


def _vocabulary(rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = {"".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(WORDS_ASCII * 2)}
    return sorted(words)[:WORDS_ASCII] + EXTRA


def generated_corpus(n: int, seed: int = 0) -> Corpus:
    """`n` passages of Zipf-distributed words (some repeated, some non-ASCII or capitalised), some with no
    indexed word (only stopwords, one-letter words or punctuation)."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    docs = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.02:
            title, text = "", " ".join(rng.choice(STOPS, size=int(rng.integers(0, 6))))
        elif kind < 0.03:
            title, text = "A", "x ! y ? 7 ..."
        else:
            words = list(rng.choice(vocab, size=int(rng.integers(1, 40)), p=weights))
            words += list(rng.choice(STOPS, size=int(rng.integers(0, 8))))
            if rng.random() < 0.3:
                words += [words[0]] * int(rng.integers(1, 5))  # repeated words: tf > 1
            rng.shuffle(words)
            words = [w.capitalize() if rng.random() < 0.1 else w for w in words]
            title = " ".join(rng.choice(vocab, size=int(rng.integers(0, 3))))
            text = " ".join(words) + "."
        docs.append(Doc(f"p{i}", title, text))
    return Corpus(docs, f"generated-{n}-{seed}")


def generated_queries(n: int, seed: int = 1) -> list[str]:
    """Queries of known words, repeated words, unknown words, stopwords and nothing indexed at all."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(np.random.default_rng(0))
    queries = ["", "the of and", "zzzzqqq unknownword", "Café NAÏVE café", "東京 straße", "x1 x1 x1 2024"]
    for _ in range(n - len(queries)):
        words = list(rng.choice(vocab, size=int(rng.integers(1, 8))))
        if rng.random() < 0.3:
            words.append(words[0])  # a repeated query word counts twice
        if rng.random() < 0.3:
            words.append("notindexedatall")
        if rng.random() < 0.3:
            words.append(str(rng.choice(STOPS)))
        queries.append(" ".join(w.upper() if rng.random() < 0.1 else w for w in words) + "?")
    return queries


QUERIES = generated_queries(40, seed=7)


class Bm25sReference:
    """bm25s's own in-memory index of a corpus, queried as the previous retriever did."""

    def __init__(self, corpus: Corpus, stopwords: str | None = "en") -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        self.tokenizer = Tokenizer(stopwords=stopwords if stopwords else None)
        ids = self.tokenizer.tokenize([d.contents for d in corpus.docs], update_vocab=True, return_as="ids",
                                      show_progress=False)
        self.model = bm25s.BM25()
        self.model.index(self.tokenizer.to_tokenized_tuple(ids), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        words = self.tokenizer.tokenize([query], update_vocab=False, return_as="string", show_progress=False)[0]
        vocab = self.model.vocab_dict
        return self.model.get_scores_from_ids([vocab[w] for w in words if w and w in vocab])


def _slow(corpus: Corpus, sleep: float, gate: Path | None = None) -> Corpus:
    real = corpus.iter_contents

    def iter_contents(*args, **kwargs):
        for batch in real(*args, **kwargs):
            yield batch
            time.sleep(sleep)
            deadline = time.monotonic() + 60
            while gate is not None and not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    corpus.iter_contents = iter_contents  # type: ignore[method-assign]
    return corpus


def _slow_writes(sleep: float) -> None:
    from purecover.data.retrieval import bm25_index

    real = bm25_index._NpyWriter.append

    def append(self, values):
        real(self, values)
        self.file.flush()
        time.sleep(sleep)

    bm25_index._NpyWriter.append = append  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    from purecover.data.retrieval.bm25 import BM25Retriever

    index_dir, n, sleep1, sleep2 = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    gate = Path(argv[4]) if len(argv) > 4 else None
    if sleep2:
        _slow_writes(sleep2)
    r = BM25Retriever(_slow(generated_corpus(n), sleep1, gate), index_dir=index_dir, **SMALL)
    hits = r.search(QUERIES, 5)
    print(json.dumps({"from_cache": r.from_cache, "path": str(r.path),
                      "hits": [[[h.index, h.score] for h in q] for q in hits]}))


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    main(sys.argv[1:])
