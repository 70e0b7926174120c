"""Set-selection metrics, each defined here once (docs/guides/evaluation.md#metrics).

Every stage and benchmark that scores a chosen set of passages, or a ranking of them, against gold passages
imports these: the trainer's subset F1, the teacher's label figures, the evaluation's Coverage@K and Purity@K,
ICR's layer choice and the benchmarks' support and AUC figures. The module is shared infrastructure: it imports
nothing of purecover, so every package may use it (docs/development/architecture.md#the-import-rules).

Sets are any collections of hashable items (candidate positions or doc ids); duplicates count once.

* `subset_f1`: F1 of two sets, 1.0 when both are empty (the selector's threshold calibration and training
  figures, where "nothing to keep, nothing kept" is right).
* `prf`: (precision, recall, F1) of a chosen set against gold, all 0.0 without a hit (the label and support
  figures, where an empty choice or an empty gold scores nothing).
* `coverage_at_k` = |D_K ∩ D_gold| / |D_gold| (None without gold) and `purity_at_k` = |D_K ∩ D_gold| / |D_K|
  (None without a selection).
* `ranking_auc`: for one question's (K,) scores, P(a gold candidate scores above a non-gold one), a tie counting
  one half; None without both kinds. `ranking_auc_rows` is the same for n score rows (n, K) against one mask.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence

import numpy as np

__all__ = ["coverage_at_k", "gold_mask", "prf", "purity_at_k", "ranking_auc", "ranking_auc_rows", "subset_f1"]


def subset_f1(predicted: Collection[Hashable], gold: Collection[Hashable]) -> float:
    """F1 of two sets (of passage positions or ids); 1.0 when both are empty, 0.0 without a hit."""
    p, g = set(predicted), set(gold)
    if not p and not g:
        return 1.0
    hit = len(p & g)
    if hit == 0:
        return 0.0
    precision, recall = hit / len(p), hit / len(g)
    return 2 * precision * recall / (precision + recall)


def prf(chosen: Collection[Hashable], gold: Collection[Hashable]) -> tuple[float, float, float]:
    """(precision, recall, F1) of `chosen` against `gold`: P = |C ∩ G| / |C|, R = |C ∩ G| / |G|,
    F1 = 2PR / (P + R); all three 0.0 when C ∩ G is empty (an empty choice, an empty gold or no hit)."""
    picked, wanted = set(chosen), set(gold)
    hits = len(picked & wanted)
    if hits == 0:
        return 0.0, 0.0, 0.0
    p, r = hits / len(picked), hits / len(wanted)
    return p, r, 2 * p * r / (p + r)


def coverage_at_k(selected: Collection[Hashable], gold: Collection[Hashable]) -> float | None:
    """|D_K ∩ D_gold| / |D_gold|; None when the gold set is empty."""
    gold = set(gold)
    if not gold:
        return None
    return len(set(selected) & gold) / len(gold)


def purity_at_k(selected: Collection[Hashable], gold: Collection[Hashable]) -> float | None:
    """|D_K ∩ D_gold| / |D_K|; None when nothing is selected."""
    sel = set(selected)
    if not sel:
        return None
    return len(sel & set(gold)) / len(sel)


def gold_mask(gold: Sequence[int], n: int, where: str) -> np.ndarray:
    """(n,) bool mask of the gold candidate positions `gold`; a position that is not an int in 0..n-1 is a
    ValueError naming `where`."""
    mask = np.zeros(n, dtype=bool)
    for g in gold:
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 0 <= g < n:
            raise ValueError(f"{where}: gold position {g!r} is not a candidate position in 0..{n - 1}")
        mask[int(g)] = True
    return mask


def ranking_auc_rows(scores: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
    """(n,) ranking AUC of every row of `scores` (n, K) against the gold `mask` (K,), ties counting one half;
    None without both a gold and a non-gold candidate."""
    pos, neg = scores[:, mask], scores[:, ~mask]
    if pos.shape[1] == 0 or neg.shape[1] == 0:
        return None
    diff = pos[:, :, None] - neg[:, None, :]
    wins = (diff > 0).sum(axis=(1, 2)) + 0.5 * (diff == 0).sum(axis=(1, 2))
    return wins / (pos.shape[1] * neg.shape[1])


def ranking_auc(scores: Sequence[float] | np.ndarray, gold: Sequence[int]) -> float | None:
    """P(a gold candidate scores above a non-gold one), ties counting one half, for one question's (K,)
    `scores` and its gold positions (0.5 for a random order); None when the question has no gold or only gold
    candidates."""
    s = np.asarray(scores, dtype=np.float64).reshape(1, -1)
    out = ranking_auc_rows(s, gold_mask(gold, s.shape[1], "ranking_auc"))
    return None if out is None else float(out[0])
