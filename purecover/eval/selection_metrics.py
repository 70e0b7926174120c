"""Selection and coverage metrics (docs/guides/evaluation.md#metrics).

Selection (per question, over the candidate list of ``candidates.jsonl``):

* Information Coverage@K = |D_K ∩ D_gold| / |D_gold| and Purity@K = |D_K ∩ D_gold| / |D_K|,
  with D_gold either the candidates containing a gold answer (the paper's proxy, see
  :func:`answer_containing`) or the candidates that are gold supporting paragraphs
  (``gold_doc_ids``). Both are sets of candidate *positions*: a gold passage that was not
  retrieved is not a candidate, so it is not counted in D_gold (the report counts such
  passages separately as ``gold_not_retrieved``).

Coverage (LANCER / CRUX):

* CRUX Cov: the fraction of sub-questions answered (rating ≥ η) by at least one top-k document.
* α-nDCG@K and subtopic recall@K of the selection as a ranking (best first), the question's gold
  supporting passages as subtopics (`purecover.eval.subtopic_metrics`): the ideal ranking is drawn from
  the question's candidates, and K is the budget, so a selection shorter than K gains nothing after its
  last passage.

Undefined values (empty gold, empty selection, no sub-questions, no gold candidate) are ``None`` and are
skipped by the aggregations, which report how many questions entered each mean.

A question's figures are a `QuestionSelection`; their means over the questions a `SelectionMeans`, whose
parts are the records metrics.json stores (`purecover.records.CoveragePurity`, ...).
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..metrics import coverage_at_k, purity_at_k
from ..records import (
    CandidateDoc,
    CandidateRecord,
    CoveragePurity,
    CruxCoverage,
    SubtopicCoverage,
    SupportingCoveragePurity,
)
from .subtopic_metrics import ALPHA, SubtopicUnit, alpha_ndcg, question_subtopics, subtopic_recall

__all__ = [
    "YES_NO",
    "QuestionSelection",
    "SelectionMeans",
    "answer_containing",
    "coverage_at_k",
    "crux_coverage",
    "purity_at_k",
    "question_selection",
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


def answer_containing(docs: Sequence[CandidateDoc], answers: Iterable[str]) -> set[int]:
    """Positions of the candidates whose normalised ``title + text`` contains a gold answer.

    "Contains" means the normalised answer occurs as a whole-token span: "new york" is in
    "New York City", "york" is not in "Yorkshire". Answers that normalise to "yes"/"no" (StrategyQA, HotpotQA
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
        title = doc.title or ""
        hay = f" {_normalize(f'{title} {doc.text}')} "
        if any(g in hay for g in golds):
            found.add(i)
    return found


def _selected_positions(selected: Sequence[int], n_docs: int, qid: str) -> list[int]:
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


@dataclasses.dataclass(frozen=True)
class QuestionSelection:
    """Coverage@K and Purity@K of one question's selection against both gold definitions (None: undefined)."""

    qid: str
    k: int  # passages selected
    answer_coverage: float | None
    answer_purity: float | None
    support_coverage: float | None
    support_purity: float | None
    n_answer_gold: int  # answer-containing candidates
    n_support_gold: int  # gold supporting paragraphs among the candidates
    gold_not_retrieved: int  # gold supporting paragraphs that are not candidates
    crux_coverage: float | None  # None without the teacher's LANCER ratings
    alpha_ndcg: float | None  # None when no candidate is a gold supporting passage
    subtopic_recall: float | None  # None when the question has no gold supporting passage
    n_subtopics: int  # gold subtopics of the question, retrieved or not
    n_subtopics_retrieved: int  # those some candidate covers
    alpha: float  # α of alpha_ndcg
    subtopic_unit: SubtopicUnit  # what one subtopic is (`purecover.eval.subtopic_metrics.subtopic_unit`)


def question_selection(record: CandidateRecord, selected: Sequence[int], ratings: Any = None, *,
                       k: int | None = None, unit: SubtopicUnit = "passage", alpha: float = ALPHA,
                       judged: Mapping[str, Mapping[str, int]] | None = None) -> QuestionSelection:
    """Coverage and purity of one question against both gold definitions, and its subtopic metrics.

    `record` is the question's candidates; `selected` a list of candidate positions, best first. `ratings`, the
    teacher's LANCER ratings of the question (one row per candidate in retrieval order, one column per
    sub-question), adds ``crux_coverage``: the share of sub-questions some selected candidate answers
    (`crux_coverage`). ``alpha_ndcg`` and ``subtopic_recall`` rank `selected` at cut-off `k` (the budget;
    default: the selection's length), the ideal from all candidates, the subtopics counted by `unit` (``nugget``:
    the topic's nugget qrels `judged`, doc id -> nugget -> grade).
    """
    qid, docs = record.qid, record.docs
    ranked = _selected_positions(selected, len(docs), qid)
    sel = set(ranked)
    cutoff = k if k is not None else max(len(ranked), 1)
    topics = question_subtopics(record, unit, judged)
    ranking = [topics.covers[i] for i in ranked]
    answer_gold = answer_containing(docs, record.answers)
    gold_ids = set(record.gold_doc_ids)
    support_gold = {i for i, d in enumerate(docs) if d.doc_id in gold_ids}
    retrieved_ids = {d.doc_id for d in docs}
    return QuestionSelection(
        qid=qid,
        k=len(sel),
        answer_coverage=coverage_at_k(sel, answer_gold),
        answer_purity=purity_at_k(sel, answer_gold),
        support_coverage=coverage_at_k(sel, support_gold),
        support_purity=purity_at_k(sel, support_gold),
        n_answer_gold=len(answer_gold),
        n_support_gold=len(support_gold),
        gold_not_retrieved=len(gold_ids - retrieved_ids),
        crux_coverage=_selected_crux(ratings, sorted(sel), qid),
        alpha_ndcg=alpha_ndcg(ranking, topics.covers, cutoff, alpha),
        subtopic_recall=subtopic_recall(ranking, topics.subtopics, cutoff),
        n_subtopics=len(topics.subtopics),
        n_subtopics_retrieved=len(topics.retrieved),
        alpha=alpha,
        subtopic_unit=unit,
    )


def _selected_crux(ratings: Any, positions: Sequence[int], qid: str) -> float | None:
    """CRUX Cov of the selected rows of `ratings` (None without ratings or sub-questions; 0 when none selected)."""
    if ratings is None or not len(ratings) or not len(ratings[0]):
        return None
    if positions and max(positions) >= len(ratings):
        raise ValueError(f"question {qid!r}: ratings have {len(ratings)} rows, candidate {max(positions)} selected")
    return crux_coverage([ratings[i] for i in positions], len(positions)) if positions else 0.0


def _mean(values: list[float | None]) -> tuple[float | None, int]:
    kept = [v for v in values if v is not None]
    return (sum(kept) / len(kept) if kept else None), len(kept)


@dataclasses.dataclass(frozen=True)
class SelectionMeans:
    """Means of `QuestionSelection`s over the questions (`summarize_selection`)."""

    n_questions: int
    mean_k: float | None  # mean passages selected; None without questions
    answer: CoveragePurity  # against answer-containing candidates
    supporting: SupportingCoveragePurity  # against gold supporting paragraphs
    crux: CruxCoverage  # CRUX coverage over the questions with ratings
    subtopics: SubtopicCoverage  # α-nDCG@K and subtopic recall@K


def summarize_selection(rows: Sequence[QuestionSelection]) -> SelectionMeans:
    """Mean Coverage@K and Purity@K over `question_selection` rows, against answer-containing candidates
    (``answer``) and gold supporting paragraphs (``supporting``), and the subtopic metrics (``subtopics``).

    Undefined values are skipped; ``n_coverage``/``n_purity`` count the questions in each mean and
    ``n_undefined_*`` those left out; ``subtopics`` counts the questions without gold and those whose gold no
    candidate holds. The rows must share α and the subtopic unit.
    """
    n = len(rows)
    settings = {(r.alpha, r.subtopic_unit) for r in rows} or {(ALPHA, "passage")}
    if len(settings) > 1:
        raise ValueError(f"the rows mix subtopic settings (alpha, unit): {sorted(settings)}")
    ((alpha, unit),) = settings
    ndcg, n_ndcg = _mean([r.alpha_ndcg for r in rows])
    recall, n_recall = _mean([r.subtopic_recall for r in rows])
    answer_cov, n_answer_cov = _mean([r.answer_coverage for r in rows])
    answer_pur, n_answer_pur = _mean([r.answer_purity for r in rows])
    support_cov, n_support_cov = _mean([r.support_coverage for r in rows])
    support_pur, n_support_pur = _mean([r.support_purity for r in rows])
    crux, n_crux = _mean([r.crux_coverage for r in rows])
    return SelectionMeans(
        n_questions=n,
        mean_k=(sum(r.k for r in rows) / n) if n else None,
        answer=CoveragePurity(coverage=answer_cov, purity=answer_pur, n_coverage=n_answer_cov,
                              n_purity=n_answer_pur, n_undefined_coverage=n - n_answer_cov,
                              n_undefined_purity=n - n_answer_pur),
        supporting=SupportingCoveragePurity(coverage=support_cov, purity=support_pur, n_coverage=n_support_cov,
                                            n_purity=n_support_pur, n_undefined_coverage=n - n_support_cov,
                                            n_undefined_purity=n - n_support_pur,
                                            gold_not_retrieved=sum(r.gold_not_retrieved for r in rows)),
        crux=CruxCoverage(coverage=crux, n=n_crux),
        subtopics=SubtopicCoverage(alpha_ndcg=ndcg, recall=recall, n_alpha_ndcg=n_ndcg, n_recall=n_recall,
                                   n_no_subtopics=sum(1 for r in rows if not r.n_subtopics),
                                   n_none_retrieved=sum(1 for r in rows if r.n_subtopics and
                                                        not r.n_subtopics_retrieved),
                                   alpha=alpha, unit=unit),
    )


# --------------------------------------------------------------------------- coverage metrics


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")


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
