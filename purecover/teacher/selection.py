"""From per-question (e, W) to selected sets: LANCER fusion, the batched solver, and why each selection stopped.

Shared by the label stage and `purecover tune`, so a tuning row computed for the recipe's own
setting reproduces the labels exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .defaults import EstimationParams
from .lancer_rank import fuse_requirements
from .solvers import GreedyResult, greedy_select, released_code_greedy, score_select

__all__ = ["STOP_REASONS", "fuse", "solve", "stop_reason"]

STOP_REASONS = ("budget", "threshold", "first_step", "candidates", "ranking")


def fuse(e: np.ndarray, W: np.ndarray, ratings: Sequence[Sequence[float]] | None, params: EstimationParams
         ) -> tuple[np.ndarray, np.ndarray]:
    """(e, W) with LANCER ratings fused at weight β (docs/concepts/method.md#lancer-signal); unchanged without ratings or with β = 0."""
    if ratings is None or params.beta <= 0:
        return e, W
    return fuse_requirements(e, W, np.asarray(ratings, dtype=np.float64), params.beta)


def solve(pairs: Sequence[tuple[np.ndarray, np.ndarray]], params: EstimationParams) -> GreedyResult:
    """Select for a batch of questions: `pairs` holds (e (N_b,), W (K1_b, N_b)); padded and masked here."""
    k_max = max(W.shape[0] for _, W in pairs)
    n_max = max(W.shape[1] for _, W in pairs)
    E = np.zeros((len(pairs), n_max))
    WW = np.zeros((len(pairs), k_max, n_max))
    doc_mask = np.zeros((len(pairs), k_max), dtype=bool)
    step_mask = np.zeros((len(pairs), n_max), dtype=bool)
    for i, (e, W) in enumerate(pairs):
        E[i, : e.shape[0]] = e
        WW[i, : W.shape[0], : W.shape[1]] = W
        doc_mask[i, : W.shape[0]] = True
        step_mask[i, : e.shape[0]] = True
    if params.selection == "greedy" and params.objective == "released_code":
        return released_code_greedy(WW, params.lam, params.budget, tau_stop=params.tau_stop,
                                    min_select=params.min_select, doc_mask=doc_mask, step_mask=step_mask)
    if params.selection == "greedy":
        return greedy_select(E, WW, params.lam, params.budget, tau_stop=params.tau_stop,
                             min_select=params.min_select, doc_mask=doc_mask, step_mask=step_mask)
    return score_select(E, WW, params.lam, params.budget, params.selection, doc_mask=doc_mask, step_mask=step_mask)


def stop_reason(gains: Sequence[float], n_docs: int, params: EstimationParams, n_steps: int | None = None) -> str:
    """Why one question's selection ended (`STOP_REASONS`), from its pick gains in order.

    The greedy's own picks are the leading gains above τ_stop (later ones were forced by
    min_select): none → "first_step"; the budget → "budget" (for ``objective: released_code`` also its cap of
    2 × `n_steps` picks); every document → "candidates"; otherwise the best gain fell to τ_stop → "threshold".
    avg/max rankings → "ranking".
    """
    if params.selection != "greedy":
        return "ranking"
    own = 0
    for g in gains:
        if not g > params.tau_stop:
            break
        own += 1
    budget = params.budget
    if params.objective == "released_code" and n_steps is not None:
        budget = min(budget, 2 * n_steps)
    if own == 0:
        return "first_step"
    if own >= budget:
        return "budget"
    if own >= n_docs:
        return "candidates"
    return "threshold"
