"""``python -m purecover.data.encode RECIPE [--set k=v ...]``: encode a dense recipe's corpus on every process of a launch.

Run it under ``torchrun --nproc_per_node N`` or ``accelerate launch --num_processes N`` before
``purecover data``: rank r encodes embedding shards r, r+N, ... of ``data.corpus`` with
``data.dense_model`` (on GPU ``LOCAL_RANK`` when CUDA is available) into the shared index directory,
each shard written when it is done. The data stage afterwards finds the shards and only builds the
FAISS index (``data.faiss_index``) and retrieves; it encodes any shard still missing itself, so a
launch that was killed loses at most the shards in flight. Ranks need no communication: every rank
opens the corpus store (one builds it, the others wait for it) and writes disjoint shards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from ..config import ConfigError, Recipe

__all__ = ["EncodeSummary", "encode_recipe_corpus"]


@dataclasses.dataclass(frozen=True)
class EncodeSummary:
    """What one process of an encoding launch did (printed as one JSON line by `main`, in field order)."""

    rank: int  # this process's rank
    world_size: int  # processes in the launch
    passages: int  # passages in the corpus
    shard_dir: str  # the shard directory (shared by every rank)
    shards_missing: int  # shards not encoded yet when this process finished (others' or a killed rank's)
    seconds: float  # this process's wall time, 2 decimals
    peak_rss_mb: float | None  # its peak resident memory, MiB (None where it cannot be read)
    device: str  # the device it encoded on (cuda:N or cpu)

    def to_json(self) -> str:
        """One line of JSON, keys in field order."""
        return json.dumps(dataclasses.asdict(self))


def encode_recipe_corpus(recipe: Recipe, show_progress: bool = True, rank: int | None = None,
                         world_size: int | None = None) -> EncodeSummary:
    """Encode this process's shards of the recipe's corpus; returns what it did."""
    from ..utils.memory import peak_rss_mb
    from .corpus_store import open_corpus_store
    from .index_dir import resolve_index_dir
    from .retrieval.dense import encode_dense_shards
    from .retrieval.embedding_shards import launch_rank, missing_shards

    cfg = recipe.data
    if cfg.retriever != "dense":
        raise ConfigError(f"data.retriever is {cfg.retriever!r}: only a dense recipe has embeddings to encode")
    if cfg.corpus in ("per_question", "shared"):
        raise ConfigError(f"data.corpus is {cfg.corpus!r}: encoding ahead is for a corpus file (the dataset's own "
                          "paragraphs are encoded by the data stage itself)")
    if cfg.index_path:
        raise ConfigError(f"data.index_path is set ({cfg.index_path}): the prebuilt index is used as it is, there "
                          "is nothing to encode")
    if rank is None or world_size is None:
        rank, world_size = launch_rank()
    started = time.perf_counter()
    index_dir = resolve_index_dir(cfg.index_dir)
    store = open_corpus_store(cfg.corpus, index_dir, skip_invalid=cfg.skip_invalid, show_progress=show_progress and rank == 0,
                              verify=cfg.index_verify)
    device = None
    try:
        import torch

        if torch.cuda.is_available():
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    shard_dir = encode_dense_shards(store, cfg.dense_model, index_dir, passage_prefix=cfg.passage_prefix,
                                    batch_size=cfg.dense_batch_size, embedding_dtype=cfg.embedding_dtype,
                                    shard_size=cfg.encode_shard_size, device=device, rank=rank,
                                    world_size=world_size, show_progress=show_progress and rank == 0)
    return EncodeSummary(rank=rank, world_size=world_size, passages=len(store), shard_dir=str(shard_dir),
                         shards_missing=len(missing_shards(shard_dir)),
                         seconds=round(time.perf_counter() - started, 2), peak_rss_mb=peak_rss_mb(),
                         device=device or "cpu")


if __name__ == "__main__":
    from ..entry import encode_main

    sys.exit(encode_main())
