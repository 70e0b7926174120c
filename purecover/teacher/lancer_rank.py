"""LANCER's aggregations as rerankers over a ratings matrix, and the fusion of its signal (docs/concepts/method.md#lancer-signal).

The ratings matrix R has shape (K1, n): row k is candidate document k (retrieval order), column q
is sub-question q, entries are answerability ratings 0..5 (integers, or expected ratings in
[0, 5]). Every reranker returns a full ranking — each document index exactly once — and
per-document scores.

Tie rule (everywhere): among equal scores or equal gains, the earlier candidate (smaller
document index) wins.

Methods:
    "sum"          score_k = Σ_q R_kq
    "sum-tau"      score_k = Σ_q R_kq · [R_kq ≥ τ]                         (default τ = 3)
    "rrf"          score_k = Σ_q 1 / (κ + rank_q(k)), rank 1 = highest rating   (κ = 60)
    "greedy-sum"   greedy on R·[R ≥ τ] (default τ = 0), gain Σ_q max(r_q − best_q, 0)
    "greedy-cov"   the same greedy on the binary [R ≥ τ]                  (default τ = 3)
    "greedy-alpha" gain Σ_q [r_q ≥ τ] g_q, g_q ← (1 − α) g_q once q is covered (τ = 3, α = 0.5)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "LANCER_METHODS",
    "RankResult",
    "fuse_requirements",
    "lancer_rank",
    "rank_greedy_alpha",
    "rank_greedy_cov",
    "rank_greedy_sum",
    "rank_rrf",
    "rank_sum",
]

MAX_RATING = 5


@dataclass(frozen=True)
class RankResult:
    """A full ranking of K1 candidates.

    Attributes:
        order: document indices, best first; a permutation of range(K1).
        scores: (K1,) per-document score indexed by document (higher is better). For "sum"/"sum-tau"
            and "rrf" the aggregated score; for the greedy methods a rank score K1 − position, so
            that sorting by score (ties: smaller index) reproduces `order`.
        gains: for the greedy methods, (K1,) marginal gain of each document in `order` (pick order;
            0 for documents appended after the greedy ran out of positive gain); None otherwise.
    """

    order: list[int]
    scores: np.ndarray
    gains: np.ndarray | None = None


def _ratings(R: np.ndarray) -> np.ndarray:
    R = np.asarray(R)
    if R.ndim != 2:
        raise ValueError(f"ratings must be a (K1, n) matrix, got shape {R.shape}")
    if not np.issubdtype(R.dtype, np.number) or np.issubdtype(R.dtype, np.complexfloating):
        raise ValueError(f"ratings must be numeric, got dtype {R.dtype}")
    R = R.astype(np.float64)
    if R.size and (not np.isfinite(R).all() or R.min() < 0 or R.max() > MAX_RATING):
        bad = tuple(int(i) for i in np.argwhere(~(np.isfinite(R) & (R >= 0) & (R <= MAX_RATING)))[0])
        raise ValueError(f"ratings must lie in 0..{MAX_RATING}; entry {bad} is {R[bad]}")
    return R


def _descending(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score, ties by smaller index (stable sort)."""
    return np.argsort(-scores, kind="stable")


def _rank_scores(order: list[int]) -> np.ndarray:
    K1 = len(order)
    scores = np.empty(K1, dtype=np.float64)
    scores[np.asarray(order, dtype=np.intp)] = K1 - np.arange(K1)
    return scores


def rank_sum(R: np.ndarray, tau: float = 0) -> RankResult:
    """Rank by Σ_q r·[r ≥ τ] (τ = 0: the plain row sum); ties: smaller index first."""
    R = _ratings(R)
    scores = (R * np.greater_equal(R, tau)).sum(axis=1)
    return RankResult(order=[int(k) for k in _descending(scores)], scores=scores)


def rank_rrf(R: np.ndarray, kappa: float = 60) -> RankResult:
    """Reciprocal rank fusion: Σ_q 1/(κ + rank_q), rank_q ≥ 1 by descending rating, ties by candidate order."""
    R = _ratings(R)
    K1, n = R.shape
    ranks = np.empty((K1, n), dtype=np.float64)
    for q in range(n):
        ranks[_descending(R[:, q]), q] = np.arange(1, K1 + 1)
    scores = (1.0 / (kappa + ranks)).sum(axis=1)
    return RankResult(order=[int(k) for k in _descending(scores)], scores=scores)


def _greedy_max_gain(Rt: np.ndarray) -> RankResult:
    """Greedy on thresholded ratings Rt (K1, n), gain Σ_q max(r_q − best_q, 0).

    Picks the maximum-gain document (ties: smaller index) while the gain is positive; the
    documents left (gain 0, put aside) follow by descending row sum of Rt, ties smaller index.
    Gains never increase, so a document put aside could never be picked later.
    """
    K1, n = Rt.shape
    best = np.zeros(n, dtype=np.float64)
    remaining = np.ones(K1, dtype=bool)
    order: list[int] = []
    gains: list[float] = []
    while remaining.any():
        g = np.maximum(Rt - best, 0.0).sum(axis=1)
        g[~remaining] = -np.inf
        k = int(g.argmax())
        if g[k] <= 0:
            break
        order.append(k)
        gains.append(float(g[k]))
        remaining[k] = False
        best = np.maximum(best, Rt[k])
    rest = [int(k) for k in _descending(Rt.sum(axis=1)) if remaining[k]]
    order += rest
    gains += [0.0] * len(rest)
    return RankResult(order=order, scores=_rank_scores(order), gains=np.asarray(gains, dtype=np.float64))


def rank_greedy_sum(R: np.ndarray, tau: float = 0) -> RankResult:
    """LANCER greedy-sum on ratings thresholded as r·[r ≥ τ] (τ = 0: no threshold)."""
    R = _ratings(R)
    return _greedy_max_gain(R * np.greater_equal(R, tau))


def rank_greedy_cov(R: np.ndarray, tau: float = 3) -> RankResult:
    """LANCER greedy-cov: the greedy of `rank_greedy_sum` on the binary coverage [r ≥ τ]."""
    R = _ratings(R)
    return _greedy_max_gain(np.greater_equal(R, tau).astype(np.float64))


def rank_greedy_alpha(R: np.ndarray, tau: float = 3, alpha: float = 0.5) -> RankResult:
    """LANCER greedy-α: gain Σ_q [r_q ≥ τ] g_q; after each pick g_q ← (1 − α) g_q for each q it covers.

    Every step takes the maximum gain (ties: smaller index) until all documents are ranked;
    `gains` holds each pick's gain.
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    R = _ratings(R)
    C = np.greater_equal(R, tau).astype(np.float64)
    K1, n = C.shape
    weight = np.ones(n, dtype=np.float64)
    remaining = np.ones(K1, dtype=bool)
    order: list[int] = []
    gains: list[float] = []
    for _ in range(K1):
        g = C @ weight
        g[~remaining] = -np.inf
        k = int(g.argmax())
        order.append(k)
        gains.append(float(g[k]))
        remaining[k] = False
        weight = np.where(C[k] > 0, weight * (1.0 - alpha), weight)
    return RankResult(order=order, scores=_rank_scores(order), gains=np.asarray(gains, dtype=np.float64))


def _sum_tau(R: np.ndarray, tau: float = 3) -> RankResult:
    return rank_sum(R, tau=tau)


LANCER_METHODS: dict[str, Callable[..., RankResult]] = {
    "sum": rank_sum,
    "sum-tau": _sum_tau,
    "rrf": rank_rrf,
    "greedy-sum": rank_greedy_sum,
    "greedy-cov": rank_greedy_cov,
    "greedy-alpha": rank_greedy_alpha,
}


def lancer_rank(R: np.ndarray, method: str, **params: Any) -> RankResult:
    """Rerank with LANCER aggregation `method` (one of `LANCER_METHODS`); `params` go to that method.

    Parameters: "sum"/"sum-tau"/"greedy-sum"/"greedy-cov" take `tau`, "rrf" takes `kappa`,
    "greedy-alpha" takes `tau` and `alpha`; defaults as in the module docstring.
    """
    try:
        fn = LANCER_METHODS[method]
    except KeyError:
        raise ValueError(f"unknown LANCER method {method!r}; expected one of {sorted(LANCER_METHODS)}") from None
    try:
        return fn(R, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters {sorted(params)} for LANCER method {method!r}: {exc}") from None


def fuse_requirements(e: np.ndarray, W: np.ndarray, R: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Fuse the LANCER signal into the coverage problem: e' = [(1 − β) e ; β/n · 1_n], W' = [W | R/5].

    Args:
        e: step weights, (N,).
        W: coverage matrix, (K1, N).
        R: ratings, (K1, n), in 0..5.
        beta: weight of the sub-question requirements in [0, 1] (0: off, 1: LANCER alone).

    Returns:
        (e', W') with shapes (N + n,) and (K1, N + n), float64.
    """
    if not 0 <= beta <= 1:
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    e = np.asarray(e, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    R = _ratings(R)
    if e.ndim != 1 or W.ndim != 2 or W.shape[1] != e.shape[0]:
        raise ValueError(f"expected e (N,) and W (K1, N); got e {e.shape}, W {W.shape}")
    if R.shape[0] != W.shape[0]:
        raise ValueError(f"ratings have {R.shape[0]} documents but W has {W.shape[0]}")
    n = R.shape[1]
    if n == 0 and beta > 0:
        raise ValueError("fuse_requirements: beta > 0 but there are no sub-questions (R has 0 columns)")
    e_req = np.full(n, beta / n if n else 0.0)
    return np.concatenate([(1.0 - beta) * e, e_req]), np.concatenate([W, R / MAX_RATING], axis=1)
