"""QA metrics with each dataset's published rules (docs/guides/evaluation.md#metrics): EM, token F1 and Acc.

Normalisation (SQuAD v1.1): lower-case, drop ASCII punctuation, drop the articles a/an/the,
collapse whitespace. Every metric is the maximum over the gold answer and its aliases.

- ``hotpotqa`` / ``2wiki``: SQuAD EM and F1, except that F1 against a gold is 0 when either the
  normalised prediction or the normalised gold is ``yes``/``no``/``noanswer`` and the two differ
  (the official HotpotQA rule; 2WikiMultihopQA's evaluator uses the same one).
- ``musique``, ``flashrag`` and any other name: plain SQuAD EM and F1.
- ``strategyqa``: the prediction is parsed to yes/no with `parse_yes_no`; EM = F1 = Acc = 1 when the
  parsed answer equals the gold (``true``/``false`` golds read as yes/no), else 0. Unparseable = wrong.
- Acc (the paper's column, all datasets but StrategyQA): 1 when some normalised gold occurs in the
  normalised prediction as a whole-token span. Unlike FlashRAG's raw substring ``acc``, gold "no"
  is *not* found in "not sure" or in "snow"; it is found in "the answer is no".
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = [
    "YES_NO_DATASETS",
    "QAScores",
    "accuracy",
    "exact_match",
    "f1_score",
    "normalize_answer",
    "parse_yes_no",
    "score_prediction",
    "score_predictions",
]

YES_NO_DATASETS = ("hotpotqa", "2wiki")  # datasets with the yes/no/noanswer F1 rule
_SPECIAL = ("yes", "no", "noanswer")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_YES_WORDS = frozenset({"yes", "true"})
_NO_WORDS = frozenset({"no", "false"})


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation: lower-case, remove punctuation, remove a/an/the, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _as_list(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold (answer or alias), else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(golds)))


def f1_score(prediction: str, golds: str | Sequence[str], *, yes_no_rule: bool = False) -> float:
    """SQuAD token F1, max over golds. `yes_no_rule`: HotpotQA/2Wiki's zero F1 for differing yes/no/noanswer."""
    pred = normalize_answer(prediction)
    best = 0.0
    for gold in _as_list(golds):
        norm_gold = normalize_answer(gold)
        if yes_no_rule and (pred in _SPECIAL or norm_gold in _SPECIAL) and pred != norm_gold:
            continue
        best = max(best, _token_f1(pred.split(), norm_gold.split()))
    return best


def _contains_span(tokens: list[str], span: list[str]) -> bool:
    if not span:
        return not tokens
    n = len(span)
    return any(tokens[i:i + n] == span for i in range(len(tokens) - n + 1))


def accuracy(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when some normalised gold occurs in the normalised prediction as a whole-token span.

    Token boundaries matter: gold "no" is found in "the answer is no" but not in "not sure" or
    "snow". A gold that normalises to nothing (e.g. "The") matches only an empty prediction.
    """
    tokens = normalize_answer(prediction).split()
    return float(any(_contains_span(tokens, normalize_answer(g).split()) for g in _as_list(golds)))


def parse_yes_no(prediction: str) -> str | None:
    """Read a yes/no answer: the first whole token among yes/true/no/false after normalisation.

    The prediction is normalised with `normalize_answer` (so "Yes." → "yes", "no, because ..." →
    "no because ...") and scanned left to right; the first token that is ``yes`` or ``true`` gives
    ``"yes"``, the first that is ``no`` or ``false`` gives ``"no"``. Only whole tokens count, so
    "not", "nothing", "know", "snow", "untrue" and "yesterday" are not answers and "not sure" or
    "I don't know" is unparseable (None), which is scored as wrong.
    """
    for token in normalize_answer(prediction).split():
        if token in _YES_WORDS:
            return "yes"
        if token in _NO_WORDS:
            return "no"
    return None


def _gold_yes_no(golds: Sequence[str]) -> str | None:
    for gold in golds:
        norm = normalize_answer(gold)
        if norm in _YES_WORDS:
            return "yes"
        if norm in _NO_WORDS:
            return "no"
    return None


def score_prediction(dataset: str, prediction: str, golds: str | Sequence[str]) -> dict[str, float]:
    """EM, F1 and Acc (each 0.0 or 1.0, F1 in [0, 1]) of one prediction under `dataset`'s rules."""
    gold_list = _as_list(golds)
    if not gold_list:
        raise ValueError("no gold answers to score against")
    if dataset == "strategyqa":
        gold = _gold_yes_no(gold_list)
        if gold is None:
            raise ValueError(f"StrategyQA gold answers must be yes/no or true/false, got {gold_list!r}")
        correct = float(parse_yes_no(prediction) == gold)
        return {"em": correct, "f1": correct, "acc": correct}
    return {
        "em": exact_match(prediction, gold_list),
        "f1": f1_score(prediction, gold_list, yes_no_rule=dataset in YES_NO_DATASETS),
        "acc": accuracy(prediction, gold_list),
    }


def _first(items: Sequence[str], k: int = 5) -> str:
    shown = ", ".join(repr(x) for x in items[:k])
    return shown + (", ..." if len(items) > k else "")


@dataclasses.dataclass(frozen=True)
class QAScores:
    """Mean EM, F1 and Acc (fractions in 0..1) over `n` scored questions; `missing` gold questions had no
    prediction."""

    em: float
    f1: float
    acc: float
    n: int
    missing: int


def score_predictions(dataset: str, predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]],
                      allow_missing: bool = False, allow_missing_option: str = "allow_missing=True"
                      ) -> QAScores:
    """Mean EM/F1/Acc (fractions in 0..1) over the gold questions that have a prediction.

    Returns their `QAScores`: `n` questions scored, `missing` gold questions without a prediction. Missing predictions are an error (naming how many and the first qids)
    unless `allow_missing` (named in the message as `allow_missing_option`: the caller's spelling, e.g. the
    command line's ``--allow-missing``); predictions for qids absent from `golds` are always an error (they
    mean the wrong gold file or split).
    """
    extra = [q for q in predictions if q not in golds]
    if extra:
        raise ValueError(f"{len(extra)} prediction(s) for question ids not in the gold file "
                         f"(first: {_first(extra)}); wrong gold file or split?")
    missing = [q for q in golds if q not in predictions]
    if missing and not allow_missing:
        raise ValueError(f"{len(missing)} of {len(golds)} gold question(s) have no prediction "
                         f"(first: {_first(missing)}); pass {allow_missing_option} to score the rest")
    totals = {"em": 0.0, "f1": 0.0, "acc": 0.0}
    n = 0
    for qid, answers in golds.items():
        if qid not in predictions:
            continue
        scores = score_prediction(dataset, predictions[qid], answers)
        for key in totals:
            totals[key] += scores[key]
        n += 1
    if n == 0:
        raise ValueError("no predictions to score")
    return QAScores(em=totals["em"] / n, f1=totals["f1"] / n, acc=totals["acc"] / n, n=n, missing=len(missing))
