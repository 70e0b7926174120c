"""How the label stage splits its questions over processes and joins the results.

Rank r of w processes (one, or under `accelerate launch` / `torchrun`) takes questions r, r+w, r+2w, ...
and writes ``run_dir/label_shards/<kind>.{r}-of-{w}.jsonl`` (kinds: replies, lancer, labels); once every
rank is done, rank 0 merges the label shards into labels.jsonl in candidates order (`merge_label_shards`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import JsonValue

from ..records import CandidateRecord, LabelRecord, validate_line
from ..rundir import FILES
from ..utils.io import read_jsonl, write_jsonl_atomic

__all__ = ["LABELS_FILE", "SHARD_DIR", "batches", "distributed", "merge_label_shards", "shard_path"]

LABELS_FILE = FILES["labels"]
SHARD_DIR = FILES["label_shards"]

T = TypeVar("T")


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` cut into consecutive batches of `size` (the last one shorter), by position."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def distributed() -> tuple[int, int, Any]:
    """(rank, world size, accelerate state or None). One process unless launched by accelerate/torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        cpu = not torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true")
        state = PartialState(cpu=cpu)
        if state.num_processes <= 1:
            raise RuntimeError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but accelerate set up no process group")
        return state.process_index, state.num_processes, state
    return 0, 1, None


def shard_path(run_dir: Path, kind: str, rank: int, world: int) -> Path:
    """The shard file of `kind` (replies, lancer or labels) written by rank `rank` of `world`."""
    return run_dir / SHARD_DIR / f"{kind}.{rank}-of-{world}.jsonl"


def merge_label_shards(run_dir: Path, candidates: Sequence[CandidateRecord], world: int) -> list[LabelRecord]:
    """Join the label shards into labels.jsonl in candidates order; every qid exactly once. Returns the
    records in that order.

    Each line is checked as a `LabelRecord` (errors name shard, line and field) and written back as read,
    so labels.jsonl holds the shards' bytes.
    """
    by_qid: dict[str, tuple[LabelRecord, dict[str, JsonValue]]] = {}  # the record, and its line as read
    for rank in range(world):
        path = shard_path(run_dir, "labels", rank, world)
        if not path.exists():
            raise RuntimeError(f"shard {path} is missing: rank {rank} did not finish")
        for lineno, line in read_jsonl(path):
            record = validate_line(LabelRecord, line, path, lineno)
            if record.qid in by_qid:
                raise RuntimeError(f"{path}:{lineno}: qid {record.qid!r} labelled twice")
            by_qid[record.qid] = (record, line)
    missing = [c.qid for c in candidates if c.qid not in by_qid]
    if missing:
        raise RuntimeError(f"{len(missing)} questions have no label (first: {missing[0]!r}); rerun to finish them")
    ordered = [by_qid[c.qid] for c in candidates]
    write_jsonl_atomic(run_dir / LABELS_FILE, [line for _, line in ordered])
    return [record for record, _ in ordered]
