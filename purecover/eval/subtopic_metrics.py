"""α-nDCG@K and subtopic recall@K of a ranking, a question's gold supporting passages being its subtopics
(docs/guides/evaluation.md#subtopic-metrics).

The metrics take a ranking as the subtopic set of each ranked passage, best first:

* **subtopic recall@K** = |subtopics covered by the top K| / |subtopics| (None without subtopics);
* **α-DCG@K** = Σ_{r=1..K} G(r) / log2(r + 1), with the gain of the passage at rank r
  G(r) = Σ_t J(r, t)·(1 − α)^c(t, r): J(r, t) is 1 when that passage covers subtopic t, c(t, r) counts the
  passages above rank r that cover t (Clarke et al. 2008). A passage that repeats a covered subtopic is
  worth (1 − α) of a new one, then (1 − α)², ...;
* **α-nDCG@K** = α-DCG@K of the ranking / α-DCG@K of the ideal ranking of the pool (None when that is 0).
  The ideal is built greedily, as is usual: at each rank the pool's passage of largest gain given the
  ranks above it, ties to the earlier passage. The greedy ideal is exact when every passage covers at most
  one subtopic (the evaluation's case, `question_subtopics`); with several subtopics per passage it is an
  approximation and a ranking can score slightly above 1.

With α = 0, α-nDCG is nDCG with the number of subtopics a passage covers as its gain; with α = 1 only a
passage's new subtopics count.

Given ndeval's conventions, these functions give TREC ndeval's numbers (``ir_measures``' ``alpha_nDCG@k`` and
``StRecall@k`` through pyndeval; `tests/eval/test_coverage_scoring.py`). In ndeval, a run's tied scores go by
ascending doc id. The pool is every judged relevant document, ordered by descending doc id, because ndeval's
greedy ideal breaks ties towards the largest doc id. `purecover.eval.coverage_scoring` scores coverage
collections with those tools themselves.

`question_subtopics` turns an evaluation question (`purecover.records.CandidateRecord`) into subtopics:
its gold supporting passages, matched by the rule of Coverage@K against supporting paragraphs (a candidate
is gold when its ``doc_id`` is in ``gold_doc_ids``). `subtopic_unit` says how gold passages are counted:

* ``passage`` (a corpus built from the dataset's own paragraphs, ``data.corpus`` per_question or shared):
  every gold id is one subtopic, retrieved or not (HotpotQA/2Wiki: the supporting-fact titles' paragraphs;
  MuSiQue: the ``is_supporting`` paragraphs; StrategyQA: the question's facts);
* ``title`` (a corpus file): gold ids are every passage of a supporting title (the chunks of one article),
  so a supporting title is one subtopic, covered by any gold candidate of that title (normalised as the
  data stage matches titles); a gold candidate whose title is not a supporting title (StrategyQA facts,
  found by their text) is a subtopic of its own. The subtopics are the supporting titles (``gold_titles``)
  and those other gold candidates; without supporting titles, every gold id, as for ``passage``.

* ``nugget`` (a coverage collection, ``data.dataset: coverage``): the subtopics are the topic's nuggets that its
  nugget qrels judge some document relevant to, retrieved or not, and a candidate covers the nuggets the qrels
  give it (`judged`: doc id -> nugget -> grade); a candidate may cover several.

A question without ``gold_doc_ids`` (and, for ``nugget``, without judged nuggets) has no subtopic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Literal

from ..data.corpus import normalize_title
from ..records import CandidateRecord

__all__ = ["ALPHA", "QuestionSubtopics", "SubtopicUnit", "alpha_dcg", "alpha_ndcg", "ideal_ranking",
           "question_subtopics", "subtopic_recall", "subtopic_unit"]

ALPHA = 0.5  # the redundancy penalty of α-nDCG: the usual 0.5 of diversity evaluations (TREC Web, LANCER)
SubtopicUnit = Literal["passage", "title", "nugget"]
OWN_PARAGRAPH_CORPORA = ("per_question", "shared")  # data.corpus values built from the dataset's paragraphs

Subtopics = Collection[Hashable]  # the subtopics one passage covers


def subtopic_unit(corpus: str) -> SubtopicUnit:
    """How `question_subtopics` counts gold passages for candidates retrieved from ``data.corpus`` = `corpus`:
    ``passage`` for the dataset's own paragraphs, ``title`` for a corpus file (chunks of one article)."""
    return "passage" if corpus in OWN_PARAGRAPH_CORPORA else "title"


def _check(k: int, alpha: float) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")


def _gain(covered: Subtopics, seen: dict[Hashable, int], alpha: float) -> float:
    """Σ over the passage's distinct subtopics of (1 − α)^(times each was covered above)."""
    return sum((1.0 - alpha) ** seen.get(t, 0) for t in set(covered))


def _see(covered: Subtopics, seen: dict[Hashable, int]) -> None:
    for t in set(covered):
        seen[t] = seen.get(t, 0) + 1


def alpha_dcg(ranking: Sequence[Subtopics], k: int, alpha: float = ALPHA) -> float:
    """α-DCG@k of `ranking` (the subtopics of each passage, best first; ranks after k are ignored)."""
    _check(k, alpha)
    seen: dict[Hashable, int] = {}
    total = 0.0
    for r, covered in enumerate(ranking[:k], start=1):
        total += _gain(covered, seen, alpha) / math.log2(r + 1)
        _see(covered, seen)
    return total


def ideal_ranking(pool: Sequence[Subtopics], k: int, alpha: float = ALPHA) -> list[int]:
    """The greedy ideal ranking of `pool`: at most k positions into it, each of largest gain given those
    above it (ties: the earlier passage). Passages that add nothing are still ranked (gain 0)."""
    _check(k, alpha)
    left = list(range(len(pool)))
    seen: dict[Hashable, int] = {}
    order: list[int] = []
    while left and len(order) < k:
        gains = [_gain(pool[i], seen, alpha) for i in left]
        best = max(range(len(left)), key=lambda j: (gains[j], -j))  # the first of the largest gains
        i = left.pop(best)
        order.append(i)
        _see(pool[i], seen)
    return order


def alpha_ndcg(ranking: Sequence[Subtopics], pool: Sequence[Subtopics], k: int, alpha: float = ALPHA
               ) -> float | None:
    """α-nDCG@k of `ranking` normalised by the greedy ideal ranking of `pool` (the passages the ranking was
    chosen from); None when the ideal α-DCG@k is 0 (no passage of the pool covers a subtopic)."""
    ideal = alpha_dcg([pool[i] for i in ideal_ranking(pool, k, alpha)], k, alpha)
    if ideal <= 0.0:
        return None
    value = alpha_dcg(ranking, k, alpha) / ideal
    return 1.0 if 1.0 < value <= 1.0 + 1e-9 else value  # the ideal reached by another order: round-off only


def subtopic_recall(ranking: Sequence[Subtopics], subtopics: Collection[Hashable], k: int) -> float | None:
    """|subtopics covered by the top k of `ranking`| / |subtopics|; None when there are no subtopics.
    Subtopics a passage covers outside `subtopics` are not counted."""
    _check(k, 0.0)
    wanted = set(subtopics)
    if not wanted:
        return None
    covered: set[Hashable] = set()
    for c in ranking[:k]:
        covered |= set(c)
    return len(covered & wanted) / len(wanted)


@dataclasses.dataclass(frozen=True)
class QuestionSubtopics:
    """A question's subtopics and what each of its candidates covers (at most one subtopic each, except nuggets)."""

    subtopics: frozenset[Hashable]
    covers: tuple[frozenset[Hashable], ...]  # per candidate, in candidate order

    @property
    def retrieved(self) -> frozenset[Hashable]:
        """The subtopics some candidate covers."""
        return frozenset().union(*self.covers)


def question_subtopics(record: CandidateRecord, unit: SubtopicUnit = "passage",
                       judged: Mapping[str, Mapping[str, int]] | None = None) -> QuestionSubtopics:
    """The gold subtopics of `record` and the ones each candidate covers (module docstring for the rule);
    `judged` is the topic's nugget qrels (doc id -> nugget -> grade) for ``nugget``."""
    if unit not in ("passage", "title", "nugget"):
        raise ValueError(f"unit must be 'passage', 'title' or 'nugget', got {unit!r}")
    if unit == "nugget":
        judged = judged or {}
        covers = tuple(frozenset(("nugget", n) for n in judged.get(doc.doc_id or "", {})) for doc in record.docs)
        nuggets = frozenset(("nugget", n) for grades in judged.values() for n in grades)
        return QuestionSubtopics(nuggets, covers)
    gold = set(record.gold_doc_ids)
    titles = {t for t in map(normalize_title, record.gold_titles) if t} if unit == "title" and gold else set()
    covers_list: list[frozenset[Hashable]] = []
    for doc in record.docs:
        if doc.doc_id is None or doc.doc_id not in gold:
            covers_list.append(frozenset())
            continue
        title = normalize_title(doc.title or "") if titles else ""
        covers_list.append(frozenset({("title", title) if title in titles else ("passage", doc.doc_id)}))
    subtopics: set[Hashable] = set().union(*covers_list)
    if titles:
        subtopics |= {("title", t) for t in titles}
    else:
        subtopics |= {("passage", g) for g in gold}
    return QuestionSubtopics(frozenset(subtopics), tuple(covers_list))
