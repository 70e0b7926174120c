"""`purecover.records` is a package of small modules (one per run file or family) behind one unchanged public
surface: every module at most 400 lines, the same `__all__`, every name importable from ``purecover.records``,
and imports among the modules going one way (each imports only `base` and the modules listed before it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import BaseModel

import purecover.records as records
from purecover.records.base import Finite, PositiveInt, check_same_lengths
from tests.package_imports import sibling_imports

PACKAGE = Path(records.__file__).resolve().parent
MAX_LINES = 400

# The modules bottom first: a module may import only those before it (so `base` imports none of them).
ORDER = ("base", "candidates", "selector", "gguf", "manifests", "labels", "bias", "selections", "evaluation",
         "index_meta", "data_stage", "student", "publish", "teacher")

# `__all__` as it was when records.py became this package (same names, same order), plus the index-file checksum
# records added since (BuiltFile, FileStamp, VerifiedFiles).
EXPECTED_ALL = (
    "BM25BuildStats", "BM25IndexMeta", "BM25Settings", "BiasDocTokens", "BiasFile", "BiasKeys", "BudgetResult",
    "BuiltFile", "ByoSelectRun", "ByoSelectSummary", "CalibrateSummary", "CandidateDoc", "CandidateRecord",
    "CorpusFileIdentity", "CorpusStoreMeta", "CoveragePurity", "CrossEncoderTraining", "CruxCoverage", "DataReport",
    "DataSummary",
    "DatasetCardFront", "EmbeddingSource", "EstimationSettings", "EvaluateSummary", "EvaluationStatistics",
    "ExportSummary", "FaissIndexMeta", "FileStamp", "GenerationRecord", "GgufInfo", "GgufSource", "GoldComparison",
    "GridValue", "HubDataFiles", "HubDatasetConfig", "HubSummary", "IdentifiersRecord", "InContextBiasRow",
    "InContextCounts", "InvalidRecord", "LabelDiagnostics", "LabelRecord", "LabelReport", "LabelSummary",
    "LancerSettings", "LancerShardRecord", "LayersRead", "LengthSource", "LineRecordError", "LockHolder",
    "MetricsFile", "ModelCardFront", "OutputDescription", "PairedTest", "PrecisionRecall", "PredictionRecord",
    "PromptWording", "PublishMarker", "PushRecord", "QuestionSample", "RecordError", "ReplyShardRecord",
    "SelectInputRecord", "SelectSummary", "SelectionRecord", "SelectorConfig", "ShardManifest", "SplitFigures",
    "StageManifest", "StageSummary", "StoredAttention", "StoredSimilarity", "StudentLora", "StudentLosses",
    "StudentMeta", "SupportingCoveragePurity", "TeacherSettings", "TrainSummary", "TuneChosen", "TuneQuestionCounts",
    "TuneRecipeSetting", "TuneResult", "TuneRow", "VerifiedFiles", "load_json_record", "validate_line",
    "validate_record",
)

# Names other modules import from purecover.records without their being in __all__.
ALSO_IMPORTED = ("SubtopicCoverage", "DEFAULT_MAX_PASSAGE_TOKENS", "NonNegativeInt", "Fraction", "Stored", "Layers")


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_every_module_is_at_most_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"purecover/records/{path.name} has {lines} lines (at most {MAX_LINES}): split it"


def test_no_records_module_beside_the_package():
    """A purecover/records.py would be shadowed by the package: its edits would silently do nothing."""
    assert not (PACKAGE.parent / "records.py").exists()


def test_the_public_names_are_unchanged_and_resolve():
    assert tuple(records.__all__) == EXPECTED_ALL
    for name in (*records.__all__, *ALSO_IMPORTED):
        assert getattr(records, name) is not None, name
    for name in records.__all__:  # each record type comes from one module of the package, never a copy
        obj = getattr(records, name)
        if isinstance(obj, type):
            module = obj.__module__.removeprefix("purecover.records.")
            assert module in ORDER, f"{name} is defined in {obj.__module__}"


def test_stage_summaries_named_by_string_resolve():
    """The stage registry names its summaries as ``purecover.records:Name``."""
    for name in ("StageSummary", "DataSummary", "CalibrateSummary", "LabelSummary", "TrainSummary",
                 "ExportSummary", "SelectSummary", "EvaluateSummary"):
        cls = getattr(records, name)
        assert issubclass(cls, BaseModel) and issubclass(cls, records.StageSummary)


def _sibling_imports(path: Path) -> list[tuple[int, str]]:
    return sibling_imports(path, "purecover.records")


def test_the_modules_are_listed_in_their_import_order():
    assert sorted(ORDER) == sorted(p.stem for p in _modules() if p.stem != "__init__"), \
        "add a new module of purecover/records/ to ORDER (after the modules it imports)"


@pytest.mark.parametrize("name", ORDER)
def test_each_module_imports_only_the_modules_before_it(name):
    allowed = set(ORDER[:ORDER.index(name)])
    wrong = [f"purecover/records/{name}.py:{line}: imports {target}"
             for line, target in _sibling_imports(PACKAGE / f"{name}.py") if target not in allowed]
    assert wrong == []


def test_the_import_check_sees_relative_and_absolute_imports(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from .base import _Written\nfrom . import labels\nimport purecover.records.teacher\n"
                    "from purecover.records import RecordError\nfrom pydantic import Field\n")
    assert _sibling_imports(path) == [(1, "base"), (2, "labels"), (3, "teacher"), (4, "__init__")]


# --------------------------------------------------------------------------- the shared checks of base.py


class _Picks(BaseModel):
    selected: list[int]
    doc_ids: list[str]
    gains: list[float]
    threshold: Finite | None = None
    budgets: list[PositiveInt] = []


def test_check_same_lengths_names_the_fields_and_their_lengths():
    record = _Picks(selected=[1, 2], doc_ids=["a", "b"], gains=[0.5])
    assert check_same_lengths(record, "selected", "doc_ids") is record
    with pytest.raises(ValueError, match=r"^selected and gains differ in length \(2, 1\)$"):
        check_same_lengths(record, "selected", "gains")
    with pytest.raises(ValueError, match=r"^selected, doc_ids and gains differ in length \(2, 2, 1\)$"):
        check_same_lengths(record, "selected", "doc_ids", "gains")


@pytest.mark.parametrize("bad", [{"threshold": math.nan}, {"threshold": math.inf}, {"budgets": [1, 0]}])
def test_the_shared_field_types_refuse_what_they_say(bad):
    with pytest.raises(ValueError):
        _Picks(selected=[], doc_ids=[], gains=[], **bad)
