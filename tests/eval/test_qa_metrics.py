"""QA metrics: one case per rule (docs/guides/evaluation.md#metrics), FlashRAG-style substring acc vs ours, real samples."""

from __future__ import annotations

import pytest

from purecover.data.loaders import ExampleSource
from purecover.data.samples import SAMPLE_FILES
from purecover.eval.qa_metrics import (
    QAScores,
    accuracy,
    exact_match,
    f1_score,
    normalize_answer,
    parse_yes_no,
    score_prediction,
    score_predictions,
)


def test_normalize_answer():
    assert normalize_answer("  The  Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("the") == ""


def test_exact_match_and_f1_take_max_over_aliases():
    golds = ["Barack Obama", "Obama", "Barack Hussein Obama II"]
    assert exact_match("obama.", golds) == 1.0
    assert exact_match("President Obama", golds) == 0.0
    # F1 vs "Obama" = 2*(1/2*1)/(1/2+1) = 2/3, vs "Barack Obama" = 1/2 — max wins.
    assert f1_score("President Obama", golds) == pytest.approx(2 / 3)
    assert f1_score("the Obama", ["Barack Obama"]) == pytest.approx(2 / 3)
    assert f1_score("Paris", "London") == 0.0
    assert exact_match("The Paris", "paris") == 1.0  # a single gold string works too


def test_squad_f1_counts_repeated_tokens_once_each():
    # prediction tokens: new new york (3), gold: new york (2); common = new, york = 2
    assert f1_score("new new york", ["New York"]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_hotpotqa_yes_no_f1_rule():
    # Plain SQuAD F1 would give partial credit: "no" shares the token with "no idea".
    assert f1_score("no idea", ["no"]) == pytest.approx(2 / 3)
    assert f1_score("no idea", ["no"], yes_no_rule=True) == 0.0
    assert score_prediction("hotpotqa", "no idea", ["no"])["f1"] == 0.0
    assert score_prediction("2wiki", "no idea", ["no"])["f1"] == 0.0
    # Prediction side: "yes" vs a gold "yes sir" is 0 under the rule, 2/3 without.
    assert score_prediction("hotpotqa", "Yes", ["yes sir"])["f1"] == 0.0
    assert score_prediction("musique", "Yes", ["yes sir"])["f1"] == pytest.approx(2 / 3)
    # Equal yes/no answers still score 1; the rule is per gold, aliases still count.
    assert score_prediction("hotpotqa", "Yes.", ["yes"]) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    assert score_prediction("hotpotqa", "no answer", ["noanswer"])["f1"] == 0.0
    assert score_prediction("hotpotqa", "Mirren river", ["no", "river Mirren"])["f1"] == 1.0


def test_musique_plain_squad_over_aliases():
    golds = ["United Kingdom", "UK", "Britain"]
    assert score_prediction("musique", "the UK", golds) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    s = score_prediction("musique", "Great Britain", golds)
    assert s["em"] == 0.0 and s["f1"] == pytest.approx(2 / 3) and s["acc"] == 1.0
    # No yes/no rule on MuSiQue: partial F1 stays.
    assert score_prediction("musique", "no idea", ["no"])["f1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("text, parsed", [
    ("Yes.", "yes"),
    ("yes", "yes"),
    ("no, because the Albany in New York is larger.", "no"),
    ("No", "no"),
    ("true", "yes"),
    ("False!", "no"),
    ("The answer is: yes", "yes"),
    ("not sure", None),
    ("I don't know", None),
    ("nothing is certain; it snows", None),
    ("untrue", None),
    ("yesterday", None),
    ("", None),
    ("No. Yes would be wrong", "no"),  # first answer word wins
])
def test_parse_yes_no(text, parsed):
    assert parse_yes_no(text) == parsed


def test_strategyqa_scoring_uses_the_parsed_answer():
    assert score_prediction("strategyqa", "Yes.", ["yes"]) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    assert score_prediction("strategyqa", "no, because ...", ["no"]) == {"em": 1.0, "f1": 1.0, "acc": 1.0}
    assert score_prediction("strategyqa", "true", ["yes"])["em"] == 1.0
    assert score_prediction("strategyqa", "False", ["true"])["em"] == 0.0  # gold true/false read as yes/no
    assert score_prediction("strategyqa", "not sure", ["no"]) == {"em": 0.0, "f1": 0.0, "acc": 0.0}
    assert score_prediction("strategyqa", "snow", ["no"]) == {"em": 0.0, "f1": 0.0, "acc": 0.0}
    with pytest.raises(ValueError, match="yes/no"):
        score_prediction("strategyqa", "yes", ["Paris"])


def _flashrag_style_acc(prediction: str, golds: list[str]) -> float:
    """FlashRAG's `acc` (docs/guides/evaluation.md#qa): raw substring containment after normalisation."""
    return float(any(normalize_answer(g) in normalize_answer(prediction) for g in golds))


@pytest.mark.parametrize("prediction, gold", [("not sure", "no"), ("snow", "no"), ("Norway", "no"),
                                              ("yesterday", "yes"), ("Parisian", "Paris")])
def test_acc_is_whole_token_unlike_raw_substring(prediction, gold):
    assert _flashrag_style_acc(prediction, [gold]) == 1.0
    assert accuracy(prediction, [gold]) == 0.0


def test_acc_whole_token_span():
    assert accuracy("the answer is no", ["no"]) == 1.0
    assert accuracy("It was founded in New York City.", ["New York"]) == 1.0
    assert accuracy("York New", ["New York"]) == 0.0
    assert accuracy("", ["the"]) == 1.0 and accuracy("something", ["the"]) == 0.0
    assert accuracy("nothing", ["Paris", "France"]) == 0.0


def test_other_datasets_use_plain_squad():
    s = score_prediction("flashrag", "no idea", ["no"])
    assert s["em"] == 0.0 and s["f1"] == pytest.approx(2 / 3) and s["acc"] == 1.0


def test_score_predictions_means_and_missing():
    golds = {"a": ["Paris"], "b": ["London"], "c": ["Rome"]}
    preds = {"a": "Paris", "b": "the city of London", "c": "Milan"}
    s = score_predictions("musique", preds, golds)
    assert s.n == 3 and s.missing == 0
    assert s.em == pytest.approx(1 / 3)
    assert s.acc == pytest.approx(2 / 3)
    assert s.f1 == pytest.approx((1 + 2 * (1 / 3) * 1 / (1 / 3 + 1) + 0) / 3)
    del preds["c"], preds["b"]
    with pytest.raises(ValueError, match=r"2 of 3 gold question\(s\) have no prediction \(first: 'b', 'c'\)"):
        score_predictions("musique", preds, golds)
    s = score_predictions("musique", preds, golds, allow_missing=True)
    assert s == QAScores(em=1.0, f1=1.0, acc=1.0, n=1, missing=2)
    with pytest.raises(ValueError, match="not in the gold file"):
        score_predictions("musique", {"zzz": "x", **preds}, golds, allow_missing=True)
    with pytest.raises(ValueError, match="no predictions"):
        score_predictions("musique", {}, golds, allow_missing=True)


# --- real samples -------------------------------------------------------------------------------------

_WRONG = {"hotpotqa": "zebra crossing", "2wiki": "zebra crossing", "musique": "zebra crossing",
          "strategyqa": "not sure"}


@pytest.mark.samples
@pytest.mark.parametrize("dataset", sorted(SAMPLE_FILES))
def test_gold_answers_score_one_on_real_samples(dataset, sample_file):
    examples = list(ExampleSource(dataset, sample_file(dataset), require_paragraphs=False))
    assert examples, f"no examples in the {dataset} sample"
    golds = {ex.qid: ex.answers for ex in examples}
    for i in range(max(len(ex.answers) for ex in examples)):  # main answer and each alias position
        preds = {ex.qid: ex.answers[min(i, len(ex.answers) - 1)] for ex in examples}
        s = score_predictions(dataset, preds, golds)
        assert (s.em, s.f1, s.acc, s.n, s.missing) == (1.0, 1.0, 1.0, len(examples), 0)
    wrong = score_predictions(dataset, {q: _WRONG[dataset] for q in golds}, golds)
    assert wrong.em == 0.0 and wrong.acc == 0.0 and wrong.f1 < 0.05
    if dataset == "strategyqa":  # the opposite answer is always wrong
        flipped = {ex.qid: "no" if ex.answers[0] == "yes" else "Yes." for ex in examples}
        assert score_predictions(dataset, flipped, golds).em == 0.0
