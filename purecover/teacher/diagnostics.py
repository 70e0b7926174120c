"""Diagnostics of a labels.jsonl: are the teacher's selections healthy? (docs/guides/label-quality.md#diagnostics-always-on).

Pure functions over ``labels.jsonl`` records (`LabelRecord`; and `CandidateRecord`s for the gold
comparison); no I/O. Every figure they return is a plain float rounded to 4 decimals (or None
when undefined), in the records `LabelDiagnostics` and `GoldComparison`.

Older labels files lack ``fallback_reasons`` and ``stop``: such records are counted under
``"unknown"`` instead of failing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics import prf
from ..records import CandidateRecord, GoldComparison, LabelDiagnostics, LabelRecord, PrecisionRecall

__all__ = [
    "FALLBACK_CODES",
    "STOP_CODES",
    "fallback_warning",
    "gold_comparison",
    "label_diagnostics",
    "prf",
    "resolve_budget",
    "size_histogram",
]

FALLBACK_CODES = ("reply_parse", "no_oracle_steps", "answer_span_empty", "min_select")
STOP_CODES = ("budget", "threshold", "first_step", "candidates", "ranking")
UNKNOWN = "unknown"


# --------------------------------------------------------------------------- small helpers


def _round(x: float | None) -> float | None:
    """`x` as a plain float rounded to 4 decimals; None and non-finite values give None."""
    if x is None or not math.isfinite(float(x)):
        return None
    return round(float(x), 4)


def _mean(values: Sequence[float]) -> float | None:
    """Rounded mean, None for no values."""
    return _round(sum(values) / len(values)) if values else None


def _is_error(record: LabelRecord) -> bool:
    return record.status == "error"


def resolve_budget(records: Sequence[LabelRecord], budget: int | None = None) -> int:
    """The budget K (passages): `budget` if given, else the largest ``teacher.budget`` of the records,
    else the largest |S| seen (0 for no records)."""
    if budget is not None:
        return int(budget)
    found = [r.teacher.budget for r in records if r.teacher.budget is not None]
    if found:
        return max(found)
    return max((len(r.selected) for r in records), default=0)


def size_histogram(records: Iterable[LabelRecord], budget: int, status: str | None = None) -> dict[str, int]:
    """Count of questions per selection size |S| (passages), keys "0".."budget" (extended when a
    record selected more), over non-error records; only those with `status` when given."""
    sizes = [len(r.selected) for r in records if not _is_error(r) and (status is None or r.status == status)]
    top = max([budget, *sizes])
    counts = Counter(sizes)
    return {str(n): counts.get(n, 0) for n in range(top + 1)}


# --------------------------------------------------------------------------- fallbacks and stops


def _fallback_reason_counts(records: Sequence[LabelRecord]) -> dict[str, int]:
    """code -> number of records listing it; fallback records without codes count as "unknown"."""
    counts: Counter[str] = Counter()
    for r in records:
        if r.fallback_reasons:
            counts.update(r.fallback_reasons)
        elif r.status == "fallback":
            counts[UNKNOWN] += 1
    return dict(counts.most_common())


def _stop_counts(records: Sequence[LabelRecord]) -> dict[str, int]:
    """stop code -> count over the records given; a record without ``stop`` counts as "unknown"."""
    counts = Counter(r.stop or UNKNOWN for r in records)
    return dict(counts.most_common())


def _first_step_stop_rate(records: Sequence[LabelRecord]) -> float | None:
    """Share of the given (non-error) records whose ``stop`` is "first_step", among those that record a
    stop at all; None when none does (older files)."""
    known = [r.stop for r in records if r.stop]
    return _round(sum(s == "first_step" for s in known) / len(known)) if known else None


# --------------------------------------------------------------------------- e and W


def _normalised_e(record: LabelRecord) -> np.ndarray | None:
    """The step weights e of a record scaled to sum 1; None when empty, non-finite or not positive."""
    e = np.asarray([np.nan if x is None else x for x in record.e], dtype=np.float64)
    if e.size == 0 or not np.all(np.isfinite(e)) or np.any(e < 0) or e.sum() <= 0:
        return None
    return e / e.sum()


def _entropy(p: np.ndarray) -> float:
    """Shannon entropy of a distribution, in nats (0 log 0 = 0)."""
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def _e_stats(records: Sequence[LabelRecord]) -> tuple[float | None, float | None, float | None]:
    """Mean entropy of e (nats), the same divided by log N (N = 1 counts as 1.0), and mean max e."""
    ent, ent_norm, peak = [], [], []
    for r in records:
        p = _normalised_e(r)
        if p is None:
            continue
        h = _entropy(p)
        ent.append(h)
        ent_norm.append(h / math.log(p.size) if p.size > 1 else 1.0)
        peak.append(float(p.max()))
    return _mean(ent), _mean(ent_norm), _mean(peak)


def _mean_max_w(record: LabelRecord) -> float | None:
    """Mean over steps of the largest coverage W[k, i] over documents k; nulls are ignored."""
    rows = record.W
    if not rows or not any(rows):
        return None
    try:
        W = np.asarray([[np.nan if x is None else x for x in row] for row in rows], dtype=np.float64)
    except (TypeError, ValueError):  # ragged or not numeric
        return None
    if W.ndim != 2 or W.shape[1] == 0:
        return None
    finite = np.isfinite(W)
    keep = finite.any(axis=0)
    if not keep.any():
        return None
    col_max = np.where(finite, W, -np.inf)[:, keep].max(axis=0)
    return float(col_max.mean())


# --------------------------------------------------------------------------- public API


def label_diagnostics(records: Iterable[LabelRecord], budget: int | None = None) -> LabelDiagnostics:
    """Health figures of a labels file.

    Fields:

    - ``questions``: records; ``ok`` / ``fallback`` / ``error``: records per status;
    - ``budget``: the K used for the histogram (`budget`, else the records' ``teacher.budget``);
    - ``size_histogram``: "0".."budget" -> questions with that |S| (non-error records);
      ``fallback_size_histogram``: the same over fallback records only;
    - ``mean_size``: mean |S| in passages over non-error records;
    - ``fallback_rate``: fallback records / questions;
    - ``fallback_reasons``: code -> records listing it (fallback records without the field: "unknown");
    - ``first_step_stop_rate``: share of non-error records with ``stop == "first_step"``, among those
      that record a stop (None when none does); ``stop_counts``: stop -> non-error records ("unknown"
      when absent);
    - ``e_entropy``: mean entropy of e normalised to sum 1, in nats; ``e_entropy_normalised``: the
      same divided by log N per question (1 = uniform; a question with N = 1 step counts as 1.0);
      ``max_e``: mean of the largest normalised step weight (e all ones reads as uniform);
    - ``max_W``: mean over questions of the mean over steps of max over documents of W (1 = every
      step is covered by one document alone; 1/K1 = uniform coverage).

    Means skip records whose e or W is empty or not finite, and are None when none is left.
    """
    records = list(records)
    labelled = [r for r in records if not _is_error(r)]
    n = len(records)
    k = resolve_budget(records, budget)
    status = Counter(r.status for r in records)
    max_w = [m for m in (_mean_max_w(r) for r in labelled) if m is not None]
    e_entropy, e_entropy_normalised, max_e = _e_stats(labelled)
    return LabelDiagnostics(
        questions=n,
        ok=status.get("ok", 0),
        fallback=status.get("fallback", 0),
        error=status.get("error", 0),
        budget=k,
        size_histogram=size_histogram(labelled, k),
        fallback_size_histogram=size_histogram(labelled, k, status="fallback"),
        mean_size=_mean([float(len(r.selected)) for r in labelled]),
        fallback_rate=_round(status.get("fallback", 0) / n) if n else None,
        fallback_reasons=_fallback_reason_counts(records),
        first_step_stop_rate=_first_step_stop_rate(labelled),
        stop_counts=_stop_counts(labelled),
        e_entropy=e_entropy, e_entropy_normalised=e_entropy_normalised, max_e=max_e,
        max_W=_mean(max_w),
        **_reply_figures(records),
    )


def _reply_figures(records: Sequence[LabelRecord]) -> dict[str, Any]:
    """``replies`` (records holding a teacher reply), ``reply_usable_rate`` (their share without a reply_issue or
    with ``unclosed``: the steps are the reply's own) and ``reply_issues`` (issue -> records)."""
    with_reply = [r for r in records if r.reply is not None and not _is_error(r)]
    issues = Counter(r.reply_issue for r in with_reply if r.reply_issue)
    usable = sum(r.reply_issue in (None, "unclosed") for r in with_reply)
    return {"replies": len(with_reply), "reply_issues": dict(sorted(issues.items())),
            "reply_usable_rate": _round(usable / len(with_reply)) if with_reply else None}


def _dominant_reason(diag: LabelDiagnostics) -> str | None:
    """The fallback code behind more than half of the fallback records, if any."""
    total = max(diag.fallback, 1)
    for code, count in diag.fallback_reasons.items():
        if code != UNKNOWN and 2 * count > total:
            return code
    return None


def fallback_warning(diag: LabelDiagnostics, threshold: float) -> str | None:
    """One line of advice when the fallback rate of `diag` (from :func:`label_diagnostics`) exceeds
    `threshold` (a share in [0, 1]); None otherwise. The advice follows the dominant fallback code."""
    rate = diag.fallback_rate
    if rate is None or rate <= threshold:
        return None
    head = f"label: {100 * rate:.0f}% of questions fell back"
    limit = f"(threshold {100 * threshold:g}%)"
    reason = _dominant_reason(diag)
    unclosed = diag.reply_issues.get("unclosed", 0)
    if reason == "reply_parse" and 2 * unclosed > diag.fallback:
        # the steps were the reply's own: only the answer line is missing
        return (f"{head} {limit}, most because the teacher's reply reached teacher.max_new_tokens before an answer "
                f"line (reply_issue unclosed, {unclosed} replies): their complete steps were labelled and the answer "
                "taken from the last step (the summary's reply_usable_rate counts them usable); raise "
                "teacher.max_new_tokens for whole replies")
    if reason == "reply_parse":
        return (f"{head} {limit}, most because the teacher's reply did not parse (reply_parse): read the "
                "`reply` fields of labels.jsonl, raise teacher.max_new_tokens, or use a stronger teacher.model "
                "(or teacher.steps=oracle where the dataset has decompositions)")
    if reason == "no_oracle_steps":
        return (f"{head} {limit}, most because the dataset has no oracle steps for them (no_oracle_steps): "
                "use teacher.steps=auto (the teacher writes the steps of the questions without them) or model, "
                "or a dataset with decompositions")
    to = " to min_select" if reason == "min_select" else ""
    # A flatter W (higher temperature) lowers every coverage gain and raises the noise term: sharpen it.
    return (f"{head}{to} {limit}: lower teacher.lam or teacher.tau_stop, lower the W temperature for a sharper W "
            "(teacher.tau2, or teacher.embedding_tau for the embedding estimator), try "
            "teacher.normalize=zscore, or run `purecover tune RECIPE`")


def _summarise(rows: Sequence[tuple[float, float, float, int]]) -> PrecisionRecall:
    precision, recall, f1, mean_size = (_mean([row[i] for row in rows]) for i in range(4))
    return PrecisionRecall(precision=precision, recall=recall, f1=f1, mean_size=mean_size)


def gold_comparison(records: Iterable[LabelRecord], candidates: Mapping[str, CandidateRecord], k: int
                    ) -> GoldComparison:
    """Selected passages against gold passages, next to plain retrieval.

    Over label records with status != "error" whose candidates record has a non-empty
    ``gold_doc_ids`` (records without a candidates record are skipped). Per question, with G the
    set of all gold doc ids (retrieved or not) and C a chosen set of doc ids: P = |C ∩ G| / |C|
    (0 when C is empty), R = |C ∩ G| / |G|, F1 = 2PR / (P + R), and P = R = F1 = 0 when C ∩ G is
    empty. Means over questions (shares in [0, 1]) for

    - ``labels``: the teacher's ``selected_doc_ids``;
    - ``retrieval_top_size``: retrieval's first |S| candidates (the same size as the labels, per question);
    - ``retrieval_top_2``: retrieval's first 2 candidates;
    - ``retrieval_top_k``: retrieval's first `k` candidates;

    each ``{precision, recall, f1, mean_size}`` (``mean_size`` in passages); plus ``questions`` and ``k``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    rows: dict[str, list[tuple[float, float, float, int]]] = {
        "labels": [], "retrieval_top_size": [], "retrieval_top_2": [], "retrieval_top_k": []}
    for r in records:
        cand = candidates.get(r.qid)
        if _is_error(r) or cand is None or not cand.gold_doc_ids:
            continue
        gold = set(cand.gold_doc_ids)
        ranked = [d.doc_id for d in cand.docs]
        chosen = {
            "labels": list(r.selected_doc_ids),
            "retrieval_top_size": ranked[: len(r.selected)],
            "retrieval_top_2": ranked[:2],
            "retrieval_top_k": ranked[:k],
        }
        for name, ids in chosen.items():
            rows[name].append((*prf(ids, gold), len(set(ids))))
    return GoldComparison(questions=len(rows["labels"]), k=k, labels=_summarise(rows["labels"]),
                          retrieval_top_size=_summarise(rows["retrieval_top_size"]),
                          retrieval_top_2=_summarise(rows["retrieval_top_2"]),
                          retrieval_top_k=_summarise(rows["retrieval_top_k"]))
