"""Uncertainty of evaluation scores over questions: bootstrap intervals and a paired test (numpy only).

* `bootstrap_ci`: the mean of per-question scores (shape (n,)) and its percentile bootstrap
  interval (questions resampled with replacement, ``resamples`` times, seeded).
* `paired_test`: two methods scored on the same questions. The per-question differences
  d = a − b (shape (n,)) give the mean difference, its paired bootstrap percentile interval, and a
  two-sided p-value from a paired sign-flip permutation test (under H0 the sign of each d_i is
  exchangeable; p = (1 + #{|mean(s·d)| ≥ |mean(d)|}) / (1 + R) over R random sign vectors s, or the
  exact p over all 2^n sign vectors when 2^n ≤ R).
* `annotate_results`: adds both to every method and K of an evaluation's results (`BudgetResult`s): each result
  is tested against retrieval at its own K (``vs_retrieval``) and against one reference, retrieval at the main
  budget (``vs_reference``: e.g. the student's set against retrieval's top 5, whatever K cut the student's set).

All functions are deterministic for a given seed; resampling is vectorised in chunks (bounded memory).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..records import BudgetResult, EvaluationStatistics, PairedTest

__all__ = ["BASELINE", "METRICS", "BootstrapInterval", "annotate_results", "bootstrap_ci", "paired_test",
           "statistics_meta"]

METRICS = ("em", "f1", "acc")
BASELINE = "retrieval"  # the method every other is tested against
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 1000
PERMUTATIONS = 10_000
TEST_NAME = "paired sign-flip permutation test (two-sided) on per-question differences"
_CHUNK_ELEMENTS = 4_000_000  # resamples × questions per vectorised chunk


@dataclasses.dataclass(frozen=True)
class BootstrapInterval:
    """The mean of n per-question scores and its percentile bootstrap interval [low, high]."""

    mean: float
    low: float
    high: float
    n: int


def _as_matrix(values: Any, what: str) -> np.ndarray:
    """Per-question scores as shape (n, m): a 1-d sequence is one column."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected per-question scores of shape (n,) or (n, m), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{what}: no questions")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: scores must be finite numbers (found NaN or inf)")
    return arr


def _check(resamples: int, permutations: int, confidence: float) -> None:
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _chunks(total: int, n: int) -> list[tuple[int, int]]:
    """[start, stop) row ranges of at most `_CHUNK_ELEMENTS` / n rows (depends on n only: same draws for any m)."""
    rows = max(1, _CHUNK_ELEMENTS // n)
    return [(s, min(total, s + rows)) for s in range(0, total, rows)]


def _bootstrap_intervals(values: np.ndarray, resamples: int, confidence: float,
                         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval (low, high), each shape (m,), of the column means of `values` (shape (n, m))."""
    n = values.shape[0]
    means = np.empty((resamples, values.shape[1]))
    for start, stop in _chunks(resamples, n):
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return lo, hi


def _sign_flip_p(d: np.ndarray, permutations: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Two-sided sign-flip p-values (shape (m,)) of mean(d[:, j]) = 0, and ``exact`` or ``monte_carlo``."""
    n = d.shape[0]
    observed = np.abs(d.sum(axis=0))
    tol = 1e-9 * np.maximum(1.0, np.abs(d).sum(axis=0))  # ties up to round-off count as "as extreme"
    if n <= 20 and 2 ** n <= permutations:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # (2^n, n): every sign vector
        return np.mean(np.abs(signs @ d) >= observed - tol, axis=0), "exact"
    hits = np.zeros(d.shape[1], dtype=np.int64)
    for start, stop in _chunks(permutations, n):
        signs = (rng.integers(0, 2, size=(stop - start, n), dtype=np.int8) * 2 - 1).astype(np.float64)
        hits += np.count_nonzero(np.abs(signs @ d) >= observed - tol, axis=0)
    return (1 + hits) / (1 + permutations), "monte_carlo"


def _paired(a: np.ndarray, b: np.ndarray, resamples: int, permutations: int, confidence: float,
            seed: int) -> list[PairedTest]:
    """`paired_test` of every column of `a` against the same column of `b` (both shape (n, m))."""
    if a.shape != b.shape:
        raise ValueError(f"paired_test: {a.shape[0]} and {b.shape[0]} scores; both methods must score the "
                         "same questions")
    d = a - b
    rng = np.random.default_rng(seed)
    lo, hi = _bootstrap_intervals(d, resamples, confidence, rng)
    p, how = _sign_flip_p(d, permutations, rng)
    diff = d.mean(axis=0)
    return [PairedTest(diff=float(diff[j]), low=float(lo[j]), high=float(hi[j]), p=float(min(1.0, p[j])),
                       n=d.shape[0], p_method=how) for j in range(d.shape[1])]


def bootstrap_ci(values: Sequence[float] | np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                 confidence: float = CONFIDENCE, seed: int = 0) -> BootstrapInterval:
    """The mean of `values` (n per-question scores) and its percentile bootstrap interval (`resamples`
    resamples of the n questions with replacement)."""
    _check(resamples, 1, confidence)
    arr = _as_matrix(values, "bootstrap_ci")
    if arr.shape[1] != 1:
        raise ValueError(f"bootstrap_ci: expected a 1-d sequence, got shape {arr.shape}")
    lo, hi = _bootstrap_intervals(arr, resamples, confidence, np.random.default_rng(seed))
    return BootstrapInterval(mean=float(arr.mean()), low=float(lo[0]), high=float(hi[0]), n=arr.shape[0])


def paired_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                resamples: int = BOOTSTRAP_RESAMPLES, permutations: int = PERMUTATIONS,
                confidence: float = CONFIDENCE, seed: int = 0) -> PairedTest:
    """Method `a` against method `b` on the same n questions (`a[i]`, `b[i]`: question i's scores).

    Returns the mean of a − b (``diff``), its paired bootstrap
    percentile interval, the two-sided sign-flip permutation p-value (``monte_carlo``: floor
    1 / (1 + permutations); ``exact`` over all 2^n sign vectors when 2^n <= permutations), and n.
    """
    _check(resamples, permutations, confidence)
    x, y = _as_matrix(a, "paired_test a"), _as_matrix(b, "paired_test b")
    if x.shape[1] != 1 or y.shape[1] != 1:
        raise ValueError("paired_test: expected two 1-d sequences of per-question scores")
    return _paired(x, y, resamples, permutations, confidence, seed)[0]


def statistics_meta(seed: int, baseline_present: bool, reference: str | None = None) -> EvaluationStatistics:
    """What metrics.json's ``statistics`` field records about how the intervals and tests were made."""
    return EvaluationStatistics(confidence=CONFIDENCE, interval="percentile bootstrap over questions",
                                bootstrap_resamples=BOOTSTRAP_RESAMPLES, test=TEST_NAME, permutations=PERMUTATIONS,
                                seed=seed, baseline=BASELINE if baseline_present else None,
                                **({"reference": reference} if reference else {}))


def _r(x: float) -> float:
    return round(float(x), 6)


def _rounded(test: PairedTest) -> PairedTest:
    """`test` as metrics.json stores it: diff, bounds and p to 6 decimals."""
    return test.model_copy(update={f: _r(getattr(test, f)) for f in ("diff", "low", "high", "p")})


def annotate_results(results: Mapping[str, Mapping[str, BudgetResult]],
                     scores: Mapping[tuple[str, str], Mapping[str, Sequence[float]]], seed: int = 0,
                     reference_k: str | None = None) -> tuple[dict[str, dict[str, BudgetResult]], EvaluationStatistics]:
    """Every ``results[method][K]`` with ``ci`` and, when `BASELINE` is a method, ``vs_retrieval`` (against
    `BASELINE` at K) and ``vs_reference`` (against `BASELINE` at `reference_k`, when it was evaluated) added; and
    `statistics_meta`.

    `scores[(method, K)][metric]` holds the per-question scores in one fixed question order shared by
    all methods (the pairing). ``ci[metric] = [low, high]``; ``vs_retrieval[metric]`` and ``vs_reference[metric]``
    `PairedTest`s (absent for the baseline or reference itself). A result without questions is returned as it is.
    """
    has_baseline = BASELINE in results
    reference = (BASELINE, reference_k) if has_baseline and reference_k in results[BASELINE] else None
    annotated: dict[str, dict[str, BudgetResult]] = {}
    for name, per_k in results.items():
        annotated[name] = {}
        for k, entry in per_k.items():
            annotated[name][k] = entry
            own = scores[(name, k)]
            if not len(own[METRICS[0]]):
                continue
            values = _as_matrix(np.column_stack([own[m] for m in METRICS]), f"{name}@{k} scores")
            lo, hi = _bootstrap_intervals(values, BOOTSTRAP_RESAMPLES, CONFIDENCE, np.random.default_rng(seed))
            update: dict[str, Any] = {"ci": {m: [_r(lo[j]), _r(hi[j])] for j, m in enumerate(METRICS)}}
            if has_baseline and name != BASELINE:
                update["vs_retrieval"] = _tests_against(values, scores[(BASELINE, k)], f"{BASELINE}@{k}", seed)
            if reference is not None and (name, k) != reference:
                update["vs_reference"] = _tests_against(values, scores[reference], "@".join(reference), seed)
            annotated[name][k] = entry.model_copy(update=update)
    return annotated, statistics_meta(seed, has_baseline, "@".join(reference) if reference else None)


def _tests_against(values: np.ndarray, other: Mapping[str, Sequence[float]], what: str,
                   seed: int) -> dict[str, PairedTest]:
    """The paired test of each metric of `values` (shape (n, len(METRICS))) against `other`'s scores."""
    base = _as_matrix(np.column_stack([other[m] for m in METRICS]), f"{what} scores")
    tests = _paired(values, base, BOOTSTRAP_RESAMPLES, PERMUTATIONS, CONFIDENCE, seed)
    return {m: _rounded(t) for m, t in zip(METRICS, tests)}
