"""Encode a corpus JSONL's dense shards as a DenseRetriever would (run by the kill and torchrun tests).

``python encode_shards_script.py CORPUS.jsonl MODEL_DIR CACHE_DIR SHARD_SIZE [SLEEP_SECONDS]``: one torch
thread; rank and world size from RANK / WORLD_SIZE (torchrun); SLEEP_SECONDS pauses after each shard's
encoder call (so a test can kill the process between shards; the embeddings do not change).
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> None:
    import torch

    torch.set_num_threads(1)
    from purecover.data.corpus import load_corpus_jsonl
    from purecover.data.retrieval import dense

    corpus_path, model_dir, cache_dir, shard_size = argv[:4]
    pause = float(argv[4]) if len(argv) > 4 else 0.0
    if pause:
        load = dense.load_sentence_transformer

        def slow_model(*args, **kwargs):
            model = load(*args, **kwargs)
            encode = model.encode

            def slow_encode(*a, **k):
                out = encode(*a, **k)
                time.sleep(pause)
                return out

            model.encode = slow_encode
            return model

        dense.load_sentence_transformer = slow_model
    dense.encode_dense_shards(load_corpus_jsonl(corpus_path), model_dir, cache_dir, shard_size=int(shard_size),
                              device="cpu")


if __name__ == "__main__":
    main(sys.argv[1:])
