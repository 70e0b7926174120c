"""Scoring runs and selections on a coverage collection with the field's own tools.

`score_ranked` computes, per topic:

* ``nDCG@k`` and ``P@k`` with ``ir_measures`` (pytrec_eval: trec_eval's nDCG, gain = the relevance grade): a
  document's relevance is its highest grade over the topic's nuggets, unless document qrels are given;
* ``alpha_nDCG@k`` (α = 0.5) and ``StRecall@k`` with ``ir_measures``' pyndeval provider (TREC's ndeval), from
  the nugget qrels, the nugget as ndeval's subtopic; ndeval's cut-offs stop at 20 (`MAX_NDEVAL_DEPTH`);
* ``Cov@k`` when CRUX judgments are given, as CRUX's evaluator defines it: per sub-question the best rating
  among the top k documents (an unjudged document rates 0), and the share of sub-questions whose best rating
  is at least `COVERED_RATING` (3); with ``answerable_only``, the share among the sub-questions some judged
  document answers (CRUX's ``filter_by_oracle``);
* for a selection, a set of variable size taken as it is (not padded to k): ``StRecall@set`` (the share of
  the topic's judged nuggets the set covers) and, with judgments, ``Cov@set``.

Topics are those of the qrels that have at least one judged relevant document; a topic the run does not
answer scores 0 on every measure (as ``trec_eval -c``), and is counted in `RunScores.missing`. Topics of the
run without judgments are left out and counted in `RunScores.unjudged`. A TREC run's own scores are handed to
the tools as the file holds them (``scores``), so each orders it as it does when run on the file: by score,
trec_eval breaking a tie by the later doc id, ndeval by the earlier one; Cov@k follows trec_eval's order. A
ranking without scores (a selection, a JSONL run) is handed over as strictly decreasing scores, so no tie rule
reorders it.

The extra ``coverage`` (``pip install -e '.[coverage]'``; ``make setup`` installs it) provides ir_measures
and pyndeval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from .coverage_collections import CoverageCollection
from .subtopic_metrics import subtopic_recall

__all__ = ["COVERED_RATING", "MAX_NDEVAL_DEPTH", "RunScores", "cov_at", "measure_names", "score_ranked"]

MAX_NDEVAL_DEPTH = 20  # ndeval.c computes its @k measures up to k = 20
COVERED_RATING = 3  # CRUX: a sub-question is answered by a rating of at least 3 (of 5)
ALPHA = 0.5


def measure_names(depth: int, judgments: bool, selections: bool = False) -> list[str]:
    """The measures `score_ranked` reports, as ir_measures prints them (plus CRUX's Cov and the set forms)."""
    names = [f"nDCG@{depth}", f"P@{depth}", f"alpha_nDCG@{depth}", f"StRecall@{depth}"]
    if judgments:
        names.append(f"Cov@{depth}")
    if selections:
        names.append("StRecall@set")
        if judgments:
            names.append("Cov@set")
    return names


@dataclasses.dataclass
class RunScores:
    """Per measure, per topic scores (every topic of the collection with a judged relevant document), and the
    topics the run did not answer (scored 0) or answered without judgments (left out)."""

    per_topic: dict[str, dict[str, float]]
    topics: list[str]
    missing: list[str]
    unjudged: list[str]

    def mean(self, measure: str) -> float:
        values = [self.per_topic[measure][t] for t in self.topics]
        return float(np.mean(values)) if values else 0.0

    def values(self, measure: str) -> list[float]:
        return [self.per_topic[measure][t] for t in self.topics]


def cov_at(ranked: Sequence[str], judged: Mapping[str, Sequence[int]], k: int | None,
           answerable_only: bool = False) -> float | None:
    """CRUX's Cov@k of one topic: `judged` maps doc ids to one rating per sub-question; `k` None takes the whole
    ranking (a selection as given). None when the topic has no sub-question to count."""
    if not judged:
        return None
    width = len(next(iter(judged.values())))
    best = np.zeros(width, dtype=int)
    for doc in ranked[:k] if k is not None else ranked:
        if doc in judged:
            best = np.maximum(best, np.asarray(judged[doc], dtype=int))
    oracle = np.max(np.asarray(list(judged.values()), dtype=int), axis=0)
    counted = oracle >= COVERED_RATING if answerable_only else np.ones(width, dtype=bool)
    if not counted.any():
        return None
    return float(np.sum((best >= COVERED_RATING) & counted) / np.sum(counted))


def _check_depth(depth: int) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_NDEVAL_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {MAX_NDEVAL_DEPTH} (ndeval's α-nDCG and subtopic "
                         f"recall stop at {MAX_NDEVAL_DEPTH}), got {depth!r}")


def score_ranked(ranked: Mapping[str, Sequence[str]], collection: CoverageCollection, depth: int = 20, *,
                 doc_qrels: Mapping[str, Mapping[str, int]] | None = None, selections: bool = False,
                 answerable_only: bool = False,
                 scores: Mapping[str, Sequence[tuple[str, float]]] | None = None) -> RunScores:
    """Score `ranked` (qid -> doc ids, best first) on `collection` at cut-off `depth` (module docstring); `scores`
    (qid -> (doc id, score) as a TREC run file holds them) replaces the order's stand-in scores for the tools."""
    try:
        import ir_measures
        from ir_measures import P, StRecall, alpha_nDCG, nDCG
    except ImportError as exc:
        raise ImportError("scoring coverage needs ir_measures and pyndeval: pip install -e '.[coverage]'") from exc
    _check_depth(depth)
    topics = sorted(q for q, docs in collection.qrels.items() if docs)
    judged_topics = set(topics)
    missing = [t for t in topics if not ranked.get(t)]
    unjudged = sorted(q for q in ranked if q not in judged_topics)
    relevance = {q: {d: max(g.values()) for d, g in docs.items()} for q, docs in collection.qrels.items()}
    if doc_qrels is not None:
        relevance = {q: dict(docs) for q, docs in doc_qrels.items()}
    nugget_qrels = [ir_measures.Qrel(q, d, g, n) for q in topics for d, grades in collection.qrels[q].items()
                    for n, g in grades.items()]
    level_qrels = [ir_measures.Qrel(q, d, int(r)) for q, docs in relevance.items() if q in judged_topics
                   for d, r in docs.items()]
    run = [ir_measures.ScoredDoc(q, d, score) for q in topics if ranked.get(q)
           for d, score in (scores[q] if scores is not None and q in scores
                            else [(d, float(len(ranked[q]) - i)) for i, d in enumerate(ranked[q])])]
    names = measure_names(depth, collection.judgments is not None, selections)
    per_topic: dict[str, dict[str, float]] = {m: dict.fromkeys(topics, 0.0) for m in names}
    if run:
        for measures, qrels in (([nDCG @ depth, P @ depth], level_qrels),
                                ([alpha_nDCG @ depth, StRecall @ depth], nugget_qrels)):
            for metric in ir_measures.iter_calc(measures, qrels, run):
                per_topic[str(metric.measure)][metric.query_id] = float(metric.value)
    for q in topics:
        docs = list(ranked.get(q, ()))
        if collection.judgments is not None:
            judged = collection.judgments.get(q, {})
            per_topic[f"Cov@{depth}"][q] = cov_at(docs, judged, depth, answerable_only) or 0.0
            if selections:
                per_topic["Cov@set"][q] = cov_at(docs, judged, None, answerable_only) or 0.0
        if selections:
            covers = [set(collection.qrels[q].get(d, {})) for d in docs]
            per_topic["StRecall@set"][q] = subtopic_recall(covers, collection.nuggets_of(q), max(len(docs), 1)) or 0.0
    return RunScores(per_topic, topics, missing, unjudged)
