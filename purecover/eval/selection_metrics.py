"""Selection and coverage metrics (DESIGN §5).

Selection (per question, over the candidate list of ``candidates.jsonl``):

* Information Coverage@K = |D_K ∩ D_gold| / |D_gold| and Purity@K = |D_K ∩ D_gold| / |D_K|,
  with D_gold either the candidates containing a gold answer (the paper's proxy, see
  :func:`answer_containing`) or the candidates that are gold supporting paragraphs
  (``gold_doc_ids``). Both are sets of candidate *positions*: a gold passage that was not
  retrieved is not a candidate, so it is not counted in D_gold (the report counts such
  passages separately as ``gold_not_retrieved``).

Coverage (LANCER / CRUX / CoverageBench):

* α-nDCG@k (Clarke et al. 2008) with log2(r + 1) discount and the ideal ranking built
  greedily, as ``ndeval`` does;
* StRecall@k (subtopic recall);
* CRUX Cov: the fraction of sub-questions answered (rating ≥ η) by at least one top-k document.

Undefined values (empty gold, empty selection, no nuggets) are ``None`` and are skipped by the
aggregations, which report how many questions entered each mean.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "YES_NO",
    "alpha_ndcg",
    "answer_containing",
    "coverage_at_k",
    "crux_coverage",
    "purity_at_k",
    "question_selection",
    "selection_report",
    "strecall",
    "summarize_selection",
]

YES_NO = frozenset({"yes", "no"})
_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _normalize(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation and articles, collapse white space."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _field(doc: Any, name: str) -> Any:
    if isinstance(doc, Mapping):
        return doc.get(name)
    return getattr(doc, name, None)


def answer_containing(docs: Sequence[Any], answers: Iterable[str]) -> set[int]:
    """Positions of the candidates whose normalised ``title + text`` contains a gold answer.

    "Contains" means the normalised answer occurs as a whole-token span: "new york" is in
    "New York City", "york" is not in "Yorkshire". Docs are ``candidates.jsonl`` dicts (or
    objects with ``title``/``text``). Answers that normalise to "yes"/"no" (StrategyQA, HotpotQA
    comparison questions) or to nothing are ignored: no passage "contains" a yes/no answer, so a
    yes/no question has an empty answer-containing set (its Coverage@K is undefined).
    """
    golds = []
    for a in answers:
        n = _normalize(a)
        if n and n not in YES_NO:
            golds.append(f" {n} ")
    if not golds:
        return set()
    found = set()
    for i, doc in enumerate(docs):
        title = _field(doc, "title") or ""
        text = _field(doc, "text") or ""
        hay = f" {_normalize(f'{title} {text}')} "
        if any(g in hay for g in golds):
            found.add(i)
    return found


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


def _selected_positions(selected: Any, n_docs: int, qid: str) -> list[int]:
    if isinstance(selected, Mapping):
        selected = selected.get("selected")
    if selected is None or isinstance(selected, (str, bytes)):
        raise ValueError(f"question {qid!r}: field 'selected': expected a list of candidate positions")
    out = []
    for k in selected:
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"question {qid!r}: field 'selected': position {k!r} is not an integer")
        if not 0 <= k < n_docs:
            raise ValueError(f"question {qid!r}: field 'selected': position {k} outside 0..{n_docs - 1}")
        out.append(k)
    return out


def question_selection(record: Mapping[str, Any], selected: Any) -> dict[str, Any]:
    """Coverage and purity of one question against both gold definitions.

    `record` is a ``candidates.jsonl`` record; `selected` a list of candidate positions (or a
    ``selections.jsonl`` record with ``selected``).
    """
    qid = str(record.get("qid", "?"))
    docs = record.get("docs")
    if not isinstance(docs, list):
        raise ValueError(f"question {qid!r}: field 'docs': expected a list of candidates")
    sel = set(_selected_positions(selected, len(docs), qid))
    answer_gold = answer_containing(docs, record.get("answers") or [])
    gold_ids = set(record.get("gold_doc_ids") or [])
    support_gold = {i for i, d in enumerate(docs) if _field(d, "doc_id") in gold_ids}
    retrieved_ids = {_field(d, "doc_id") for d in docs}
    return {
        "qid": qid,
        "k": len(sel),
        "answer_coverage": coverage_at_k(sel, answer_gold),
        "answer_purity": purity_at_k(sel, answer_gold),
        "support_coverage": coverage_at_k(sel, support_gold),
        "support_purity": purity_at_k(sel, support_gold),
        "n_answer_gold": len(answer_gold),
        "n_support_gold": len(support_gold),
        "gold_not_retrieved": len(gold_ids - retrieved_ids),
    }


def _mean(values: list[float | None]) -> tuple[float | None, int]:
    kept = [v for v in values if v is not None]
    return (sum(kept) / len(kept) if kept else None), len(kept)


def selection_report(records: Iterable[tuple[Mapping[str, Any], Any]]) -> dict[str, Any]:
    """Mean Coverage@K and Purity@K over questions, against answer-containing candidates
    (``answer``) and gold supporting paragraphs (``supporting``).

    `records` yields ``(candidates_record, selected)`` pairs. Undefined values are skipped;
    ``n_coverage``/``n_purity`` count the questions in each mean and ``n_undefined_*`` those left out.
    """
    return summarize_selection([question_selection(rec, sel) for rec, sel in records])


def summarize_selection(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`selection_report` from `question_selection` rows already computed."""
    n = len(rows)
    report: dict[str, Any] = {
        "n_questions": n,
        "mean_k": (sum(r["k"] for r in rows) / n) if n else None,
    }
    for name in ("answer", "support"):
        cov, n_cov = _mean([r[f"{name}_coverage"] for r in rows])
        pur, n_pur = _mean([r[f"{name}_purity"] for r in rows])
        report["answer" if name == "answer" else "supporting"] = {
            "coverage": cov,
            "purity": pur,
            "n_coverage": n_cov,
            "n_purity": n_pur,
            "n_undefined_coverage": n - n_cov,
            "n_undefined_purity": n - n_pur,
        }
    report["supporting"]["gold_not_retrieved"] = sum(r["gold_not_retrieved"] for r in rows)
    return report


# --------------------------------------------------------------------------- coverage metrics


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")


def _gain(nuggets: Iterable[Hashable], seen: Mapping[Hashable, int], alpha: float) -> float:
    return sum((1.0 - alpha) ** seen.get(n, 0) for n in set(nuggets))


def _dcg(ranking: Sequence[Collection[Hashable]], k: int, alpha: float) -> float:
    seen: dict[Hashable, int] = {}
    total = 0.0
    for r, nuggets in enumerate(ranking[:k], start=1):
        total += _gain(nuggets, seen, alpha) / math.log2(r + 1)
        for n in set(nuggets):
            seen[n] = seen.get(n, 0) + 1
    return total


def _greedy_ideal(pool: Sequence[Collection[Hashable]], k: int, alpha: float) -> list[Collection[Hashable]]:
    """Greedy ideal ranking (ndeval): at each rank the document with the largest gain given the
    nuggets seen so far; ties go to the earlier document of `pool`."""
    remaining = list(pool)
    seen: dict[Hashable, int] = {}
    ideal = []
    while remaining and len(ideal) < k:
        gains = [_gain(d, seen, alpha) for d in remaining]
        best = max(range(len(remaining)), key=lambda i: (gains[i], -i))
        doc = remaining.pop(best)
        ideal.append(doc)
        for n in set(doc):
            seen[n] = seen.get(n, 0) + 1
    return ideal


def alpha_ndcg(run_nuggets: Sequence[Collection[Hashable]], k: int, alpha: float = 0.5,
               n_nuggets: int | None = None,
               ideal_pool: Sequence[Collection[Hashable]] | None = None) -> float:
    """α-nDCG@k of a ranking given as the nugget set of each document, best first.

    Gain at rank r: Σ over the document's nuggets of (1 − α)^(times the nugget was seen at
    earlier ranks); discount log2(r + 1). The ideal DCG ranks greedily (as ``ndeval``) the
    documents of `ideal_pool`, by default the run's own documents; pass the nugget sets of all
    judged documents of the topic to normalise against the full pool. With α = 0 this is nDCG
    with gain = number of nuggets of the document. `n_nuggets`, when given, is the topic's
    number of nuggets and is only checked (the run may not mention more distinct nuggets).
    Returns 0.0 when the ideal DCG is 0 (no document has a nugget).
    """
    _check_k(k)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    pool = list(run_nuggets if ideal_pool is None else ideal_pool)
    if n_nuggets is not None:
        mentioned = set().union(*map(set, run_nuggets), *map(set, pool)) if (run_nuggets or pool) else set()
        if len(mentioned) > n_nuggets:
            raise ValueError(f"the run mentions {len(mentioned)} distinct nuggets, more than n_nuggets={n_nuggets}")
    ideal = _dcg(_greedy_ideal(pool, k, alpha), k, alpha)
    if ideal <= 0.0:
        return 0.0
    return _dcg(list(run_nuggets), k, alpha) / ideal


def strecall(run_nuggets: Sequence[Collection[Hashable]], k: int,
             n_nuggets: int | Collection[Hashable]) -> float | None:
    """StRecall@k: the fraction of the topic's nuggets covered by the top-k documents.

    `n_nuggets` is the number of nuggets of the topic or the collection of their ids (then only
    those ids count). None when the topic has no nuggets.
    """
    _check_k(k)
    covered: set[Hashable] = set()
    for nuggets in run_nuggets[:k]:
        covered |= set(nuggets)
    if isinstance(n_nuggets, int) and not isinstance(n_nuggets, bool):
        if n_nuggets < 0:
            raise ValueError(f"n_nuggets must be ≥ 0, got {n_nuggets}")
        if len(covered) > n_nuggets:
            raise ValueError(f"the top {k} cover {len(covered)} distinct nuggets, more than n_nuggets={n_nuggets}")
        return len(covered) / n_nuggets if n_nuggets else None
    ids = set(n_nuggets)
    return len(covered & ids) / len(ids) if ids else None


def crux_coverage(ratings: Any, k: int, eta: float = 3) -> float | None:
    """CRUX Cov@k: the fraction of sub-questions (columns) rated ≥ `eta` by at least one of the
    top-k documents. `ratings` is a (K × n) matrix (list of rows or array) in ranked order.
    None when there are no sub-questions (or no rows, so their number is unknown)."""
    _check_k(k)
    rows = [list(row) for row in ratings]
    if not rows:
        return None
    n = len(rows[0])
    if any(len(row) != n for row in rows):
        raise ValueError("ratings rows have different lengths")
    if n == 0:
        return None
    top = rows[:k]
    answered = sum(1 for j in range(n) if any(row[j] >= eta for row in top))
    return answered / n
