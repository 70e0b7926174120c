"""Typed run-file records (purecover/records.py): one clear error per bad file, naming file, field and problem."""

from __future__ import annotations

import json
import math

import pytest

from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import prompt_template
from purecover.records import RecordError, SelectorConfig, load_json_record, validate_record

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


def test_every_field_is_described():
    for model in (SelectorConfig, SelectorConfig.model_fields["identifiers"].annotation):
        for name, field in model.model_fields.items():
            assert field.description and len(field.description) > 10, f"{model.__name__}.{name}"
