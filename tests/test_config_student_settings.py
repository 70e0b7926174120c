"""The student's settings (purecover.config.student_settings), declared once and carried unchanged: the recipe
section inherits them, the training arguments and the student metadata's records are made from them, and the
export copies the readout into selector_config.json. No other module of the package declares one of them."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from purecover.config import ConfigError, StudentConfig, load_recipe
from purecover.config.student_settings import (
    LOSS_SETTINGS,
    READOUT_SETTINGS,
    SETTINGS,
    StudentSettings,
    settings_of,
    trainer_fields,
)
from purecover.records import StudentMeta
from purecover.records.student import StudentLosses

PACKAGE = Path(__file__).resolve().parents[1] / "purecover"
HOME = PACKAGE / "config" / "student_settings.py"
OVERRIDES = {"lm_weight": 0.25, "cl_weight": 2.0, "m_exact": 3, "lm_reduction": "sequence_sum",
             "reply_order": "target", "negatives": "sampled", "negative_sample": 3, "negative_pool": 7,
             "bce_weight": 0.5, "readout": "passage", "passage_score": "head"}


def test_the_settings_are_the_student_sections_own():
    assert set(SETTINGS) == set(OVERRIDES) and set(LOSS_SETTINGS) | set(READOUT_SETTINGS) == set(SETTINGS)
    assert issubclass(StudentConfig, StudentSettings)
    student = load_recipe(None, [f"student.{k}={v}" for k, v in OVERRIDES.items()]).student
    assert settings_of(student) == OVERRIDES


def test_the_training_arguments_fields_are_made_from_the_declarations():
    from purecover.train.selector_arguments import SelectorTrainingArguments

    declared = {f.name: f.default for f in dataclasses.fields(StudentSettings)}  # pydantic FieldInfo
    fields = {f.name: f for f in dataclasses.fields(SelectorTrainingArguments)}
    for name, info in declared.items():
        assert fields[name].default == info.default
        assert fields[name].metadata["help"] == f"{info.description} (student.{name})"
    assert {n for n, _, f in trainer_fields() if "choices" in f.metadata} == {
        "lm_reduction", "reply_order", "negatives", "readout", "passage_score"}


def test_the_student_metadata_records_them_with_the_declared_ranges():
    declared = {f.name: f.default for f in dataclasses.fields(StudentSettings)}
    assert set(StudentLosses.model_fields) == set(LOSS_SETTINGS)
    for name in LOSS_SETTINGS:
        assert StudentLosses.model_fields[name].description == declared[name].description
    for name in READOUT_SETTINGS:
        assert StudentMeta.model_fields[name].description == declared[name].description
    with pytest.raises(ValueError, match="m_exact"):
        StudentLosses(m_exact=0)  # ge=1, as in the recipe
    from tests.train.test_model_card import META

    meta = StudentMeta.model_validate(META | {"readout": "passage"})
    assert meta.readout == "passage" and meta.passage_score == "token"


def test_a_file_with_the_readout_under_losses_reads_the_same():
    """Student metadata written before the readout left ``losses``."""
    from tests.train.test_model_card import META

    old = StudentMeta.model_validate(META | {"losses": META["losses"] | {"readout": "passage",
                                                                         "passage_score": "head"}})
    assert (old.readout, old.passage_score) == ("passage", "head")
    assert "readout" not in old.to_json_dict()["losses"] and old.to_json_dict()["readout"] == "passage"
    assert StudentMeta.model_validate(META).readout == "identifier"  # before the readout existed: the paper's


def test_the_section_checks_still_hold():
    with pytest.raises(ConfigError, match="student.passage_score: head scores the passage readout's markers"):
        load_recipe(None, ["student.passage_score=head"])
    with pytest.raises(ConfigError, match="student.cl_weight: cl_weight, lm_weight and bce_weight cannot all be 0"):
        load_recipe(None, ["student.cl_weight=0", "student.lm_weight=0"])


# Fields named like a setting that are not the setting: the train stage's summary reports the L_LM reduction
# it trained with (a run-file figure beside train_loss, read by the model card).
NOT_SETTINGS = {("purecover/records/student.py", "TrainSummary.lm_reduction")}


def declarations(source: str, names: tuple[str, ...] = SETTINGS) -> list[tuple[int, str]]:
    """(line, Class.name) of each class-level field named like a setting in `source` and declared with a value
    from pydantic's ``Field`` or dataclasses' ``field`` (a declaration with a default, range or description)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            found += [(item.lineno, f"{node.name}.{item.target.id}") for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                      and item.target.id in names and isinstance(item.value, ast.Call)
                      and ast.unparse(item.value.func).split(".")[-1] in ("Field", "field")]
    return found


def test_no_other_module_declares_a_setting():
    offenders = [f"{rel}:{line}: {name}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path != HOME
                 for rel in [str(path.relative_to(PACKAGE.parent))]
                 for line, name in declarations(path.read_text(encoding="utf-8")) if (rel, name) not in NOT_SETTINGS]
    assert not offenders, "declare a student setting once, in purecover/config/student_settings.py:\n" + \
        "\n".join(offenders)
    assert sorted(n for _, n in declarations(HOME.read_text(encoding="utf-8"))) == sorted(
        f"StudentSettings.{n}" for n in SETTINGS)


def test_the_declaration_check_catches_a_second_one():
    code = "class Args:\n    lm_weight: float = field(default=1.0)\n    readout: str = Field('identifier')\n"
    assert declarations(code) == [(2, "Args.lm_weight"), (3, "Args.readout")]
    assert declarations("class Card:\n    lm_weight: str\n") == []  # a template value, not a declaration
