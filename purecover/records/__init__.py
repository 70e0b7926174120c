"""Typed records of the files purecover writes into a run directory, checked when they are read back.

Each record is a pydantic model: the writer builds the file through the model (``to_json_dict``) and
the reader validates the file into the same model, so both agree on names, types and ranges. Every
field carries a description (the source of the generated file-format docs).

* whole JSON files: `SelectorConfig` (selector/selector_config.json), `BiasFile` (bias.json),
  `StageManifest` (``<stage>.run.json``);
* JSONL lines: `CandidateRecord` (candidates.jsonl), `LabelRecord` (labels.jsonl), `SelectionRecord`
  (selections.jsonl), `PredictionRecord` (eval/predictions/<method>@<K>.jsonl);
* the evaluation's summary: `MetricsFile` (eval/metrics.json, its ``results`` a `BudgetResult` per method
  and budget).

`load_json_record`, `validate_record` and `validate_line` turn pydantic's error list into ONE
`RecordError` (a `ValueError`) naming the file (and line), the field as a dotted path (list items as
``[i]``) and the problem, e.g. ``selector/selector_config.json: field tau3: must be a finite number
(got nan)`` or ``run/candidates.jsonl:3: field 'docs[0].text': missing``.

Records are strict (``"3"`` is not an integer, ``true`` is not a number) and keep unknown keys, so a
file written by a newer purecover with extra keys still reads. A record's ``to_json_dict`` gives the
exact dict the writer has always written (same keys in the same order): files stay byte-for-byte what
earlier versions wrote for the same inputs, which resumed runs rely on.

Import every name from ``purecover.records``; the package holds one module per run file or family of
files, each importing only `base` (the errors, the readers, the written-record base and the shared field
types and checks) and the modules before it in this list: `candidates` (candidates.jsonl), `selector`
(selector_config.json), `gguf` (models converted from GGUF), `manifests` (``<stage>.run.json``, the
run-directory lock), `labels` (labels.jsonl), `bias` (bias.json and the calibrate stage), `selections`
(selections.jsonl and the select stage), `evaluation` (predictions, metrics.json and the evaluate stage),
`index_meta` (corpus stores, embedding shards, FAISS and BM25 indexes), `data_stage` (data_report.json and
the data stage's summary), `student` (the train and export stages), `publish` (Hub pushes, model and
dataset cards) and `teacher` (the label stage's shards and summary, label-report, tune).
"""

from __future__ import annotations

from .base import (
    DEFAULT_MAX_PASSAGE_TOKENS as DEFAULT_MAX_PASSAGE_TOKENS,
)
from .base import (
    Finite as Finite,
)
from .base import (
    Fraction as Fraction,
)
from .base import (
    LineRecordError,
    RecordError,
    load_json_record,
    validate_line,
    validate_record,
)
from .base import (
    NonNegativeInt as NonNegativeInt,
)
from .base import (
    PositiveInt as PositiveInt,
)
from .base import (
    Stored as Stored,
)
from .bias import (
    BiasDocTokens,
    BiasFile,
    BiasKeys,
    CalibrateSummary,
    InContextBiasRow,
    InContextCounts,
    LengthSource,
)
from .candidates import (
    CandidateDoc,
    CandidateRecord,
)
from .data_stage import (
    DataReport,
    DataSummary,
    HubSummary,
)
from .evaluation import (
    BudgetResult,
    CoveragePurity,
    CrossEncoderTraining,
    CruxCoverage,
    EvaluateSummary,
    EvaluationStatistics,
    GenerationRecord,
    MetricsFile,
    PairedTest,
    PredictionRecord,
    QuestionSample,
    SupportingCoveragePurity,
)
from .evaluation import (
    SubtopicCoverage as SubtopicCoverage,
)
from .gguf import (
    GgufInfo,
    GgufSource,
)
from .index_meta import (
    BM25BuildStats,
    BM25IndexMeta,
    BM25Settings,
    BuiltFile,
    CorpusFileIdentity,
    CorpusStoreMeta,
    FaissIndexMeta,
    FileStamp,
    InvalidRecord,
    ShardManifest,
    VerifiedFiles,
)
from .labels import (
    EmbeddingSource,
    EstimationSettings,
    LabelRecord,
    LancerSettings,
    LayersRead,
    PromptWording,
    StoredAttention,
    StoredSimilarity,
    TeacherSettings,
)
from .labels import (
    LabelStatus as LabelStatus,
)
from .labels import (
    Layers as Layers,
)
from .manifests import (
    LockHolder,
    OutputDescription,
    StageManifest,
    StageSummary,
)
from .publish import (
    DatasetCardFront,
    HubDataFiles,
    HubDatasetConfig,
    ModelCardFront,
    PublishMarker,
    PushRecord,
)
from .selections import (
    ByoSelectRun,
    ByoSelectSummary,
    SelectInputRecord,
    SelectionRecord,
    SelectSummary,
)
from .selector import (
    IdentifiersRecord,
    SelectorConfig,
)
from .student import (
    ExportSummary,
    StudentLora,
    StudentLosses,
    StudentMeta,
    TrainSummary,
)
from .teacher import (
    GoldComparison,
    GridValue,
    LabelDiagnostics,
    LabelReport,
    LabelSummary,
    LancerShardRecord,
    PrecisionRecall,
    ReplyShardRecord,
    SplitFigures,
    TuneChosen,
    TuneQuestionCounts,
    TuneRecipeSetting,
    TuneResult,
    TuneRow,
)

__all__ = [
    "BM25BuildStats",
    "BM25IndexMeta",
    "BM25Settings",
    "BiasDocTokens",
    "BiasFile",
    "BiasKeys",
    "BudgetResult",
    "BuiltFile",
    "ByoSelectRun",
    "ByoSelectSummary",
    "CalibrateSummary",
    "CandidateDoc",
    "CandidateRecord",
    "CorpusFileIdentity",
    "CorpusStoreMeta",
    "CoveragePurity",
    "CrossEncoderTraining",
    "CruxCoverage",
    "DataReport",
    "DataSummary",
    "DatasetCardFront",
    "EmbeddingSource",
    "EstimationSettings",
    "EvaluateSummary",
    "EvaluationStatistics",
    "ExportSummary",
    "FaissIndexMeta",
    "FileStamp",
    "GenerationRecord",
    "GgufInfo",
    "GgufSource",
    "GoldComparison",
    "GridValue",
    "HubDataFiles",
    "HubDatasetConfig",
    "HubSummary",
    "IdentifiersRecord",
    "InContextBiasRow",
    "InContextCounts",
    "InvalidRecord",
    "LabelDiagnostics",
    "LabelRecord",
    "LabelReport",
    "LabelSummary",
    "LancerSettings",
    "LancerShardRecord",
    "LayersRead",
    "LengthSource",
    "LineRecordError",
    "LockHolder",
    "MetricsFile",
    "ModelCardFront",
    "OutputDescription",
    "PairedTest",
    "PrecisionRecall",
    "PredictionRecord",
    "PromptWording",
    "PublishMarker",
    "PushRecord",
    "QuestionSample",
    "RecordError",
    "ReplyShardRecord",
    "SelectInputRecord",
    "SelectSummary",
    "SelectionRecord",
    "SelectorConfig",
    "ShardManifest",
    "SplitFigures",
    "StageManifest",
    "StageSummary",
    "StoredAttention",
    "StoredSimilarity",
    "StudentLora",
    "StudentLosses",
    "StudentMeta",
    "SupportingCoveragePurity",
    "TeacherSettings",
    "TrainSummary",
    "TuneChosen",
    "TuneQuestionCounts",
    "TuneRecipeSetting",
    "TuneResult",
    "TuneRow",
    "VerifiedFiles",
    "load_json_record",
    "validate_line",
    "validate_record",
]
