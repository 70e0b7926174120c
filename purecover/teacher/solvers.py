"""Coverage-objective solvers (docs/concepts/method.md#the-objective): the objective, a batched greedy, and an exact solver.

Notation (one question): N reasoning steps with weights e (N,), K1 candidate documents, and the
coverage matrix W (K1, N) whose row k says how much document k supports each step (rows =
documents, columns = steps; entries are probabilities in [0, 1]). For a set S of document
indices

    f(S) = Σ_i e_i (1 − Π_{k∈S} (1 − W_{k,i}))  −  λ Σ_{k∈S} (1 − max_i W_{k,i} e_i),   f(∅) = 0.

`greedy_select` runs the corrected Algorithm 1 on a whole batch of questions at once (padding +
masks; the only Python loop is over the at most `budget` greedy iterations). `exact_select`
enumerates every subset of size ≤ K of one question; it exists to measure the greedy's gap.
`score_select` is the paper's "w/o optimisation" ablation (Table 2): no set optimisation, each
document is scored on its own (avg: s_k = Σ_i e_i W_{k,i}; max: s_k = max_i e_i W_{k,i}) and the
top `budget` documents are kept. Decision: its set size is always min(budget, real documents) —
a ranking has no stopping rule, so `tau_stop` and `min_select` do not apply.

Tie rule everywhere: among equal gains (or equal objectives) the smaller document index — the
better retrieval rank — wins; the exact solver also prefers the smaller set on equal objectives.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["ExactResult", "GreedyResult", "exact_select", "greedy_select", "objective", "released_code_greedy",
           "released_code_noise", "score_select"]

_EXACT_TIE_TOL = 1e-12  # objectives closer than this count as equal in `exact_select`


# --------------------------------------------------------------------------------------------
# helpers


def _float_dtype(*arrays: np.ndarray) -> np.dtype:
    """float32 when every input is float32, float64 otherwise."""
    dtype = np.result_type(*arrays)
    return dtype if dtype == np.float32 else np.dtype(np.float64)


def _noise(e: np.ndarray, W: np.ndarray, lam: float) -> np.ndarray:
    """Per-document noise penalty λ (1 − max_i W_{k,i} e_i); e (..., N), W (..., K1, N) -> (..., K1).

    With no steps (N = 0) the max is taken as 0.
    """
    if W.shape[-1] == 0:
        return np.full(W.shape[:-1], lam, dtype=W.dtype)
    return lam * (1.0 - (W * e[..., None, :]).max(axis=-1))


def _check_finite(name: str, x: np.ndarray) -> None:
    if not np.isfinite(x).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(f"{name} has a non-finite value at index {bad} (a real, non-padding entry)")


def _check_single(e: np.ndarray, W: np.ndarray) -> None:
    if e.ndim != 1 or W.ndim != 2:
        raise ValueError(f"expected e of shape (N,) and W of shape (K1, N); got e {e.shape}, W {W.shape}")
    if W.shape[1] != e.shape[0]:
        raise ValueError(f"W has {W.shape[1]} step columns but e has {e.shape[0]} steps")


def _check_budget_lam(budget: int, lam: float) -> None:
    if budget < 0:
        raise ValueError(f"budget must be ≥ 0, got {budget}")
    if not math.isfinite(lam):
        raise ValueError(f"lam must be finite, got {lam}")


def _prepare_batch(
    e: np.ndarray, W: np.ndarray, doc_mask: np.ndarray | None, step_mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """Batch axis added when absent, float dtype chosen, padding zeroed: (e (B, N), W (B, K1, N), doc_mask, batched)."""
    e = np.asarray(e)
    W = np.asarray(W)
    batched = W.ndim == 3
    if not batched:
        _check_single(e, W)
        e, W = e[None], W[None]
        doc_mask = None if doc_mask is None else np.asarray(doc_mask)[None]
        step_mask = None if step_mask is None else np.asarray(step_mask)[None]
    if e.ndim != 2 or W.ndim != 3 or W.shape[0] != e.shape[0] or W.shape[2] != e.shape[1]:
        raise ValueError(f"expected e (B, N) and W (B, K1, N); got e {e.shape}, W {W.shape}")
    B, K1, N = W.shape
    dtype = _float_dtype(e, W)
    e = e.astype(dtype, copy=False)
    W = W.astype(dtype, copy=False)
    if doc_mask is not None:
        doc_mask = np.asarray(doc_mask, dtype=bool)
        if doc_mask.shape != (B, K1):
            raise ValueError(f"doc_mask must have shape {(B, K1)}, got {doc_mask.shape}")
        W = np.where(doc_mask[:, :, None], W, dtype.type(0))
    if step_mask is not None:
        step_mask = np.asarray(step_mask, dtype=bool)
        if step_mask.shape != (B, N):
            raise ValueError(f"step_mask must have shape {(B, N)}, got {step_mask.shape}")
        e = np.where(step_mask, e, dtype.type(0))
        W = np.where(step_mask[:, None, :], W, dtype.type(0))
    _check_finite("e", e)
    _check_finite("W", W)
    return e, W, doc_mask, batched


# --------------------------------------------------------------------------------------------
# objective


def objective(e: np.ndarray, W: np.ndarray, S: Iterable[int], lam: float) -> float:
    """f(S) for one question.

    Args:
        e: step weights, shape (N,).
        W: coverage matrix, shape (K1, N) (rows = documents, columns = steps).
        S: document indices (0-based, into the rows of W); duplicates count once.
        lam: noise weight λ (≥ 0 in practice; default in the design: 0.3).

    Returns:
        f(S) as a Python float (0.0 for the empty set).
    """
    e = np.asarray(e, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    _check_single(e, W)
    idx = sorted({int(k) for k in S})
    if idx and (idx[0] < 0 or idx[-1] >= W.shape[0]):
        raise ValueError(f"document indices {idx} out of range for K1 = {W.shape[0]}")
    if not idx:
        return 0.0
    Ws = W[idx]
    coverage = float(e @ (1.0 - np.prod(1.0 - Ws, axis=0)))
    return coverage - float(_noise(e, Ws, lam).sum())


# --------------------------------------------------------------------------------------------
# greedy


@dataclass(frozen=True)
class GreedyResult:
    """Greedy selections for a batch of B questions (or one question when `batched` is False).

    `score_select` returns the same structure, with each pick's document score in `gains`.

    Array shapes below are for the batched case; for an unbatched call the leading B axis is
    absent (`selected` (budget,), `n_selected`/`fallback`/`objective` 0-d arrays).

    Attributes:
        selected: (B, budget) int64 document indices in pick order (the order is a ranking), −1 padding.
        gains: (B, budget) marginal gain of each pick (objective units), NaN padding.
        n_selected: (B,) int64 number of picks.
        fallback: (B,) bool, True when at least one pick was forced by `min_select` (gain ≤ τ_stop).
        objective: (B,) f of the selected set (equals the sum of the gains up to rounding).
        batched: whether the inputs had a batch axis.
    """

    selected: np.ndarray
    gains: np.ndarray
    n_selected: np.ndarray
    fallback: np.ndarray
    objective: np.ndarray
    batched: bool

    def _row(self, b: int | None) -> int | None:
        if self.batched:
            if b is None:
                raise ValueError("batched result: pass the question index b")
            return b
        if b not in (None, 0):
            raise ValueError("unbatched result: b must be None (or 0)")
        return None

    def order(self, b: int | None = None) -> list[int]:
        """Pick order (document indices) of question `b` (omit `b` for an unbatched result)."""
        row = self._row(b)
        sel, n = (self.selected, self.n_selected) if row is None else (self.selected[row], self.n_selected[row])
        return [int(k) for k in sel[: int(n)]]

    def pick_gains(self, b: int | None = None) -> list[float]:
        """Marginal gain of each pick of question `b`, in pick order."""
        row = self._row(b)
        g, n = (self.gains, self.n_selected) if row is None else (self.gains[row], self.n_selected[row])
        return [float(x) for x in g[: int(n)]]

    def orders(self) -> list[list[int]]:
        """Pick orders of all questions (a one-element list for an unbatched result)."""
        if not self.batched:
            return [self.order()]
        return [self.order(b) for b in range(self.selected.shape[0])]


def _greedy_picks(W: np.ndarray, u: np.ndarray, scale: float, penalty: np.ndarray, noise: np.ndarray, budget: int,
                  cap: np.ndarray, need: np.ndarray, tau_stop: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The greedy loop both objectives share, over a batch: gain_k = scale · Σ_i u_i W_{k,i} − penalty_k for every
    unpicked document (penalty +inf: never picked), the best (first maximum: smallest k) taken while its gain is
    above `tau_stop`, or while fewer than `need` picks were made (flagged fallback), at most `cap` per question.
    `u` (B, N) is updated in place (u ← u ⊙ (1 − W_{k*,:})), `penalty` too.
    Returns (selected, gains, n_selected, fallback, noise_sum of the picks, u)."""
    B, K1, _ = W.shape
    dtype = W.dtype
    selected = np.full((B, budget), -1, dtype=np.int64)
    gains = np.full((B, budget), np.nan, dtype=dtype)
    n_selected = np.zeros(B, dtype=np.int64)
    fallback = np.zeros(B, dtype=bool)
    noise_sum = np.zeros(B, dtype=dtype)
    active = np.ones(B, dtype=bool)
    rows_all = np.arange(B)
    one, scale_t = dtype.type(1), dtype.type(scale)
    for t in range(min(budget, K1)):
        g = scale_t * np.matmul(W, u[:, :, None])[..., 0] - penalty  # (B, K1)
        k = g.argmax(axis=1)  # first maximum = smallest index
        best = g[rows_all, k]
        above = best > tau_stop
        take = active & (n_selected < cap) & np.isfinite(best) & (above | (n_selected < need))
        if not take.any():
            break
        rows = rows_all if take.all() else np.flatnonzero(take)
        kr = k[rows]
        selected[rows, t] = kr
        gains[rows, t] = best[rows]
        fallback[rows] |= ~above[rows]
        penalty[rows, kr] = np.inf
        noise_sum[rows] += noise[rows, kr]
        u[rows] *= one - W[rows, kr, :]
        n_selected[rows] += 1
        active = take
    return selected, gains, n_selected, fallback, noise_sum, u


def greedy_select(
    e: np.ndarray,
    W: np.ndarray,
    lam: float,
    budget: int,
    tau_stop: float = 0.0,
    min_select: int = 1,
    doc_mask: np.ndarray | None = None,
    step_mask: np.ndarray | None = None,
) -> GreedyResult:
    """Greedy maximisation of f under |S| ≤ budget (docs/concepts/method.md#greedy-selection, corrected), vectorised over questions.

    Each iteration computes, for every unselected real document k,
    g_k = Σ_i e_i u_i W_{k,i} − λ (1 − max_i W_{k,i} e_i), picks k* = argmax g (ties: smallest k),
    stops when g_{k*} ≤ `tau_stop`, else appends k* and updates u ← u ⊙ (1 − W_{k*,:}).
    If fewer than `min_select` documents were picked (e.g. every first gain ≤ τ_stop), picking
    continues by best remaining gain regardless of τ_stop and the question is flagged `fallback`.
    Padding documents are never selected; padding steps are ignored (treated as e = 0, W = 0).

    Args:
        e: step weights, (B, N) or unbatched (N,).
        W: coverage matrices, (B, K1, N) or unbatched (K1, N).
        lam: noise weight λ.
        budget: maximum number of documents K per question.
        tau_stop: stop threshold on the best marginal gain (objective units).
        min_select: minimum number of picks (capped at `budget` and at the number of real documents).
        doc_mask: bool (B, K1) (or (K1,)), True for real documents; None = all real.
        step_mask: bool (B, N) (or (N,)), True for real steps; None = all real.

    Returns:
        A `GreedyResult`; computations run in float32 when e and W are both float32, else float64.
    """
    _check_budget_lam(budget, lam)
    e, W, doc_mask, batched = _prepare_batch(e, W, doc_mask, step_mask)
    B, K1, _ = W.shape
    dtype = W.dtype

    noise = _noise(e, W, lam).astype(dtype, copy=False)  # (B, K1)
    penalty = noise.copy()
    if doc_mask is not None:
        penalty[~doc_mask] = np.inf  # padding documents: gain −inf, never selected
    n_real = K1 if doc_mask is None else doc_mask.sum(axis=1)
    need = np.minimum(np.minimum(max(min_select, 0), budget), n_real)  # picks forced by min_select
    selected, gains, n_selected, fallback, noise_sum, eu = _greedy_picks(
        W, e.copy(), 1.0, penalty, noise, budget, np.full(B, budget), need, tau_stop)  # eu: e ⊙ u

    obj = (e.sum(axis=1) - eu.sum(axis=1)) - noise_sum
    if not batched:
        return GreedyResult(selected[0], gains[0], n_selected[0], fallback[0], obj[0], batched=False)
    return GreedyResult(selected, gains, n_selected, fallback, obj, batched=True)


# --------------------------------------------------------------------------------------------
# the greedy of the authors' released code (teacher.objective: released_code)


def released_code_noise(W: np.ndarray) -> np.ndarray:
    """Per-document noise of the released code, W (..., K1, N) -> (..., K1), in [0, 1]:
    noise_k = 1 − max_i W_{k,i} / max_{k'} W_{k', i*(k)}, with i*(k) = argmax_i W_{k,i} (first maximum), i.e.
    how far document k falls short of the best document on its own strongest step. A 0/0 (that step has no
    support from any document) counts as pure noise, 1; no steps at all: 1."""
    if W.shape[-1] == 0:
        return np.ones(W.shape[:-1], dtype=W.dtype)
    own = W.max(axis=-1)  # (..., K1)
    strongest = W.argmax(axis=-1)  # (..., K1)
    column_best = W.max(axis=-2)  # (..., N)
    best_on_it = np.take_along_axis(column_best, strongest, axis=-1)  # (..., K1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(best_on_it > 0, own / np.where(best_on_it > 0, best_on_it, 1), 0)
    return (1 - ratio).astype(W.dtype, copy=False)


def released_code_greedy(
    W: np.ndarray,
    lam: float,
    budget: int,
    tau_stop: float = 0.0,
    min_select: int = 0,
    doc_mask: np.ndarray | None = None,
    step_mask: np.ndarray | None = None,
) -> GreedyResult:
    """The greedy of the authors' released code, vectorised over questions (docs/paper/released-code.md).

    Each iteration scores every unselected real document k with
    gain_k = (1 − λ) Δg_k − λ noise_k, where Δg_k = Σ_i u_i W_{k,i} is the soft-coverage gain with the steps
    unweighted (u_i = Π_{k∈S} (1 − W_{k,i}); the step weights e play no part) and noise_k is
    `released_code_noise`; it picks the best (ties: smallest k) and stops when that gain is ≤ `tau_stop`
    (the code: 0), after 2 × (number of steps) picks, or after `budget` picks (the code: 20). `min_select`
    (the code has none: 0) forces picks beyond a low gain as in `greedy_select`, flagged `fallback`, within
    the same caps. `objective` is (1 − λ) g(S) − λ Σ_{k∈S} noise_k with g(S) = Σ_i (1 − u_i).

    Args mirror `greedy_select` without e: W (B, K1, N) or (K1, N); masks as there.
    """
    _check_budget_lam(budget, lam)
    W = np.asarray(W)
    e = np.ones(W.shape[:-2] + W.shape[-1:], dtype=_float_dtype(W))
    e, W, doc_mask, batched = _prepare_batch(e, W, doc_mask, step_mask)  # e: 1 on real steps, 0 on padding
    K1 = W.shape[1]
    dtype = W.dtype
    lam_t = dtype.type(lam)

    noise = released_code_noise(W)  # padding steps are 0 columns: never a real document's strongest step
    n_steps = e.sum(axis=1).astype(np.int64)
    no_steps = n_steps == 0
    noise[no_steps] = 1  # (B, K1)
    penalty = lam_t * noise
    if doc_mask is not None:
        penalty[~doc_mask] = np.inf
    n_real = K1 if doc_mask is None else doc_mask.sum(axis=1)
    cap = np.minimum(np.minimum(budget, 2 * n_steps), n_real)  # picks allowed per question
    need = np.minimum(max(min_select, 0), cap)

    selected, gains, n_selected, fallback, noise_sum, u = _greedy_picks(
        W, e.copy(), 1.0 - lam, penalty, noise, budget, cap, need, tau_stop)  # u: uncovered share of each step
    one = dtype.type(1)

    obj = (one - lam_t) * (e.sum(axis=1) - u.sum(axis=1)) - lam_t * noise_sum
    if not batched:
        return GreedyResult(selected[0], gains[0], n_selected[0], fallback[0], obj[0], batched=False)
    return GreedyResult(selected, gains, n_selected, fallback, obj, batched=True)


# --------------------------------------------------------------------------------------------
# ranking ablation ("w/o optimisation")


def score_select(
    e: np.ndarray,
    W: np.ndarray,
    lam: float,
    budget: int,
    mode: Literal["avg", "max"] = "avg",
    doc_mask: np.ndarray | None = None,
    step_mask: np.ndarray | None = None,
) -> GreedyResult:
    """Top-`budget` documents by an independent score (the "w/o optimisation" ablation), vectorised.

    Scores: ``avg`` s_k = Σ_i e_i W_{k,i} (the e-weighted average coverage over steps), ``max``
    s_k = max_i e_i W_{k,i} (0 when there are no real steps). Documents are taken by descending
    score, ties to the smaller index; every question gets min(budget, real documents) documents
    (no stopping rule, never a fallback). Padding documents are never selected; padding steps are
    ignored (treated as e = 0, W = 0).

    Args:
        e: step weights, (B, N) or unbatched (N,).
        W: coverage matrices, (B, K1, N) or unbatched (K1, N).
        lam: noise weight λ, used only for the reported objective f(S).
        budget: number of documents K per question.
        mode: "avg" or "max".
        doc_mask: bool (B, K1) (or (K1,)), True for real documents; None = all real.
        step_mask: bool (B, N) (or (N,)), True for real steps; None = all real.

    Returns:
        A `GreedyResult`: `selected` (B, budget) in descending score order (−1 padding), `gains` the
        scores of the picks (NaN padding), `objective` f(selected) with `objective`'s definition,
        `fallback` all False.
    """
    if mode not in ("avg", "max"):
        raise ValueError(f"mode must be 'avg' or 'max', got {mode!r}")
    _check_budget_lam(budget, lam)
    e, W, doc_mask, batched = _prepare_batch(e, W, doc_mask, step_mask)
    B, K1, N = W.shape
    dtype = W.dtype
    weighted = W * e[:, None, :]  # (B, K1, N)
    if mode == "avg":
        scores = weighted.sum(axis=-1)
    else:
        scores = weighted.max(axis=-1) if N else np.zeros((B, K1), dtype=dtype)
    ranked = np.where(doc_mask, scores, -np.inf) if doc_mask is not None else scores
    order = np.argsort(-ranked, axis=1, kind="stable")  # descending; stable: ties keep the smaller index

    n_real = np.full(B, K1, dtype=np.int64) if doc_mask is None else doc_mask.sum(axis=1).astype(np.int64)
    n_selected = np.minimum(n_real, budget)
    width = min(budget, K1)
    picked = np.arange(budget)[None, :] < n_selected[:, None]  # (B, budget)
    selected = np.full((B, budget), -1, dtype=np.int64)
    selected[:, :width] = order[:, :width]
    selected[~picked] = -1
    gains = np.full((B, budget), np.nan, dtype=dtype)
    gains[:, :width] = np.take_along_axis(scores, order[:, :width], axis=1)
    gains[~picked] = np.nan

    # f(S): coverage Σ_i e_i (1 − Π_{k∈S} (1 − W_{k,i})) minus the noise of the picks.
    safe = np.where(picked, selected, 0)
    W_sel = np.take_along_axis(W, safe[:, :, None], axis=1)  # (B, budget, N)
    W_sel = np.where(picked[:, :, None], W_sel, dtype.type(0))
    coverage = (e * (1 - np.prod(1 - W_sel, axis=1))).sum(axis=1)
    noise = np.take_along_axis(_noise(e, W, lam).astype(dtype, copy=False), safe, axis=1)
    obj = coverage - np.where(picked, noise, dtype.type(0)).sum(axis=1)
    fallback = np.zeros(B, dtype=bool)
    if not batched:
        return GreedyResult(selected[0], gains[0], n_selected[0], fallback[0], obj[0], batched=False)
    return GreedyResult(selected, gains, n_selected, fallback, obj, batched=True)


# --------------------------------------------------------------------------------------------
# exact


@dataclass(frozen=True)
class ExactResult:
    """Optimum of f over all subsets of size ≤ budget for one question.

    Attributes:
        selected: optimal document indices, sorted ascending (empty when f ≤ 0 everywhere else).
        objective: f(selected).
        n_subsets: number of subsets evaluated, Σ_{s=0..K} C(K1, s) (the empty set included).
    """

    selected: tuple[int, ...]
    objective: float
    n_subsets: int


_COMBO_CACHE: dict[tuple[int, int], np.ndarray] = {}
_COMBO_CACHE_MAX_ENTRIES = 1_000_000  # cache index arrays up to this many entries (M·s)
_EXACT_CHUNK = 1 << 18  # subsets evaluated at once


def _combinations(n: int, s: int) -> np.ndarray:
    """All s-subsets of range(n) in lexicographic order, as an (C(n, s), s) index array."""
    key = (n, s)
    cached = _COMBO_CACHE.get(key)
    if cached is not None:
        return cached
    m = math.comb(n, s)
    flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), s)), dtype=np.intp,
                       count=m * s)
    arr = flat.reshape(m, s)
    if m * s <= _COMBO_CACHE_MAX_ENTRIES:
        arr.flags.writeable = False
        _COMBO_CACHE[key] = arr
    return arr


def exact_select(e: np.ndarray, W: np.ndarray, lam: float, budget: int, max_subsets: int = 2_000_000) -> ExactResult:
    """Exact maximiser of f over all S with |S| ≤ budget (one question), by vectorised enumeration.

    Subsets are evaluated one size at a time (all subsets of a size at once, in chunks). Ties:
    objectives within 1e-12 count as equal; then the smaller set wins, and within a size the
    lexicographically smallest set.

    Args:
        e: step weights, shape (N,).
        W: coverage matrix, shape (K1, N).
        lam: noise weight λ.
        budget: maximum set size K.
        max_subsets: refuse (ValueError) when Σ_{s≤K} C(K1, s) exceeds this.
    """
    e = np.asarray(e, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    _check_single(e, W)
    _check_finite("e", e)
    _check_finite("W", W)
    if budget < 0:
        raise ValueError(f"budget must be ≥ 0, got {budget}")
    K1 = W.shape[0]
    kmax = min(budget, K1)
    n_subsets = sum(math.comb(K1, s) for s in range(kmax + 1))
    if n_subsets > max_subsets:
        raise ValueError(
            f"exact_select: C({K1}, ≤{budget}) = {n_subsets:,} subsets exceeds max_subsets = {max_subsets:,}; "
            "lower K1 or the budget, or raise max_subsets"
        )
    one_minus = 1.0 - W  # (K1, N)
    noise = _noise(e, W, lam)  # (K1,)
    e_total = float(e.sum())
    best_val, best_set = 0.0, ()
    for s in range(1, kmax + 1):
        combos = _combinations(K1, s)
        for start in range(0, combos.shape[0], _EXACT_CHUNK):
            c = combos[start : start + _EXACT_CHUNK]
            prod = one_minus[c[:, 0]].copy()  # (M, N)
            for j in range(1, s):
                prod *= one_minus[c[:, j]]
            vals = (e_total - prod @ e) - noise[c].sum(axis=1)
            top = float(vals.max())
            if top > best_val + _EXACT_TIE_TOL:
                j = int(np.flatnonzero(vals >= top - _EXACT_TIE_TOL)[0])
                best_val, best_set = float(vals[j]), tuple(int(x) for x in c[j])
    return ExactResult(selected=best_set, objective=best_val, n_subsets=n_subsets)
