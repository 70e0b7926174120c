"""The retriever interface and a deterministic top-k."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["Hit", "Retriever", "top_k"]


class Hit(NamedTuple):
    """A retrieved passage: its position in the corpus and its score (higher is better)."""

    index: int
    score: float


class Retriever(Protocol):
    """Anything that ranks corpus passages for queries."""

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-`k` hits per query, best first; ties broken by corpus position (earlier first)."""
        ...


def top_k(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
    """Indices of the `k` highest `scores` (1-D), best first, ties → smaller index.

    `allowed` (int indices) restricts the ranking to a subset of positions.
    """
    if allowed is not None:
        sub = scores[allowed]
        order = top_k(sub, k)
        return [Hit(int(allowed[h.index]), h.score) for h in order]
    n = scores.shape[0]
    k = min(k, n)
    if k <= 0:
        return []
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        equal = np.flatnonzero(scores == kth)[: k - len(above)]
        idx = np.concatenate([above, equal])
    else:
        idx = np.arange(n)
    order = idx[np.lexsort((idx, -scores[idx]))]
    return [Hit(int(i), float(scores[i])) for i in order]
