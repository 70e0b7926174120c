"""`purecover score` end to end on a small hand-written HotpotQA file."""

from __future__ import annotations

import argparse
import json

import pytest

from purecover.eval.score_cli import add_score_arguments, main_score, read_predictions, run_score
from tests.conftest import hotpot_record, write_json, write_jsonl


@pytest.fixture
def gold(tmp_path):
    records = [
        hotpot_record("q1"),
        hotpot_record("q2", question="Was Ada Brill born in Tollbridge?", answer="yes", type="comparison"),
        hotpot_record("q3", question="Which town has a lighthouse?", answer="Corven"),
        hotpot_record("q4", context=[]),  # no paragraphs: still a valid gold (require_paragraphs=False)
    ]
    return write_json(tmp_path / "hotpot_dev.json", records)


def _parse(argv):
    parser = argparse.ArgumentParser(prog="purecover score")
    add_score_arguments(parser)
    return parser.parse_args(argv)


def _preds(tmp_path, rows):
    return write_jsonl(tmp_path / "preds.jsonl", rows)


def test_run_score_hotpotqa(tmp_path, gold):
    preds = _preds(tmp_path, [
        {"qid": "q1", "prediction": "The Mirren.", "extra": 1},   # EM
        {"qid": "q2", "prediction": "yes, she was"},               # yes/no rule: F1 0, Acc 1
        {"qid": "q3", "prediction": "Corven village"},             # F1 2/3, Acc 1
        {"qid": "q4", "prediction": "Tollbridge"},                 # wrong
    ])
    s = run_score(preds, "hotpotqa", gold)
    assert s.n == 4 and s.missing == 0
    assert s.em == pytest.approx(1 / 4)
    assert s.f1 == pytest.approx((1 + 0 + 2 / 3 + 0) / 4)
    assert s.acc == pytest.approx(3 / 4)


def test_main_score_json_prints_exactly_one_object(tmp_path, gold, capsys):
    preds = _preds(tmp_path, [{"qid": q, "prediction": a} for q, a in
                              [("q1", "Mirren"), ("q2", "yes"), ("q3", "Corven"), ("q4", "Mirren")]])
    assert main_score(_parse([str(preds), "--dataset", "hotpotqa", "--gold", str(gold), "--json"])) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 4, "missing": 0}
    assert len(out.strip().splitlines()) == 1


def test_main_score_table(tmp_path, gold, capsys):
    preds = _preds(tmp_path, [{"qid": "q1", "prediction": "Mirren"}, {"qid": "q3", "prediction": "Rome"}])
    argv = [str(preds), "--dataset", "hotpotqa", "--gold", str(gold), "--allow-missing"]
    assert main_score(_parse(argv)) == 0
    out = capsys.readouterr().out
    assert "2 question(s) scored, 2 missing" in out
    assert "EM    50.00" in out and "Acc   50.00" in out


def test_missing_predictions_error_vs_allow_missing(tmp_path, gold, capsys):
    preds = _preds(tmp_path, [{"qid": "q1", "prediction": "Mirren"}])
    argv = [str(preds), "--dataset", "hotpotqa", "--gold", str(gold), "--json"]
    assert main_score(_parse(argv)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "3 of 4 gold question(s) have no prediction (first: 'q2', 'q3', 'q4')" in captured.err
    assert "pass --allow-missing to score the rest" in captured.err  # the option as the command line spells it
    with pytest.raises(ValueError, match="have no prediction.*pass allow_missing=True"):
        run_score(preds, "hotpotqa", gold)
    assert main_score(_parse([*argv, "--allow-missing"])) == 0
    assert json.loads(capsys.readouterr().out) == {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 1, "missing": 3}


@pytest.mark.parametrize("line, message", [
    ('{"qid": "q1", "prediction": "Mirren"\n', "preds.jsonl:2: invalid JSON"),
    ('{"prediction": "Mirren"}\n', "preds.jsonl:2: field 'qid': missing"),
    ('{"id": "q2", "prediction": "Mirren"}\n', "preds.jsonl:2: field 'qid': missing (this line has 'id': name it qid)"),
    ('{"qid": "", "prediction": "Mirren"}\n', "preds.jsonl:2: field 'qid': expected a non-empty string"),
    ('{"qid": "q2"}\n', "preds.jsonl:2: field 'prediction': missing"),
    ('{"qid": "q2", "prediction": null}\n', "preds.jsonl:2: field 'prediction': expected a string"),
    ('["q2", "yes"]\n', "preds.jsonl:2: expected a JSON object"),
    ('{"qid": "q1", "prediction": "again"}\n', "preds.jsonl:2: field 'qid': duplicate 'q1' (first at line 1)"),
])
def test_malformed_predictions_line(tmp_path, gold, capsys, line, message):
    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"qid": "q1", "prediction": "Mirren"}\n' + line, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_predictions(preds)
    assert message in str(err.value)
    assert main_score(_parse([str(preds), "--dataset", "hotpotqa", "--gold", str(gold)])) == 1
    assert message in capsys.readouterr().err


PREDICTION = {"qid": "q1", "prediction": "Mirren", "method": "retrieval", "k": 2, "selected": [0, 1],
              "doc_ids": ["d0", None], "prompt_key": "abc", "prompt_tokens": 120, "completion_tokens": 2, "em": 1.0,
              "f1": 1.0, "acc": 1.0, "answer_coverage": 1.0, "answer_purity": 0.5, "support_coverage": None,
              "support_purity": 0.0, "crux_coverage": None}


def test_evaluate_predictions_are_read_and_checked_whole(tmp_path, gold):
    """A line the evaluate stage wrote (it has a prompt_key) is checked as a `PredictionRecord`; a hand-made
    ``{qid, prediction}`` line beside it is read as before."""
    preds = _preds(tmp_path, [PREDICTION, {"qid": 2, "prediction": 3}])
    assert read_predictions(preds) == {"q1": "Mirren", "2": "3"}
    for changes, message in [({"k": 0}, "field 'k': must be >= 1 (got 0)"),
                             ({"em": "1"}, "field 'em': must be a number (got '1')"),
                             ({"doc_ids": ["d0"]}, "selected and doc_ids differ in length (2, 1)")]:
        _preds(tmp_path, [{"qid": "q2", "prediction": "yes"}, {**PREDICTION, **changes}])
        with pytest.raises(ValueError) as err:
            read_predictions(preds)
        assert str(err.value) == f"{preds}:2: {message}"


def test_unknown_qid_and_missing_files(tmp_path, gold, capsys):
    preds = _preds(tmp_path, [{"qid": q, "prediction": "x"} for q in ("q1", "q2", "q3", "q4", "other")])
    with pytest.raises(ValueError, match=r"1 prediction\(s\) for question ids not in the gold file"):
        run_score(preds, "hotpotqa", gold)
    assert main_score(_parse([str(tmp_path / "nope.jsonl"), "--dataset", "hotpotqa", "--gold", str(gold)])) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main_score(_parse([str(preds), "--dataset", "hotpotqa", "--gold", str(tmp_path / "no.json")])) == 1
    assert "does not exist" in capsys.readouterr().err


def test_strategyqa_end_to_end(tmp_path, capsys):
    gold = write_json(tmp_path / "sqa.json", [
        {"qid": "a1", "question": "Is snow cold?", "answer": True},
        {"qid": "a2", "question": "Is fire cold?", "answer": False},
        {"qid": "a3", "question": "Can fish fly?", "answer": False},
    ])
    preds = _preds(tmp_path, [{"qid": "a1", "prediction": "Yes."}, {"qid": "a2", "prediction": "no, because..."},
                              {"qid": "a3", "prediction": "not sure"}])
    s = run_score(preds, "strategyqa", gold)
    assert s.em == s.f1 == s.acc == pytest.approx(2 / 3)
