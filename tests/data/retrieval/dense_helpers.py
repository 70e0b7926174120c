"""Helpers for the dense-retrieval tests: a synthetic corpus and a torch-free stand-in encoder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from purecover.data.corpus import Doc

WORDS = ("river", "town", "clock", "lighthouse", "village", "market", "hill", "bridge", "tower", "harbour", "mill",
         "forest", "castle", "abbey", "meadow", "lake", "island", "valley", "road", "station", "garden", "school",
         "church", "bell", "ship", "wind", "stone", "iron", "salt")


def synthetic_docs(n: int, seed: int = 0, duplicates: int = 0) -> list[Doc]:
    """`n` passages of random words (ids ``p0``...); the last `duplicates` repeat the first passages' text."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n - duplicates):
        words = rng.choice(WORDS, size=int(rng.integers(6, 30)))
        docs.append(Doc(f"p{i}", f"Place {i}", " ".join(words)))
    docs += [Doc(f"p{n - duplicates + j}", docs[j].title, docs[j].text) for j in range(duplicates)]
    return docs


def write_corpus_jsonl(path: Path, docs: list[Doc]) -> Path:
    path.write_text("".join(json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) + "\n" for d in docs),
                    encoding="utf-8")
    return path


class HashEncoder:
    """A stand-in encoder: a fixed random unit vector per text (no torch), counting its calls."""

    def __init__(self, dim: int = 8) -> None:
        self.dim, self.calls = dim, []

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar=False):
        self.calls.append(len(texts))
        out = np.stack([np.random.default_rng(int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)).standard_normal(self.dim)
                        for t in texts]).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)
