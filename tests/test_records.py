"""Typed run-file records (purecover/records/): files written as before, byte for byte, and one clear error per
bad file or line, naming file (and line), field and problem."""

from __future__ import annotations

import json
import math
import re

import pytest

from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import prompt_template
from purecover.records import (
    BiasFile,
    BudgetResult,
    CandidateRecord,
    LabelRecord,
    LineRecordError,
    MetricsFile,
    PredictionRecord,
    RecordError,
    SelectionRecord,
    SelectorConfig,
    StageManifest,
    load_json_record,
    validate_line,
    validate_record,
)

GOOD = {
    "base_model": "org/base", "identifiers": IdentifierScheme().to_dict(), "prompt_template": prompt_template(),
    "k1": 6, "tau3": 0.25, "tau3_logprob": -1.5, "k_max": None, "min_select": 1, "purecover_version": "0.1.0",
    "max_passage_tokens": 40,
}


def _write(tmp_path, data=None, raw=None):
    path = tmp_path / "selector_config.json"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(json.dumps(data))
    return path


def test_a_good_file_round_trips_byte_for_byte(tmp_path):
    path = _write(tmp_path, GOOD)
    record = load_json_record(path, SelectorConfig)
    assert record.k1 == 6 and record.identifiers.labels[0] == "A" and record.adapter is False
    assert json.dumps(record.to_json_dict()) == json.dumps(GOOD)  # same keys, same order as written before
    adapter = validate_record(SelectorConfig, {**GOOD, "adapter": True}, "x").to_json_dict()
    assert adapter["adapter"] is True and list(adapter)[-1] == "adapter"
    old = {k: v for k, v in GOOD.items() if k not in ("tau3_logprob", "max_passage_tokens", "purecover_version")}
    filled = validate_record(SelectorConfig, old, "x")
    assert (filled.tau3_logprob, filled.max_passage_tokens, filled.purecover_version) == (None, 192, None)
    assert "tau3_logprob" not in filled.to_json_dict()


@pytest.mark.parametrize(("changes", "message"), [
    ({"tau3": math.nan}, "field tau3: must be a finite number (got nan)"),
    ({"tau3": -math.inf}, "field tau3: must be a finite number (got -inf)"),
    ({"tau3": True}, "field tau3: must be a number (got True)"),
    ({"k_max": -1}, "field k_max: must be >= 1 (got -1)"),
    ({"k_max": "x"}, "field k_max: must be an integer (got 'x')"),
    ({"k1": 0}, "field k1: must be >= 1 (got 0)"),
    ({"k1": 6.0}, "field k1: must be an integer (got 6.0)"),
    ({"max_passage_tokens": 0}, "field max_passage_tokens: must be >= 1 (got 0)"),
    ({"min_select": -2}, "field min_select: must be >= 0 (got -2)"),
    ({"identifiers": 7}, "field identifiers: must be a JSON object (got an integer)"),
    ({"identifiers": {"name": "letters", "separator": "\n", "labels": ["A", 2]}},
     "field identifiers.labels[1]: must be a string (got 2)"),
    ({"identifiers": {"name": "letters", "separator": "\n"}}, "field identifiers.labels: missing"),
    ({"prompt_template": ["x"]}, "field prompt_template: must be a JSON object (got a list)"),
    ({"adapter": "yes"}, "field adapter: must be true or false (got 'yes')"),
    ({"base_model": ""}, "field base_model: must not be empty"),
    ({"k_max": 2, "min_select": 3}, "min_select (3) is above k_max (2)"),
])
def test_each_bad_value_is_one_error_naming_file_and_field(tmp_path, changes, message):
    path = _write(tmp_path, {**GOOD, **changes})
    with pytest.raises(RecordError) as exc:
        load_json_record(path, SelectorConfig, source="selector/selector_config.json", hint="re-export it")
    assert str(exc.value) == f"selector/selector_config.json: {message}; re-export it"
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_several_problems_report_the_first_and_count_the_rest(tmp_path):
    path = _write(tmp_path, {**GOOD, "tau3": math.nan, "k_max": 0, "k1": "6"})
    with pytest.raises(RecordError, match=r"field k1: must be an integer \(got '6'\) \(and 2 more problem\(s\)"):
        load_json_record(path, SelectorConfig)


@pytest.mark.parametrize(("raw", "message"), [
    (b'{"k1": 6,', r"invalid JSON \(Expecting property name enclosed in double quotes at line 1 column 10\)"),
    (b"[1, 2]", r"expected a JSON object, got a list"),
    (b'{"base_model": "caf\xe9"}', r"not UTF-8 text \(byte 19\)"),
])
def test_unreadable_files_name_the_file(tmp_path, raw, message):
    path = _write(tmp_path, raw=raw)
    with pytest.raises(RecordError, match=rf"^{path}: {message}"):
        load_json_record(path, SelectorConfig)


# --------------------------------------------------------------------------- run-file records

ALL_RECORDS = (SelectorConfig, CandidateRecord, LabelRecord, SelectionRecord, BiasFile, StageManifest,
               PredictionRecord, MetricsFile)

LABEL_KEYS = ["qid", "selected", "selected_doc_ids", "gains", "objective", "steps", "answer", "e", "W", "bias_key",
              "status", "reason", "fallback_reasons", "stop", "teacher"]
LABEL = {"qid": "q1", "selected": [2, 0], "selected_doc_ids": ["d2", None], "gains": [0.5, 1e-05], "objective": 0.50001,
         "steps": ["s"], "answer": "a", "e": [1.0], "W": [[0.1], [None], [0.9]], "bias_key": None, "status": "ok",
         "reason": None, "fallback_reasons": [], "stop": "threshold", "teacher": {"model": "m", "lam": 0.5}}


def _nested_models(model):
    from pydantic import BaseModel

    yield model
    for field in model.model_fields.values():
        for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _nested_models(arg)
            for inner in getattr(arg, "__args__", ()):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    yield from _nested_models(inner)


def test_every_record_field_is_described():
    for record in ALL_RECORDS:
        for model in _nested_models(record):
            for name, field in model.model_fields.items():
                assert field.description and len(field.description) > 10, f"{model.__name__}.{name}"


def test_label_records_keep_their_key_order_and_write_optional_keys_only_when_given():
    record = LabelRecord(**LABEL)
    assert list(record.to_json_dict()) == LABEL_KEYS
    assert json.dumps(record.to_json_dict()) == json.dumps(LABEL)  # same bytes as the dict literal it replaces
    extras = {"attention": {"step_doc": [[0.5]], "step_step": [[1.0]], "answer_step": [None]},
              "similarity": {"step_doc": [[0.1]], "answer_step": [0.2]}, "reply": "", "ratings": [[3, 4]],
              "subquestions": ["a", "b"]}
    full = LabelRecord(**LABEL, subquestions=extras["subquestions"], reply="", attention=extras["attention"],
                       ratings=extras["ratings"], similarity=extras["similarity"],
                       reply_issue="unclosed").to_json_dict()
    assert list(full) == [*LABEL_KEYS, "attention", "similarity", "reply", "reply_issue", "ratings", "subquestions"]
    assert json.dumps(full["ratings"]) == "[[3, 4]]"  # int ratings stay ints
    read = validate_line(LabelRecord, json.loads(json.dumps(full)), "labels.jsonl", 1)
    assert json.dumps(read.to_json_dict()) == json.dumps(full)


def test_an_error_label_has_the_same_keys_and_names_the_exception():
    record = LabelRecord.failed("q9", ValueError("no candidate documents"), bias_key="k", teacher={"model": "m"})
    data = record.to_json_dict()
    assert list(data) == LABEL_KEYS
    assert data == {"qid": "q9", "selected": [], "selected_doc_ids": [], "gains": [], "objective": None, "steps": [],
                    "answer": "", "e": [], "W": [], "bias_key": "k", "status": "error",
                    "reason": "ValueError: no candidate documents", "fallback_reasons": [], "stop": None,
                    "teacher": {"model": "m"}}


@pytest.mark.parametrize(("changes", "message"), [
    ({"status": "great"}, "field 'status': must be 'ok', 'fallback' or 'error' (got 'great')"),
    ({"selected": [-1, 0]}, "field 'selected[0]': must be >= 0 (got -1)"),
    ({"gains": [0.5]}, "selected, selected_doc_ids and gains differ in length (2, 2, 1)"),
    ({"W": [[0.1], ["x"]]}, "field 'W[1][0]': must be a number (got 'x')"),
    ({"teacher": None}, "field 'teacher': must be a JSON object (got null)"),
])
def test_a_bad_label_line_names_file_line_and_field(changes, message):
    with pytest.raises(LineRecordError) as exc:
        validate_line(LabelRecord, {**LABEL, **changes}, "run/labels.jsonl", 7)
    assert str(exc.value) == f"run/labels.jsonl:7: {message}"
    assert (exc.value.lineno, str(exc.value.path)) == (7, "run/labels.jsonl")


def test_labels_of_earlier_versions_still_read():
    old = {k: v for k, v in LABEL.items() if k not in ("fallback_reasons", "stop")}
    record = validate_line(LabelRecord, old, "labels.jsonl", 1)
    assert record.fallback_reasons == [] and record.stop is None


CANDIDATE = {"qid": "q1", "dataset": "hotpotqa", "question": "Who?", "answers": ["Ada"],
             "docs": [{"doc_id": "d1", "title": "T", "text": "x", "score": 1.25}], "gold_doc_ids": ["d1"],
             "gold_titles": ["T"], "oracle_steps": [], "meta": {"type": "bridge"}}


def test_candidate_records_round_trip_and_minimal_ones_read():
    record = validate_line(CandidateRecord, CANDIDATE, "candidates.jsonl", 1)
    assert json.dumps(record.to_json_dict()) == json.dumps(CANDIDATE)
    minimal = validate_line(CandidateRecord, {"qid": "a", "question": "q", "answers": [], "docs": [{"text": "t"}]},
                            "candidates.jsonl", 1)
    assert minimal.docs[0].doc_id is None and minimal.gold_doc_ids == [] and minimal.dataset is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"docs": [{"title": "t"}]}, "field 'docs[0].text': missing"),
    ({"docs": ["text"]}, "field 'docs[0]': must be a JSON object (got a string)"),
    ({"question": None}, "field 'question': must be a string (got None)"),
    ({"answers": "Ada"}, "field 'answers': must be a list (got a string)"),
])
def test_a_bad_candidate_line_names_file_line_and_field(changes, message):
    with pytest.raises(LineRecordError, match=rf"^c\.jsonl:3: {re.escape(message)}$"):
        validate_line(CandidateRecord, {**CANDIDATE, **changes}, "c.jsonl", 3)


def test_a_line_that_is_not_an_object_names_its_line():
    with pytest.raises(LineRecordError, match=r"^c\.jsonl:2: expected a JSON object, got a list$"):
        validate_line(CandidateRecord, [1], "c.jsonl", 2)


def test_selection_records_write_doc_ids_only_when_given():
    base = {"qid": "q", "selected": [1], "selected_doc_ids": ["d2"], "logits": [0.5, 2.0], "probabilities": [0.2, 0.8],
            "score_space": "logit"}
    assert json.dumps(SelectionRecord(**base).to_json_dict()) == json.dumps(base)
    with_ids = SelectionRecord(**base, doc_ids=["d1", "d2"]).to_json_dict()
    assert list(with_ids)[-1] == "doc_ids"
    old = validate_line(SelectionRecord, {k: v for k, v in base.items() if k != "score_space"}, "s.jsonl", 1)
    assert old.score_space == "logit"


def test_bias_and_manifest_optional_keys_are_written_only_when_given(tmp_path):
    keys = {"model": "m", "k1": 3, "template": "t", "layers": "all"}  # the earliest files' keys
    minimal = {"keys": keys, "bias": [0.0, 0.5, 0.25]}
    assert load_json_record(_write(tmp_path, minimal), BiasFile).to_json_dict() == minimal
    with pytest.raises(RecordError, match=r"field bias: must have at least 1 item"):
        validate_record(BiasFile, {"keys": keys, "bias": []}, "bias.json")
    manifest = {"stage": "data", "config_hash": "h", "started": "t0", "finished": "t1", "command": ["purecover"],
                "versions": {"python": "3.11"}, "summary": {"status": "running"}, "recipe": {"seed": 0}}
    assert list(StageManifest(**manifest).to_json_dict()) == list(manifest)
    complete = StageManifest(**manifest, inputs={"x": None}, outputs={"candidates.jsonl": {"lines": 2}}).to_json_dict()
    assert list(complete) == [*list(manifest)[:7], "outputs", "inputs", "recipe"]


def test_an_invalid_manifest_reads_as_none_with_a_warning_naming_file_and_field(tmp_path, caplog):
    from purecover.rundir import RunDir

    rd = RunDir(tmp_path)
    assert rd.manifest("data") is None and not caplog.records  # absent: no warning
    good = {"stage": "data", "config_hash": "h", "started": "t0", "finished": "t1", "command": [], "versions": {},
            "summary": {"status": "complete"}, "recipe": {}}
    rd.manifest_path("data").write_text(json.dumps(good))
    assert rd.manifest("data").to_json_dict() == good
    rd.manifest_path("data").write_text(json.dumps({**good, "summary": "done"}))
    with caplog.at_level("WARNING", logger="purecover.rundir"):
        assert rd.manifest("data") is None
    assert f"{rd.manifest_path('data')}: field summary: must be a JSON object (got a string)" in caplog.text
    caplog.clear()
    rd.manifest_path("data").write_text("{not json")
    with caplog.at_level("WARNING", logger="purecover.rundir"):
        assert rd.manifest("data") is None
    assert f"{rd.manifest_path('data')}: invalid JSON" in caplog.text


# --------------------------------------------------------------------------- evaluate's files

PREDICTION = {"qid": "q1", "prediction": "Ada", "method": "student:runs/x", "k": 3, "selected": [2, 0],
              "doc_ids": ["d2", None], "prompt_key": "k1", "prompt_tokens": 310, "completion_tokens": 2, "em": 1.0,
              "f1": 1.0, "acc": 1.0, "answer_coverage": 0.5, "answer_purity": 1.0, "support_coverage": None,
              "support_purity": 0.5, "crux_coverage": None}


def test_prediction_records_keep_their_keys_and_check_scores():
    assert json.dumps(PredictionRecord(**PREDICTION).to_json_dict()) == json.dumps(PREDICTION)
    with pytest.raises(LineRecordError, match=r"^p\.jsonl:4: field 'f1': must be <= 1\.0 \(got 1\.5\)$"):
        validate_line(PredictionRecord, {**PREDICTION, "f1": 1.5}, "p.jsonl", 4)
    with pytest.raises(LineRecordError, match=r"^p\.jsonl:4: field 'prompt_key': missing$"):
        validate_line(PredictionRecord, {k: v for k, v in PREDICTION.items() if k != "prompt_key"}, "p.jsonl", 4)


def _budget(**extra):
    return {"n": 2, "em": 0.5, "f1": 0.75, "acc": 0.5, "mean_k": 2.0,
            "answer": {"coverage": 0.5, "purity": None, "n_coverage": 2, "n_purity": 0, "n_undefined_coverage": 0,
                       "n_undefined_purity": 2},
            "supporting": {"coverage": 0.0, "purity": 0.0, "n_coverage": 1, "n_purity": 2, "n_undefined_coverage": 1,
                           "n_undefined_purity": 0, "gold_not_retrieved": 3},
            "crux": {"coverage": None, "n": 0}, "prompt_tokens": 300.5, "completion_tokens": 2.0, **extra}


METRICS = {"dataset": "hotpotqa", "run_dir": "runs/x", "questions": 2, "question_source": "runs/x/candidates.jsonl",
           "question_sample": {"size": 2, "seed": 0, "population": 9, "population_source": "dev"}, "generator": "g",
           "backend": "hf", "max_new_tokens": 8, "budgets": [1, 3], "table_budget": 3,
           "methods": {"retrieval": "retrieval", "student": "student"}, "fallbacks": {"retrieval": 0, "student": 0},
           "results": {"retrieval": {"1": _budget(ci={"em": [0.0, 1.0]}), "3": _budget()},
                       "student": {"1": _budget(ci={"em": [0.0, 1.0]}, vs_retrieval={"em": {
                           "diff": 0.0, "low": -0.5, "high": 0.5, "p": 1.0, "n": 2, "p_method": "exact"}}),
                           "3": _budget()}},
           "statistics": {"confidence": 0.95, "interval": "i", "bootstrap_resamples": 1000, "test": "t",
                          "permutations": 10000, "seed": 0, "baseline": "retrieval"},
           "versions": {"python": "3.11"}, "recipe": {"seed": 0}}


def test_metrics_files_round_trip_with_nested_optional_keys_only_when_given(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(METRICS))
    record = load_json_record(path, MetricsFile)
    assert isinstance(record.results["student"]["1"], BudgetResult)
    assert json.dumps(record.to_json_dict()) == json.dumps(METRICS)  # ci and vs_retrieval only where given
    built = MetricsFile(**{**METRICS, "results": {"none": {"1": BudgetResult(**_budget())}}}).to_json_dict()
    assert list(built["results"]["none"]["1"]) == list(_budget())
    early = {k: v for k, v in METRICS.items() if k not in ("question_sample", "statistics")}
    early["results"] = {"retrieval": {"1": {k: v for k, v in _budget().items() if k != "crux"}}}
    assert validate_record(MetricsFile, early, "m.json").statistics is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"budgets": []}, "field budgets: must have at least 1 item(s)"),
    ({"results": {"retrieval": {"1": _budget(em=None, answer={"coverage": 0.5})}}},
     "field results.retrieval.1.answer.purity: missing"),
    ({"results": {"retrieval": {"1": _budget(vs_retrieval={"em": {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 0.5,
                                                                  "n": 2, "p_method": "bootstrap"}})}}},
     "field results.retrieval.1.vs_retrieval.em.p_method: must be 'exact' or 'monte_carlo' (got 'bootstrap')"),
])
def test_a_bad_metrics_file_names_the_nested_field(changes, message):
    with pytest.raises(RecordError) as exc:
        validate_record(MetricsFile, {**METRICS, **changes}, "eval/metrics.json")
    assert str(exc.value).startswith(f"eval/metrics.json: {message}")
