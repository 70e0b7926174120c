"""`purecover tune`: grid parsing, the split, the choice, and re-solving that reproduces the label stage."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.defaults import resolve_params
from purecover.teacher.label_stage import run_label_stage
from purecover.teacher.selection import solve
from purecover.teacher.tune import (
    TuneQuestion,
    choose,
    labels_bias,
    load_questions,
    parse_grid,
    setting_estimates,
    split_questions,
    tune,
)

# ---------------------------------------------------------------------------- grid


def test_parse_grid_forms_and_types():
    assert parse_grid(["lam=0.05,0.1", "tau_stop=0"]) == {"lam": [0.05, 0.1], "tau_stop": [0.0]}
    # the single-argument form: a piece holding "=" starts the next key
    assert parse_grid(["lam=0.1,0.3,tau_stop=0,0.05,normalize=zscore"]) == {
        "lam": [0.1, 0.3], "tau_stop": [0.0, 0.05], "normalize": ["zscore"]}
    assert parse_grid(["teacher.budget=3,5", "cot_weighting=true,false", "embedding_tau=1e-1"]) == {
        "budget": [3, 5], "cot_weighting": [True, False], "embedding_tau": [0.1]}
    assert parse_grid(["repeated_steps=keep,drop"]) == {"repeated_steps": ["keep", "drop"]}


@pytest.mark.parametrize("items, message", [
    (["lamda=0.1"], "unknown key 'lamda'"),
    (["lam=fast"], "lam='fast' is not a valid float"),
    (["budget=2.5"], "not a valid int"),
    (["normalize=minmax"], "absolute | zscore"),
    (["repeated_steps=merge"], "keep | drop"),
    (["0.1,0.2"], "has no key"),
    (["lam=0.1", "lam=0.2"], "given twice"),
    (["lam="], "has no values"),
])
def test_parse_grid_errors_name_the_problem(items, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        parse_grid(items)


# ---------------------------------------------------------------------------- split and choice


def question(qid: str, gold: bool) -> TuneQuestion:
    return TuneQuestion(qid, ["a", "b"], {"a"} if gold else set(), None, None, None, False)


def test_split_takes_the_first_fraction_of_questions_with_gold():
    qs = [question(f"q{i}", gold=i != 1) for i in range(7)]
    tune, held = split_questions(qs, 0.5)
    assert [q.qid for q in tune] == ["q0", "q2", "q3"] and [q.qid for q in held] == ["q4", "q5", "q6"]
    with pytest.raises(ValueError, match="too few to split"):
        split_questions([question("q0", True), question("q1", False)], 0.5)


def test_choice_uses_the_tuning_split_only_and_respects_the_fallback_limit():
    def row(tune_f1, tune_fb, held_f1):
        return {"tune": {"f1": tune_f1, "fallback_rate": tune_fb}, "heldout": {"f1": held_f1, "fallback_rate": 0.0}}

    rows = [row(0.80, 0.0, 0.99), row(0.85, 0.20, 0.50), row(0.84, 0.05, 0.10), row(0.84, 0.0, 0.90)]
    assert choose(rows, 0.05) == 2  # best tuning F1 within the limit; ties go to the earlier point
    assert choose(rows, 0.5) == 1
    assert choose([row(0.9, 0.3, 0.9), row(0.1, 0.2, 0.1)], 0.05) == 1  # none qualifies: lowest fallback


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def hotpot_run(tmp_path_factory, sample_file):
    run = tmp_path_factory.mktemp("tune_hotpot")
    recipe = load_recipe(None, [f"run_dir={run}", "data.dataset=hotpotqa", f"data.path={sample_file('hotpotqa')}",
                                "data.limit=40", "data.k1=10", "teacher.steps=oracle", "teacher.estimator=embedding",
                                "teacher.batch_size=16"])
    run_data_stage(recipe, show_progress=False)
    return recipe


def stored_selections(run_dir: Path) -> dict[str, list[int]]:
    return {r["qid"]: r["selected"] for r in map(json.loads, (run_dir / "labels.jsonl").read_text().splitlines())}


def resolved_selections(recipe, **changes) -> dict[str, list[int]]:
    qs = load_questions(recipe.run_path / "labels.jsonl", recipe.run_path / "candidates.jsonl")
    params = resolve_params(recipe.teacher, **changes)
    bias = labels_bias(recipe, recipe.run_path / "labels.jsonl") if params.calibrate else None
    result = solve(setting_estimates(qs, params, bias), params)
    return {q.qid: result.order(i) for i, q in enumerate(qs)}


@pytest.mark.slow
def test_tune_labels_once_and_reports_both_splits(hotpot_run, capsys):
    result = tune(hotpot_run, parse_grid(["lam=0.05,0.3", "embedding_tau=0.1,0.3"]), show_progress=False)
    assert result.to_json_dict() == json.loads((hotpot_run.run_path / "tune" / "tune.json").read_text())
    result = result.to_json_dict()  # rows and chosen are the TypedDicts tune.json holds
    run = hotpot_run.run_path
    assert (run / "labels.jsonl").is_file() and json.loads((run / "label.run.json").read_text())["summary"]["status"]
    assert result["questions"]["tune"] == 20 and result["questions"]["heldout"] == 20
    assert len(result["rows"]) == 4 and [r["setting"] for r in result["rows"]][1] == {"lam": 0.05, "embedding_tau": 0.3}
    tuned = result["chosen"]
    assert tuned["tune"]["f1"] == max(r["tune"]["f1"] for r in result["rows"] if r["tune"]["fallback_rate"] <= 0.05)
    assert tuned["overrides"].startswith("--set teacher.lam=")
    # a flatter W (τ 0.3) with a larger λ makes questions fall back: the table shows it
    flat = next(r for r in result["rows"] if r["setting"] == {"lam": 0.3, "embedding_tau": 0.3})
    assert flat["tune"]["fallback_rate"] > tuned["tune"]["fallback_rate"]
    for name in ("tune.json", "tune.md", "plots/tune_f1_vs_size.png", "plots/tune_f1_vs_lam.png"):
        assert (run / "tune" / name).stat().st_size > 0
    assert json.loads((run / "tune" / "tune.json").read_text())["versions"]["purecover"]
    assert "**←**" in (run / "tune" / "tune.md").read_text()
    # the recipe's own setting, re-solved from the stored scores, is exactly what the label stage wrote
    assert resolved_selections(hotpot_run) == stored_selections(run)
    assert resolved_selections(hotpot_run, lam=0.3, embedding_tau=0.3) != stored_selections(run)
    # a second tune reuses the labels (no relabelling: the labels file is untouched)
    mtime = (run / "labels.jsonl").stat().st_mtime_ns
    assert main(["tune", "-q", "--set", f"run_dir={run}", "--set", "data.dataset=hotpotqa",
                 "--set", f"data.path={hotpot_run.data.path}", "--set", "data.limit=40", "--set", "data.k1=10",
                 "--set", "teacher.steps=oracle", "--set", "teacher.estimator=embedding", "--set",
                 "teacher.batch_size=16", "--grid", "lam=0.1,0.2"]) == 0
    assert (run / "labels.jsonl").stat().st_mtime_ns == mtime
    out = capsys.readouterr().out
    assert "chosen: --set teacher.lam=" in out and "held-out questions: F1" in out


def test_tune_reproduces_attention_labels_with_calibration(tmp_path, tiny_teacher_dir):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "data.path=demo", "data.k1=5", "data.limit=12",
                                f"teacher.model={tiny_teacher_dir}", "teacher.steps=oracle", "teacher.batch_size=4",
                                "teacher.dtype=float32", "teacher.device=cpu"])
    run_data_stage(recipe, show_progress=False)
    run_calibrate_stage(recipe, show_progress=False)
    run_label_stage(recipe, show_progress=False)
    stored = stored_selections(tmp_path)
    assert resolved_selections(recipe) == stored
    assert labels_bias(recipe, tmp_path / "labels.jsonl") is not None
    # a calibration that is not the one the labels were made with is refused
    bias = json.loads((tmp_path / "bias.json").read_text())
    bias["keys"]["k1"] = 99
    (tmp_path / "bias.json").write_text(json.dumps(bias))
    with pytest.raises(ValueError, match="not the calibration labels.jsonl was made with"):
        labels_bias(recipe, tmp_path / "labels.jsonl")


def test_labels_with_repeated_steps_dropped_are_reproduced_by_tune(tmp_path, tiny_teacher_dir, monkeypatch):
    """The label stage weighs a repeated step 0 under teacher.repeated_steps: drop (noted in the reason, recorded
    in the estimation settings); tune re-solves the stored scores to the same selections, and to keep's."""
    from purecover.teacher import label_stage

    parse = label_stage._Labeler.steps_for

    def looping(self, rec, replies):  # every reply loops: its first step again at the end
        got = parse(self, rec, replies)
        return dataclasses.replace(got, steps=[*got.steps, got.steps[0].upper() + " "])

    monkeypatch.setattr(label_stage._Labeler, "steps_for", looping)
    settings = [f"run_dir={tmp_path}", "data.path=demo", "data.k1=5", "data.limit=8", "teacher.steps=oracle",
                f"teacher.model={tiny_teacher_dir}", "teacher.batch_size=4", "teacher.dtype=float32",
                "teacher.device=cpu", "teacher.calibrate=false"]
    recipe = load_recipe(None, [*settings, "teacher.repeated_steps=drop"])
    run_data_stage(recipe, show_progress=False)
    run_label_stage(recipe, show_progress=False)
    records = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert all("repeats an earlier one: weighted 0" in r["reason"] for r in records)
    assert all(r["e"][-1] == 0.0 and r["teacher"]["estimation"]["repeated_steps"] == "drop" for r in records)
    assert resolved_selections(recipe) == stored_selections(tmp_path)
    keep = resolved_selections(recipe, repeated_steps="keep")
    assert resolved_selections(load_recipe(None, settings)) == keep  # the recipe's default is keep
    qs = load_questions(tmp_path / "labels.jsonl", tmp_path / "candidates.jsonl")
    e_keep = setting_estimates(qs, resolve_params(recipe.teacher, repeated_steps="keep"), None)[0][0]
    assert e_keep[-1] > 0.0  # kept, the repeat weighs like any step
    # the grid key end to end: both points re-solved, reported and plotted; the chosen one says its recipe key
    result = tune(recipe, parse_grid(["repeated_steps=keep,drop"]), show_progress=False).to_json_dict()
    assert [r["setting"]["repeated_steps"] for r in result["rows"]] == ["keep", "drop"]
    assert result["plots"] and all(Path(p).is_file() for p in result["plots"])


def test_calibration_in_the_grid_needs_calibrated_labels(tmp_path, tiny_teacher_dir):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", "data.path=demo", "data.k1=5", "data.limit=8",
                                f"teacher.model={tiny_teacher_dir}", "teacher.steps=oracle", "teacher.calibrate=false",
                                "teacher.dtype=float32", "teacher.device=cpu"])
    run_data_stage(recipe, show_progress=False)
    with pytest.raises(ValueError, match="the grid asks for calibration"):
        tune(recipe, parse_grid(["calibrate=false,true"]), show_progress=False, plot=False)
    result = tune(recipe, parse_grid(["calibrate=false", "lam=0.1,0.3"]), show_progress=False, plot=False)
    assert len(result.rows) == 2 and "plots" not in result.to_json_dict()


def test_tune_refuses_records_without_stored_scores(tmp_path):
    old = {"qid": "q1", "selected": [0], "selected_doc_ids": ["d0"], "gains": [0.5], "objective": 0.5, "steps": ["s"],
           "answer": "", "e": [1.0], "W": [[0.5]], "bias_key": None, "status": "ok", "reason": None, "teacher": {}}
    (tmp_path / "labels.jsonl").write_text(json.dumps(old) + "\n")  # an earlier version's record: no scores kept
    (tmp_path / "candidates.jsonl").write_text(json.dumps({"qid": "q1", "docs": [], "gold_doc_ids": []}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl:1: record 'q1' has no stored scores"):
        load_questions(tmp_path / "labels.jsonl", tmp_path / "candidates.jsonl")
    (tmp_path / "labels.jsonl").write_text(json.dumps({"qid": "q1", "status": "ok", "selected": [0]}) + "\n")
    with pytest.raises(ValueError, match=r"labels.jsonl:1: field 'selected_doc_ids': missing \(and 9 more"):
        load_questions(tmp_path / "labels.jsonl", tmp_path / "candidates.jsonl")
