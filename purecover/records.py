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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator
from typing_extensions import NotRequired, TypedDict

__all__ = [
    "BM25BuildStats",
    "BM25IndexMeta",
    "BM25Settings",
    "BiasDocTokens",
    "BiasFile",
    "BiasKeys",
    "BudgetResult",
    "ByoSelectRun",
    "ByoSelectSummary",
    "CalibrateSummary",
    "CandidateDoc",
    "CandidateRecord",
    "CorpusFileIdentity",
    "CorpusStoreMeta",
    "CoveragePurity",
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
    "load_json_record",
    "validate_line",
    "validate_record",
]

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_PASSAGE_TOKENS = 192  # what selectors exported before the key existed were trained with


class RecordError(ValueError):
    """A run file that does not match its record; ``str(err)`` reads ``SOURCE: field F: problem[; hint]``."""

    def __init__(self, source: str, field: str | None, problem: str, hint: str | None = None) -> None:
        self.source, self.field, self.problem, self.hint = source, field, problem, hint
        super().__init__(self._message())

    def _message(self) -> str:
        what = f"field {self.field}: " if self.field else ""
        return f"{self.source}: {what}{self.problem}" + (f"; {self.hint}" if self.hint else "")


class LineRecordError(RecordError):
    """A JSONL line that does not match its record; ``str(err)`` reads ``PATH:LINE: field 'F': problem[; hint]``
    (the style of every JSONL reader's errors)."""

    def __init__(self, path: str | Path, lineno: int, field: str | None, problem: str,
                 hint: str | None = None) -> None:
        self.path, self.lineno = Path(path), lineno
        super().__init__(f"{path}:{lineno}", field, problem, hint)

    def _message(self) -> str:
        what = f"field {self.field!r}: " if self.field else ""
        return f"{self.source}: {what}{self.problem}" + (f"; {self.hint}" if self.hint else "")


# --------------------------------------------------------------------------- error messages


def _dotted(loc: tuple[int | str, ...]) -> str | None:
    """``('identifiers', 'labels', 3)`` -> ``identifiers.labels[3]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number", type(None): "null"}


def _problem(error: Any) -> str:
    """One pydantic error as a short phrase: what the field must be and what it holds."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {_shown(value)})"
    if kind == "missing":
        return "missing"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a JSON object (got {_JSON_TYPES.get(type(value), type(value).__name__)})"
    if kind == "list_type":
        return f"must be a list (got {_JSON_TYPES.get(type(value), type(value).__name__)})"
    simple = {"finite_number": "must be a finite number", "int_type": "must be an integer",
              "float_type": "must be a number", "string_type": "must be a string", "bool_type": "must be true or false",
              "extra_forbidden": "is not a known field"}
    if kind in simple:
        return simple[kind] + got
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        bound = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {bound}{got}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length', '?')} item(s)"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    message = str(error["msg"])
    if message.startswith("Input should be"):
        message = "must be" + message[len("Input should be"):]
    return message + got


def _first_problem(exc: ValidationError, where: str) -> tuple[str | None, str]:
    """(dotted field, problem) of the first error, with a count of the others found in `where`."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    problem = _problem(first)
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s) in {where})"
    return _dotted(tuple(first["loc"])), problem


def validate_record(model: type[M], data: Any, source: str, *, hint: str | None = None) -> M:
    """`data` (parsed JSON) as a `model`; a mismatch raises one `RecordError` naming `source` and the field.

    `hint` (what to do about a bad file) is appended to the message.
    """
    if not isinstance(data, dict):
        raise RecordError(source, None, f"expected a JSON object, got {_JSON_TYPES.get(type(data), type(data).__name__)}",
                          hint)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, problem = _first_problem(exc, "this file")
        raise RecordError(source, field, problem, hint) from None


def validate_line(model: type[M], data: Any, path: str | Path, lineno: int, *, hint: str | None = None) -> M:
    """One JSONL line's value (`data`) as a `model`; a mismatch raises one `LineRecordError` naming
    ``path:lineno`` and the field."""
    if not isinstance(data, dict):
        raise LineRecordError(path, lineno, None, "expected a JSON object, got "
                              f"{_JSON_TYPES.get(type(data), type(data).__name__)}", hint)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, problem = _first_problem(exc, "this record")
        raise LineRecordError(path, lineno, field, problem, hint) from None


def load_json_record(path: str | Path, model: type[M], *, source: str | None = None, hint: str | None = None) -> M:
    """Read the JSON file `path` into a `model` (`validate_record`); `source` names it in errors (default: the path).

    A file that is not UTF-8 or not JSON raises a `RecordError` too; a missing file raises
    FileNotFoundError (the caller knows what should have written it).
    """
    path = Path(path)
    name = source or str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(name, None, f"not UTF-8 text (byte {exc.start})", hint) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(name, None, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                          hint) from None
    return validate_record(model, data, name, hint=hint)


# --------------------------------------------------------------------------- records

_STRICT = ConfigDict(strict=True, extra="allow")


class IdentifiersRecord(BaseModel):
    """The passage identifiers a selector was trained with (`IdentifierScheme.to_dict`)."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="Name of the identifier scheme, e.g. 'letters' (A..Z).")
    separator: str = Field(min_length=1, description="Text between identifiers in the reply (a newline).")
    labels: list[str] = Field(min_length=1, description="The identifiers in candidate order: passage k is "
                                                        "introduced by labels[k].")


class SelectorConfig(BaseModel):
    """``selector_config.json`` of an exported selector: how to prompt it and how to turn its scores into a
    selection. Written by ``purecover export``; read by `purecover.models.selector.read_selector_config`.

    Optional keys (``tau3_logprob``, ``max_passage_tokens``, ``purecover_version``, ``adapter``) are absent
    from files written by earlier versions; reading such a file fills the documented defaults.
    """

    model_config = _STRICT

    base_model: str = Field(min_length=1, description="Hub id or path of the model the selector was fine-tuned "
                                                      "from (an adapter export is loaded on top of it).")
    identifiers: IdentifiersRecord = Field(description="The identifier scheme (name, separator, labels).")
    prompt_template: dict[str, str] = Field(description="What defines the selection prompt (system, instructions, "
                                                        "layout, hash); the hash must match this purecover's.")
    k1: int = Field(ge=1, description="The most candidates one prompt may hold (the identifiers trained for).")
    tau3: float = Field(allow_inf_nan=False, description="Threshold on the first-token identifier logits: "
                                                         "passages scoring above it are kept.")
    tau3_logprob: float | None = Field(
        default=None, allow_inf_nan=False,
        description="The same threshold on log-probabilities renormalised over the present identifiers (vLLM "
                    "log-prob modes); absent in exports made before it existed.")
    k_max: int | None = Field(ge=1, description="At most this many passages are kept; null for no limit.")
    min_select: int = Field(ge=0, description="At least this many passages are kept, even below the threshold.")
    purecover_version: str | None = Field(default=None, description="The purecover version that exported it.")
    max_passage_tokens: int = Field(default=DEFAULT_MAX_PASSAGE_TOKENS, ge=1,
                                    description="Each passage (title and text) is cut to this many tokens in the "
                                                "prompt, as in training.")
    adapter: bool = Field(default=False, description="True when the directory holds a LoRA adapter to load on "
                                                     "base_model instead of merged weights.")

    @model_validator(mode="after")
    def _min_select_within_k_max(self) -> SelectorConfig:
        if self.k_max is not None and self.min_select > self.k_max:
            raise ValueError(f"min_select ({self.min_select}) is above k_max ({self.k_max})")
        return self

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The file's content: optional keys at their 'absent' value (no tau3_logprob, no adapter) left out."""
        data = self.model_dump(mode="json")
        if data.get("tau3_logprob") is None:
            data.pop("tau3_logprob", None)
        if not data.get("adapter"):
            data.pop("adapter", None)
        return data


class _Written(BaseModel):
    """A record purecover writes: `to_json_dict` is exactly the dict it has always written."""

    model_config = _STRICT

    # Fields written only when given (absent from the file otherwise, rather than written as null).
    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The file's content: every field in declaration order (then any unknown key kept from a file read
        back), the `WRITTEN_WHEN_SET` ones only when given; nested records follow their own rule."""
        data = self.model_dump(exclude={k for k in self.WRITTEN_WHEN_SET if k not in self.model_fields_set})
        for name in data.keys() & type(self).model_fields.keys():
            value = getattr(self, name)
            if _holds_record(value):
                data[name] = _as_written(value)
        return data


def _holds_record(value: Any) -> bool:
    """Whether `value` is, or contains (in lists and dicts), a `_Written` record."""
    if isinstance(value, _Written):
        return True
    if isinstance(value, dict):
        return any(_holds_record(v) for v in value.values())
    return isinstance(value, list) and any(_holds_record(v) for v in value)


def _as_written(value: Any) -> Any:
    """`value` with every record in it replaced by its `to_json_dict`."""
    if isinstance(value, _Written):
        return value.to_json_dict()
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    return value


NonNegativeInt = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Stored = Annotated[float | None, Field(description="6 significant digits; null for a non-finite value.")]


# --------------------------------------------------------------------------- candidates.jsonl


class CandidateDoc(_Written):
    """One retrieved passage of a candidates.jsonl record."""

    doc_id: str | None = Field(default=None, description="The passage's id: its corpus id, or a content hash of "
                                                         "title and text for the dataset's own paragraphs. Absent "
                                                         "in hand-made files, where the 1-based position names it.")
    title: str | None = Field(default=None, description="The passage's title ('' or null when it has none).")
    text: str = Field(description="The passage's text.")
    score: float | None = Field(default=None, description="The retriever's score, rounded to 6 decimals; "
                                                          "the docs are in decreasing score order.")


class CandidateRecord(_Written):
    """One question of candidates.jsonl (written by the data stage; read by label, train, select, evaluate).

    Only ``qid``, ``question``, ``answers`` and each doc's ``text`` are needed to read a file: hand-made
    candidates may leave the other keys out.
    """

    qid: str = Field(description="The question's id, unique in the file.")
    dataset: str | None = Field(default=None, description="The dataset the question comes from, e.g. 'hotpotqa'.")
    question: str = Field(description="The question text.")
    answers: list[str] = Field(description="Gold answers: the answer first, then its aliases.")
    docs: list[CandidateDoc] = Field(description="The top-K1 retrieved passages, best first.")
    gold_doc_ids: list[str] = Field(default_factory=list, description="Ids of every gold (supporting) passage in the "
                                                                      "corpus, retrieved or not.")
    gold_titles: list[str] = Field(default_factory=list, description="Titles of the gold supporting paragraphs.")
    oracle_steps: list[str] = Field(default_factory=list, description="A gold reasoning decomposition (used by "
                                                                      "teacher.steps: oracle); empty when none.")
    meta: dict[str, JsonValue] = Field(default_factory=dict, description="Dataset-specific extras (type, level, ...).")


# --------------------------------------------------------------------------- labels.jsonl

LabelStatus = Literal["ok", "fallback", "error"]
Layers = Literal["full_attention", "all"] | list[int]


class StoredAttention(_Written):
    """A labels.jsonl ``attention`` block: the segment attention of one question at stored precision
    (`purecover.teacher.estimation.SegmentAttention`), mean attention probabilities."""

    step_doc: list[list[Stored]] = Field(description="Attn(step i, document k): one row per step, one column per "
                                                     "candidate.")
    step_step: list[list[Stored]] = Field(description="Attn(step i, step j): one row and one column per step.")
    answer_step: list[Stored] = Field(description="Attn(answer, step i), one value per step.")


class StoredSimilarity(_Written):
    """A labels.jsonl ``similarity`` block: the cosine similarities of one question at stored precision
    (`purecover.teacher.estimation.SimilarityScores`)."""

    step_doc: list[list[Stored]] = Field(description="cos(step i, document k): one row per step, one column per "
                                                     "candidate.")
    answer_step: list[Stored] = Field(description="cos(answer, step i), one value per step; null without an "
                                                  "answer text.")


class PromptWording(_Written):
    """The reasoning prompt's wording a label or a calibration was made with (`ReasoningPrompt.record`)."""

    file: str = Field(description="The template file's name (reasoning.txt: ours).")
    sha256: str = Field(description="sha256 (hex) of the template text.")
    system_sha256: str | None = Field(description="sha256 (hex) of the system message; null without one.")


class EmbeddingSource(_Written):
    """Where the embedding model's files came from (`purecover.data.retrieval.dense.embedding_model_source`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"weights_sha256"})

    id: str = Field(description="The embedding model's Hub id.")
    source: str = Field(description="Where its files were read from (a bundled package, the Hub cache, a path).")
    weights_sha256: str | None = Field(default=None, description="sha256 of model.safetensors, for a verified "
                                                                 "bundled copy.")


class LancerSettings(_Written):
    """The ``teacher.lancer`` keys a label was made with, and the sha256 of custom templates."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"rating_template_sha256", "subquestion_template_sha256"})

    enabled: bool = Field(description="Whether LANCER ratings were fused into the coverage.")
    beta: float = Field(description="The weight of the ratings (teacher.lancer.beta).")
    n_subquestions: int = Field(description="Sub-questions written per question.")
    expected_rating: bool = Field(description="Whether ratings are expected values over the digit probabilities.")
    rating_template_sha256: str | None = Field(default=None, description="sha256 (16 hex) of a custom rating "
                                                                         "template; absent with ours.")
    subquestion_template_sha256: str | None = Field(default=None, description="sha256 (16 hex) of a custom "
                                                                              "sub-question template; absent "
                                                                              "with ours.")


class EstimationSettings(_Written):
    """The resolved estimation parameters (`purecover.teacher.defaults.EstimationParams`): what turned the
    raw scores into e, W and a selection."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"objective"})

    e_source: str = Field(description="Signal of the step weights e: attention or similarity.")
    w_source: str = Field(description="Signal of the coverage W: attention or similarity.")
    normalize: Literal["absolute", "zscore"] = Field(description="The score scale.")
    tau_e: float = Field(description="Temperature of e, in the units of normalize.")
    tau_w: float = Field(description="Temperature of W, in the units of normalize.")
    lam: float = Field(description="λ, the weight of the noise term.")
    budget: int = Field(description="At most this many documents in a label.")
    tau_stop: float = Field(description="The greedy stops when the best gain is not above this.")
    min_select: int = Field(description="At least this many documents are kept.")
    cot_weighting: bool = Field(description="Whether steps are weighted (false: e = 1 for every step).")
    calibrate: bool = Field(description="Whether the position bias was subtracted from W's attention.")
    beta: float = Field(description="Weight of the LANCER ratings (0 without LANCER).")
    selection: str = Field(description="greedy, or the avg | max ranking ablations.")
    objective: Literal["released_code"] | None = Field(default=None, description="released_code when the greedy "
                                                       "used the authors' released objective "
                                                       "(teacher.objective); absent for the paper's.")


class TeacherSettings(_Written):
    """A labels.jsonl ``teacher`` block (`purecover.teacher.label_record.teacher_meta`): the recipe's teacher
    keys as given (null = default), the resolved ``estimation`` and the prompt's wording.

    Every key is optional when reading: files of early versions lack the later ones (``embedding_source``,
    ``normalize``, ``embedding_tau_e``, ``selection``, ``estimation``, ``prompt``), and a key absent from the
    file stays absent when the record is written back."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"model", "backend", "steps", "estimator", "embedding_model", "embedding_source", "layers", "calibrate",
         "cot_weighting", "normalize", "tau1", "tau2", "embedding_tau", "embedding_tau_e", "lam", "budget",
         "tau_stop", "min_select", "selection", "lancer", "estimation", "prompt", "layers_read"})

    model: str | None = Field(default=None, description="teacher.model.")
    backend: str | None = Field(default=None, description="teacher.backend: hf or vllm.")
    steps: str | None = Field(default=None, description="teacher.steps: model or oracle.")
    estimator: str | None = Field(default=None, description="teacher.estimator: attention, embedding or "
                                                            "no_attention.")
    embedding_model: str | None = Field(default=None, description="teacher.embedding_model when W comes from "
                                                                  "cosine similarity; null otherwise.")
    embedding_source: EmbeddingSource | None = Field(default=None, description="Where the embedding model's files "
                                                                              "came from; null without one.")
    layers: Layers | None = Field(default=None, description="teacher.layers as given: full_attention, all, or the "
                                                           "layer indices.")
    calibrate: bool | None = Field(default=None, description="teacher.calibrate.")
    cot_weighting: bool | None = Field(default=None, description="teacher.cot_weighting.")
    normalize: str | None = Field(default=None, description="The resolved score scale: absolute or zscore.")
    tau1: float | None = Field(default=None, description="teacher.tau1 as given (null: the default).")
    tau2: float | None = Field(default=None, description="teacher.tau2 as given (null: the default).")
    embedding_tau: float | None = Field(default=None, description="teacher.embedding_tau as given.")
    embedding_tau_e: float | None = Field(default=None, description="teacher.embedding_tau_e as given.")
    lam: float | None = Field(default=None, description="The resolved λ.")
    budget: int | None = Field(default=None, description="teacher.budget.")
    tau_stop: float | None = Field(default=None, description="teacher.tau_stop.")
    min_select: int | None = Field(default=None, description="teacher.min_select.")
    selection: str | None = Field(default=None, description="teacher.selection: greedy, avg or max.")
    lancer: LancerSettings | None = Field(default=None, description="The teacher.lancer keys.")
    estimation: EstimationSettings | None = Field(default=None, description="The resolved estimation parameters.")
    prompt: PromptWording | None = Field(default=None, description="The reasoning prompt's wording.")
    layers_read: list[int] | None = Field(default=None, description="The attention layers the capture averaged "
                                                                    "(teacher.layers resolved for the teacher "
                                                                    "model, sorted indices); absent when no "
                                                                    "attention was read, and in files of early "
                                                                    "versions.")


class LabelRecord(_Written):
    """One question of labels.jsonl: the teacher's selection and what it was computed from (label stage;
    read by train, evaluate, tune and label-report).

    A question that could not be labelled is a record too (`failed`: status ``error``, empty selection,
    the exception in ``reason``), never a missing line. The optional fields at the end are written only
    when they apply (attention or embedding estimator, teacher-written steps, LANCER).
    """

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"attention", "similarity", "reply", "ratings", "subquestions"})

    qid: str = Field(description="The question's id (as in candidates.jsonl).")
    selected: list[NonNegativeInt] = Field(description="Selected candidate positions (0-based), in pick order.")
    selected_doc_ids: list[str | None] = Field(description="The doc_id of each selected candidate (null when the "
                                                           "candidate has none).")
    gains: list[Stored] = Field(description="Each pick's marginal gain (greedy), or its score (teacher.selection "
                                            "avg | max).")
    objective: Stored = Field(description="The coverage-minus-noise objective of the selection.")
    steps: list[str] = Field(description="The reasoning steps the coverage is computed over.")
    answer: str = Field(description="The answer that ends the reasoning ('' when none).")
    e: list[Stored] = Field(description="Step weights (with LANCER: then one weight per sub-question).")
    W: list[list[Stored]] = Field(description="Coverage of each step (columns) by each candidate (rows).")
    bias_key: str | None = Field(description="The calibration keys of the position bias used (compact JSON); "
                                             "null without calibration.")
    status: LabelStatus = Field(description="ok; fallback (a fallback was needed, see fallback_reasons); error "
                                            "(the question could not be labelled).")
    reason: str | None = Field(description="What went wrong or was worked around, '; '-separated; null when nothing.")
    fallback_reasons: list[str] = Field(default_factory=list, description="Codes of the fallbacks used: "
                                                                          "reply_parse, no_oracle_steps, min_select.")
    stop: str | None = Field(default=None, description="Why the selection ended: first_step, budget, candidates, "
                                                       "threshold or ranking; null for an error record.")
    teacher: TeacherSettings = Field(description="The teacher configuration the label was made with, and the "
                                                 "resolved estimation parameters.")
    attention: StoredAttention | None = Field(default=None, description="The captured segment attention (attention "
                                                                        "estimator), at stored precision.")
    similarity: StoredSimilarity | None = Field(default=None, description="The cosine similarities (embedding "
                                                                          "estimator), at stored precision.")
    reply: str | None = Field(default=None, description="The teacher's reply (teacher.steps: model).")
    ratings: list[list[int | float]] | None = Field(default=None, description="LANCER ratings 0-5, one row per "
                                                                              "candidate, one column per "
                                                                              "sub-question.")
    subquestions: list[str] | None = Field(default=None, description="LANCER's sub-questions.")

    @model_validator(mode="after")
    def _one_id_and_gain_per_pick(self) -> LabelRecord:
        if not len(self.selected) == len(self.selected_doc_ids) == len(self.gains):
            raise ValueError(f"selected, selected_doc_ids and gains differ in length ({len(self.selected)}, "
                             f"{len(self.selected_doc_ids)}, {len(self.gains)})")
        return self

    @classmethod
    def failed(cls, qid: str, error: BaseException | str, *, bias_key: str | None,
               teacher: TeacherSettings) -> LabelRecord:
        """The record of a question that could not be labelled: an empty selection, status ``error`` and
        ``reason`` naming the exception (``Type: message``)."""
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(qid=qid, selected=[], selected_doc_ids=[], gains=[], objective=None, steps=[], answer="", e=[],
                   W=[], bias_key=bias_key, status="error", reason=reason, fallback_reasons=[], stop=None,
                   teacher=teacher)


# --------------------------------------------------------------------------- selections.jsonl


class SelectionRecord(_Written):
    """One question of selections.jsonl (select stage, and bring-your-own ``purecover select``; read by
    evaluate)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"doc_ids"})

    qid: str = Field(description="The question's id (as in the candidates).")
    selected: list[NonNegativeInt] = Field(description="Kept candidate positions (0-based), best first.")
    selected_doc_ids: list[str] = Field(description="The doc ids of the kept candidates (a candidate without one "
                                                    "is named by its 1-based position).")
    logits: list[float] = Field(description="The score of every candidate, in candidate order (see score_space); "
                                            "empty for a question without candidates.")
    probabilities: list[float] = Field(description="Softmax of the scores over the candidates, in candidate order.")
    score_space: Literal["logit", "logprob"] = Field(
        default="logit", description="What logits holds: first-token identifier logits, or log-probabilities "
                                     "renormalised over the identifiers (vLLM log-prob modes); absent in files "
                                     "written before it existed.")
    doc_ids: list[str] | None = Field(default=None, description="The doc ids of all candidates in candidate order "
                                                                "(bring-your-own selection only).")


# --------------------------------------------------------------------------- eval/predictions/<method>@<K>.jsonl


class PredictionRecord(_Written):
    """One question of eval/predictions/<method>@<K>.jsonl: the generator's answer with what it was given and
    how it scored (evaluate stage; read by ``purecover score``).

    Every field is written by the evaluate stage. ``purecover score`` needs only ``qid`` and ``prediction``
    and reads hand-made ``{qid, prediction}`` files too (`purecover.eval.score_cli.read_predictions`).
    """

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"alpha_ndcg", "subtopic_recall"})

    qid: str = Field(description="The question's id (as in the candidates).")
    prediction: str = Field(description="The generator's answer (stripped).")
    method: str = Field(description="The method's name as in eval.methods (e.g. 'retrieval', 'student:DIR', "
                                    "an external file's name).")
    k: int = Field(ge=1, description="The budget K: the method kept at most this many passages.")
    selected: list[NonNegativeInt] = Field(description="The candidate positions (0-based) given to the generator, "
                                                       "in prompt order.")
    doc_ids: list[str | None] = Field(description="The doc_id of each selected candidate (null when the candidate "
                                                  "has none).")
    prompt_key: str = Field(description="The generation cache key of the prompt (generator, max_new_tokens and "
                                        "prompt text hashed): its line in eval/generations.jsonl.")
    prompt_tokens: NonNegativeInt = Field(description="Tokens of the generator's prompt.")
    completion_tokens: NonNegativeInt = Field(description="Tokens of the generated answer.")
    em: Fraction = Field(description="Exact match (0 or 1) against the gold answers, by the dataset's rules.")
    f1: Fraction = Field(description="Token F1 against the best gold answer, by the dataset's rules.")
    acc: Fraction = Field(description="Accuracy (0 or 1): some gold answer appears in the prediction.")
    answer_coverage: Fraction | None = Field(description="Share of the answer-containing candidates that were "
                                                         "selected; null when no candidate contains an answer.")
    answer_purity: Fraction | None = Field(description="Share of the selected candidates that contain an answer; "
                                                       "null when none was selected.")
    support_coverage: Fraction | None = Field(description="Share of the retrieved gold supporting paragraphs that "
                                                          "were selected; null when none was retrieved.")
    support_purity: Fraction | None = Field(description="Share of the selected candidates that are gold supporting "
                                                        "paragraphs; null when none was selected.")
    crux_coverage: Fraction | None = Field(description="Share of the teacher's LANCER sub-questions answered by the "
                                                       "selection (rating >= 3); null without ratings.")
    alpha_ndcg: Fraction | None = Field(
        default=None, description="alpha-nDCG@K of the selection, the gold supporting passages as subtopics; null "
                                  "when no candidate is gold; absent in files of earlier versions.")
    subtopic_recall: Fraction | None = Field(
        default=None, description="Share of the gold supporting passages (subtopics) the selection covers, "
                                  "retrieved or not; null without gold; absent in files of earlier versions.")

    @model_validator(mode="after")
    def _one_id_per_position(self) -> PredictionRecord:
        if len(self.doc_ids) != len(self.selected):
            raise ValueError(f"selected and doc_ids differ in length ({len(self.selected)}, {len(self.doc_ids)})")
        return self


# --------------------------------------------------------------------------- eval/metrics.json


class CoveragePurity(_Written):
    """Mean Coverage@K and Purity@K over the questions, against answer-containing candidates."""

    coverage: Fraction | None = Field(description="Mean Coverage@K over the questions where it is defined; null "
                                                  "when it is defined for none.")
    purity: Fraction | None = Field(description="Mean Purity@K over the questions where it is defined; null when "
                                                "it is defined for none.")
    n_coverage: NonNegativeInt = Field(description="How many questions the coverage mean is over.")
    n_purity: NonNegativeInt = Field(description="How many questions the purity mean is over.")
    n_undefined_coverage: NonNegativeInt | None = Field(
        default=None, description="Questions left out of the coverage mean (no gold candidate); absent in files "
                                  "of early versions.")
    n_undefined_purity: NonNegativeInt | None = Field(
        default=None, description="Questions left out of the purity mean (nothing selected); absent in files of "
                                  "early versions.")


class SupportingCoveragePurity(CoveragePurity):
    """Mean Coverage@K and Purity@K against the gold supporting paragraphs."""

    gold_not_retrieved: NonNegativeInt | None = Field(
        default=None, description="Gold supporting paragraphs, summed over the questions, that retrieval missed "
                                  "(no selection can cover them); absent in files of early versions.")


class CruxCoverage(_Written):
    """Mean CRUX coverage: the share of the teacher's LANCER sub-questions the selection answers."""

    coverage: Fraction | None = Field(description="Mean over the questions with ratings; null when none has any.")
    n: NonNegativeInt = Field(description="How many questions had ratings.")


class SubtopicCoverage(_Written):
    """Mean alpha-nDCG@K and subtopic recall@K over the questions, the gold supporting passages as subtopics
    (`purecover.eval.subtopic_metrics`)."""

    alpha_ndcg: Fraction | None = Field(description="Mean alpha-nDCG@K over the questions with a gold candidate; "
                                                    "null when none has one.")
    recall: Fraction | None = Field(description="Mean subtopic recall@K over the questions with gold supporting "
                                                "passages; null when none has any.")
    n_alpha_ndcg: NonNegativeInt = Field(description="How many questions the alpha-nDCG mean is over.")
    n_recall: NonNegativeInt = Field(description="How many questions the recall mean is over.")
    n_no_subtopics: NonNegativeInt = Field(description="Questions without gold supporting passages, left out of "
                                                       "both means.")
    n_none_retrieved: NonNegativeInt = Field(description="Questions with gold supporting passages none of which is "
                                                         "a candidate: left out of the alpha-nDCG mean (no ranking "
                                                         "can gain), in the recall mean with 0.")
    alpha: Fraction = Field(description="The redundancy penalty alpha: a passage repeating a covered subtopic gains "
                                        "(1 - alpha) per earlier cover.")
    unit: Literal["passage", "title"] = Field(description="What one subtopic is: a gold passage (the dataset's own "
                                                          "paragraphs) or a supporting title (a corpus file's "
                                                          "chunks of one article).")


class PairedTest(_Written):
    """One method against retrieval on the same questions, for one metric (`purecover.eval.stats.paired_test`)."""

    diff: float = Field(allow_inf_nan=False, description="Mean per-question difference (method - retrieval), "
                                                         "6 decimals.")
    low: float = Field(allow_inf_nan=False, description="Lower bound of its paired bootstrap interval.")
    high: float = Field(allow_inf_nan=False, description="Upper bound of its paired bootstrap interval.")
    p: Fraction = Field(description="Two-sided p-value of the paired sign-flip permutation test.")
    n: int = Field(ge=1, description="How many questions were paired.")
    p_method: Literal["exact", "monte_carlo"] = Field(description="exact (every sign vector) or monte_carlo "
                                                                  "(random sign flips).")


class BudgetResult(_Written):
    """One method at one budget K in metrics.json's ``results``: means over the evaluation questions."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"ci", "vs_retrieval", "subtopics"})

    n: NonNegativeInt = Field(description="How many questions were answered.")
    em: Fraction | None = Field(description="Mean exact match; null without questions.")
    f1: Fraction | None = Field(description="Mean token F1; null without questions.")
    acc: Fraction | None = Field(description="Mean accuracy; null without questions.")
    mean_k: float | None = Field(ge=0, description="Mean number of passages given to the generator.")
    answer: CoveragePurity = Field(description="Coverage@K and Purity@K against answer-containing candidates.")
    supporting: SupportingCoveragePurity = Field(description="Coverage@K and Purity@K against the gold supporting "
                                                             "paragraphs.")
    crux: CruxCoverage | None = Field(default=None, description="CRUX coverage from the teacher's LANCER ratings; "
                                                                "absent in files of early versions.")
    subtopics: SubtopicCoverage | None = Field(
        default=None, description="alpha-nDCG@K and subtopic recall@K, the gold supporting passages as subtopics; "
                                  "absent in files of earlier versions.")
    prompt_tokens: float | None = Field(ge=0, description="Mean prompt tokens per question.")
    completion_tokens: float | None = Field(ge=0, description="Mean answer tokens per question.")
    ci: dict[str, list[float]] | None = Field(
        default=None, description="Percentile bootstrap interval [low, high] of em, f1 and acc over questions; "
                                  "absent without questions and in files of early versions.")
    vs_retrieval: dict[str, PairedTest] | None = Field(
        default=None, description="The paired test against retrieval for em, f1 and acc; absent for retrieval "
                                  "itself, when retrieval is not evaluated, and in files of early versions.")


class QuestionSample(_Written):
    """The seeded random sample of evaluation questions (eval.sample)."""

    size: NonNegativeInt = Field(description="How many questions were drawn.")
    seed: int = Field(description="The seed they were drawn with (eval.seed).")
    population: NonNegativeInt = Field(description="How many questions they were drawn from.")
    population_source: str = Field(description="Where those questions come from.")


class EvaluationStatistics(_Written):
    """How the intervals and paired tests of ``results`` were made (`purecover.eval.stats.statistics_meta`)."""

    confidence: float = Field(gt=0, lt=1, description="Confidence level of the intervals, e.g. 0.95.")
    interval: str = Field(description="What the intervals are (percentile bootstrap over questions).")
    bootstrap_resamples: int = Field(ge=1, description="Bootstrap resamples per interval.")
    test: str = Field(description="The paired test against the baseline.")
    permutations: int = Field(ge=1, description="Random sign flips of the permutation test.")
    seed: int = Field(description="The seed of the resampling (the recipe's seed).")
    baseline: str | None = Field(description="The method every other is tested against (retrieval); null when it "
                                             "was not evaluated.")


class MetricsFile(_Written):
    """run_dir/eval/metrics.json: every method at every budget, scored (evaluate stage; read by
    ``purecover report``). Keys added after the first version (``question_sample``, ``statistics``,
    ``answer_prompt``) read as null when absent; ``answer_prompt`` is written only when given."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"answer_prompt"})

    dataset: str = Field(description="The evaluation questions' dataset ('a+b' for several).")
    run_dir: str = Field(description="The run directory evaluated.")
    questions: NonNegativeInt = Field(description="How many questions every method answered.")
    question_source: str = Field(description="Where the questions come from, in words.")
    question_sample: QuestionSample | None = Field(default=None, description="The seeded sample drawn "
                                                                             "(eval.sample); null without one.")
    generator: str = Field(description="The answer generator (eval.generator).")
    backend: str = Field(description="Its generation backend: hf or vllm.")
    max_new_tokens: int = Field(ge=1, description="At most this many tokens were generated per answer.")
    answer_prompt: dict[str, str] | None = Field(
        default=None, description="The generator's answer prompt: {file, sha256}, its file's name (rag_answer.txt: "
                                  "ours; else eval.prompt_file's) and the sha256 of its wording; absent in files of "
                                  "earlier versions.")
    budgets: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, description="The budgets K, increasing.")
    table_budget: int = Field(description="The budget of the report's main table (eval.table_budget; the largest "
                                          "budget is shown when it is not one of them).")
    methods: dict[str, str] = Field(description="Each method's name and its kind.")
    fallbacks: dict[str, NonNegativeInt] = Field(description="Per method, questions it answered with a fallback "
                                                             "(e.g. the question as its only subtopic).")
    results: dict[str, dict[str, BudgetResult]] = Field(description="Per method name and budget K (as a string), "
                                                                    "the means over the questions.")
    statistics: EvaluationStatistics | None = Field(default=None, description="How the intervals and tests in "
                                                                              "results were made; absent in files "
                                                                              "of early versions.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")
    recipe: dict[str, JsonValue] = Field(description="The resolved recipe the evaluation ran with.")


# --------------------------------------------------------------------------- bias.json


class LengthSource(_Written):
    """Where a calibration's target document lengths come from (`purecover.teacher.calibration.length_source`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"file", "records", "fingerprint"})

    setting: Literal["candidates"] | int = Field(description="teacher.calibration_lengths: 'candidates' (the "
                                                             "candidates' per-position medians) or a token count.")
    file: str | None = Field(default=None, description="'candidates': the candidates file's name.")
    records: int | None = Field(default=None, ge=0, description="'candidates': how many of its first records "
                                                                "were measured.")
    fingerprint: str | None = Field(default=None, description="'candidates': hash of the K1 document bodies "
                                                              "measured.")


class BiasKeys(_Written):
    """What a position bias is valid for (`purecover.teacher.calibration.bias_keys`): labelling compares each
    key with the run's, and their compact JSON (`key_string`) is labels.jsonl's ``bias_key``.

    ``weights`` and ``doc_tokens`` are absent in files of early versions (and stay absent when written back)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"weights", "doc_tokens", "layers_read", "procedure"})

    model: str = Field(description="The teacher as given (display only: the weights fingerprint decides).")
    weights: str | None = Field(default=None, description="Fingerprint of the teacher's weights (sha256:... of a "
                                                          "local directory, hub:ID@COMMIT of a Hub snapshot).")
    k1: int = Field(ge=1, description="Candidates per question (positions of the bias).")
    template: str = Field(description="Hash of the reasoning prompt's layout (wording, max_steps, chat template).")
    layers: Layers = Field(description="teacher.layers as given: full_attention, all, or layer indices.")
    doc_tokens: list[int] | None = Field(default=None, description="The dummy documents' target token lengths, "
                                                                   "per position.")
    layers_read: list[int] | None = Field(default=None, description="The attention layers averaged (teacher.layers "
                                                                    "resolved for the teacher model); absent in "
                                                                    "files of early versions.")
    procedure: str | None = Field(default=None, description="The in-context procedure's identity (steps source, "
                                                            "question count, a hash of the questions); absent for "
                                                            "the fixed procedure.")


class BiasDocTokens(_Written):
    """The dummy documents' token lengths of a calibration."""

    target: list[int] = Field(description="The length each dummy document was cut to, per position.")
    measured: list[int] = Field(description="Its length inside the built teacher sequence, per position.")
    source: LengthSource = Field(description="Where the target lengths come from: the setting, and for "
                                             "'candidates' the file, record count and fingerprint.")


class BiasFile(_Written):
    """run_dir/bias.json: the teacher's per-position attention bias (calibrate stage; read by label).

    Only ``keys`` and ``bias`` are needed to read a file; the rest is absent in files of early versions.
    """

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"n_dummy_steps", "prompt", "doc_tokens", "created", "versions"})

    keys: BiasKeys = Field(description="What the bias is valid for (model, weights fingerprint, k1, template, "
                                       "layers, doc_tokens); labelling checks each against the run.")
    bias: list[float] = Field(min_length=1, description="Bias(k): mean attention per token pair from the dummy "
                                                        "steps to dummy document k, one value per position.")
    n_dummy_steps: int | None = Field(default=None, ge=1, description="How many dummy reasoning steps were used.")
    prompt: PromptWording | None = Field(default=None, description="The reasoning prompt's wording (file name and "
                                                                   "hashes) it was computed with.")
    doc_tokens: BiasDocTokens | None = Field(default=None, description="The dummy documents' token lengths.")
    created: str | None = Field(default=None, description="When it was computed (UTC, ISO 8601).")
    versions: dict[str, str] | None = Field(default=None, description="Versions of Python and the packages used.")


# --------------------------------------------------------------------------- models converted from GGUF


class GgufInfo(_Written):
    """What a GGUF file's header says about the model (``general.*`` keys; null where the file has none)."""

    architecture: str = Field(description="general.architecture, e.g. llama, gemma3, qwen2.")
    name: str | None = Field(description="general.name.")
    organization: str | None = Field(description="general.organization.")
    basename: str | None = Field(description="general.basename.")
    size_label: str | None = Field(description="general.size_label, e.g. 135M.")
    finetune: str | None = Field(description="general.finetune.")
    license: str | None = Field(description="general.license as the file states it, e.g. apache-2.0 or gemma.")
    quantization: str = Field(description="general.file_type as a name (e.g. MOSTLY_Q4_1), or 'unknown'.")
    tensor_types: dict[str, int] = Field(description="How many tensors are stored in each type, e.g. {Q4_1: 210}.")
    has_chat_template: bool = Field(description="Whether the file carries tokenizer.chat_template.")


class GgufSource(_Written):
    """``purecover_source.json`` in a converted model directory, and the record of a GGUF model in run outputs."""

    format: str = Field("gguf", description="Always gguf.")
    file_name: str = Field(description="The GGUF file's name (never its local directory).")
    sha256: str = Field(description="sha256 of the GGUF file's bytes (hex).")
    size_bytes: int = Field(description="The GGUF file's size in bytes.")
    info: GgufInfo = Field(description="What the file's header says.")
    model_type: str = Field(description="The transformers model type the file converts to (e.g. llama, gemma3_text).")
    parameters: int = Field(description="Parameters of the converted model.")
    upstream: str | None = Field(None, description="The upstream model (Hub id) when known, e.g. from the catalogue.")
    license: str | None = Field(None, description="The licence of the weights: the catalogue's when known, else the "
                                                  "file's general.license.")
    catalogue_name: str | None = Field(None, description="The `purecover models` catalogue name, when fetched by it.")
    converted_with: dict[str, str] = Field(description="Versions of purecover, transformers and gguf that converted it.")


# --------------------------------------------------------------------------- <stage>.run.json


class OutputDescription(_Written):
    """What one output (or input) of a stage held when its manifest was written (`purecover.rundir.describe_output`):
    a JSONL file by ``lines`` and ``sha256``; another file by ``bytes`` (and ``sha256`` up to 256 MiB); a
    directory by ``files``, ``sizes`` and the ``digests`` of its small files (weights are checked by size)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"lines", "bytes", "files", "sizes", "digests", "sha256"})

    lines: int | None = Field(default=None, ge=0, description="Complete lines of a JSONL file.")
    bytes: int | None = Field(default=None, ge=0, description="Size of a file.")
    files: int | None = Field(default=None, ge=0, description="Files under a directory (recursive).")
    sizes: dict[str, int] | None = Field(default=None, description="Each file of a directory (relative name) and "
                                                                   "its size in bytes.")
    digests: dict[str, str] | None = Field(default=None, description="``sha256:<hex>`` of each small file of a "
                                                                     "directory (up to 1 MiB), by relative name.")
    sha256: str | None = Field(default=None, description="``sha256:<hex>`` of a file's bytes.")


class StageSummary(_Written):
    """A stage's summary: what its body returns, stored in its manifest and shown by the pipeline's table.

    Each stage returns its own subclass (named by `purecover.stages.Stage.summary`); ``status`` is set by
    the runner (running while the stage works, complete once its outputs are recorded). A summary read back
    from a manifest written by another version keeps the keys it has (unknown keys are kept)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"status"})

    status: Literal["running", "complete"] | None = Field(default=None, description="running, then complete.")

    def figures(self) -> dict[str, JsonValue]:
        """The summary as written, without ``status`` (what the pipeline's table picks headline figures from)."""
        data = self.to_json_dict()
        data.pop("status", None)
        return data


class StageManifest(_Written):
    """run_dir/``<stage>.run.json``: a stage's state (``summary.status``: running or complete), what made
    its outputs and, once complete, what its outputs and inputs held."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"outputs", "inputs", "model_sources"})

    stage: str = Field(description="The stage's name (data, calibrate, label, ...).")
    config_hash: str = Field(description="The hash of the recipe sections the stage depends on (and its extras).")
    started: str = Field(description="When the stage started (UTC, ISO 8601, seconds).")
    finished: str = Field(description="When this file was written (UTC, ISO 8601, seconds).")
    command: list[str] = Field(description="The command line of the process that wrote it.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")
    summary: StageSummary = Field(description="The stage's summary; status is running, then complete.")
    outputs: dict[str, OutputDescription | None] | None = Field(
        default=None, description="Once complete: what each output held (lines, bytes or files, and hashes), by "
                                  "its path relative to the run directory; null for a missing one.")
    inputs: dict[str, OutputDescription | None] | None = Field(
        default=None, description="Once complete: what each input held when the stage ran, by name.")
    recipe: dict[str, JsonValue] = Field(description="The resolved recipe the stage ran with.")
    model_sources: dict[str, GgufSource] | None = Field(
        default=None, description="For each recipe key naming a GGUF file or a catalogue model (e.g. teacher.model): "
                                  "the file's sha256, quantisation, licence and upstream model.")


# ---- data and utils: the data stage's report, corpus stores, retrieval indexes, the run-directory lock, Hub pushes


class InvalidRecord(_Written):
    """One input record left out as invalid (``data.skip_invalid``): in data_report.json and in a corpus store's
    store.json. `purecover.data.errors.DataFormatError.invalid_record` makes it from the error."""

    source: str = Field(description="The file (or Hub dataset) the record comes from.")
    location: str = Field(description="Where the record is in it, e.g. 'line 12' or 'row 3'.")
    field: str | None = Field(description="The field at fault; null when the record as a whole is.")
    problem: str = Field(description="What is wrong with it.")


class DataReport(_Written):
    """run_dir/data_report.json: the records the data stage left out (data stage, with ``data.skip_invalid``;
    written when any was, and rewritten on later runs once it exists)."""

    invalid_records: list[InvalidRecord] = Field(description="The questions' and the corpus's invalid records, "
                                                             "in the order they were met.")
    n_invalid: NonNegativeInt = Field(description="How many there are.")


class CorpusFileIdentity(_Written):
    """A corpus file as ``stat`` saw it when its store was built: a change to any of these gets a new store.

    ``ctime_ns`` (the inode's change time, which no ordinary tool sets back) catches an edit in place whose
    mtime was restored; it is absent in stores of early versions, which are therefore built again once."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"ctime_ns"})

    path: str = Field(description="The file's resolved path.")
    size: NonNegativeInt = Field(description="Its size in bytes.")
    mtime_ns: int = Field(description="Its modification time in nanoseconds.")
    inode: NonNegativeInt = Field(description="Its inode number.")
    ctime_ns: int | None = Field(default=None, description="Its inode change time in nanoseconds (moves with any "
                                                           "write, rename, chmod or mtime change).")


class CorpusStoreMeta(_Written):
    """``<index_dir>/corpus-<key>/store.json``: what a corpus store holds, written last when it is built
    (`purecover.data.corpus_store`); a store whose file does not validate is built again."""

    format: int = Field(description="The store's format (purecover.data.corpus_store.STORE_FORMAT).")
    source: CorpusFileIdentity = Field(description="The corpus file it was built from.")
    passages: int = Field(ge=1, description="How many passages it holds (invalid records and repeated ids left "
                                            "out).")
    fingerprint: str = Field(description="SHA-256 over the ids, titles and texts in order (the corpus "
                                         "fingerprint).")
    batch_rows: int = Field(ge=1, description="Rows per Arrow record batch of passages.arrow.")
    invalid_records: list[InvalidRecord] = Field(description="The records left out as invalid "
                                                             "(data.skip_invalid).")
    built_at: str = Field(description="When it was built (UTC, ISO 8601, seconds).")
    build_seconds: float = Field(ge=0, description="How long the build took.")
    build_peak_rss_mb: float | None = Field(description="Peak resident memory of the building process, MiB; null "
                                                        "where it cannot be read.")
    versions: dict[str, str] = Field(description="Versions of purecover, pyarrow and numpy that built it.")


class ShardManifest(_Written):
    """``dense-<key>/manifest.json`` of a shard directory: what its embedding shards hold
    (`purecover.data.retrieval.embedding_shards`). Written sorted by key, 2-space indented."""

    format_version: int = Field(description="The shard layout's version (embedding_shards.FORMAT_VERSION).")
    corpus: str = Field(description="The fingerprint of the corpus encoded.")
    corpus_source: str = Field(description="Where the corpus was read from (not part of the key).")
    n: NonNegativeInt = Field(description="How many passages the corpus has.")
    shard_size: int = Field(ge=1, description="Passages per shard (the last one holds the rest).")
    model: str = Field(description="The embedding model's name.")
    passage_prefix: str = Field(description="Text put before every passage when encoding.")
    dtype: Literal["float32", "float16"] = Field(description="The stored embeddings' dtype.")
    dim: int | None = Field(ge=1, description="Embedding dimension; null when the model does not declare it.")
    normalize: bool = Field(description="Whether rows are L2-normalised (always true).")
    key: str = Field(description="16 hex digits of SHA-256 over the other fields (corpus_source left out).")


class FaissIndexMeta(_Written):
    """``<index file>.json`` beside a FAISS index built from embedding shards
    (`purecover.data.retrieval.faiss_index.build_faiss_index`)."""

    format_version: int = Field(description="The metadata's version (faiss_index.INDEX_FORMAT_VERSION).")
    factory: str = Field(description="The faiss.index_factory string, e.g. 'Flat' or 'IVF4096,PQ96'.")
    metric: str = Field(description="The metric: inner_product.")
    ntotal: NonNegativeInt = Field(description="Vectors in the index.")
    dim: int = Field(ge=1, description="Their dimension.")
    shards_key: str = Field(description="The key of the shard manifest it was built from.")
    trained_on: NonNegativeInt = Field(description="Rows the index was trained on (0: no training needed).")
    seed: int = Field(description="Seed of the training.")
    faiss_version: str = Field(description="The faiss version that built it.")


class BM25Settings(_Written):
    """What a BM25 index depends on: its key hashes these (sorted JSON)."""

    corpus: str = Field(description="The fingerprint of the corpus indexed.")
    stopwords: str | None = Field(description="bm25s stopword list (e.g. 'en'); null for none.")
    bm25s: str = Field(description="The bm25s version whose tokenizer and scoring are reproduced.")
    method: str = Field(description="The BM25 variant: lucene.")
    k1: float = Field(description="BM25's k1 (term frequency saturation).")
    b: float = Field(description="BM25's b (length normalisation).")
    text: str = Field(description="What is indexed of each passage: title+text.")
    format: int = Field(description="The index files' format (bm25_index.FORMAT_VERSION).")


class BM25BuildStats(_Written):
    """How a BM25 index was built (`purecover.data.retrieval.bm25_index.build_index`)."""

    passages: NonNegativeInt = Field(description="Passages indexed.")
    terms: NonNegativeInt = Field(description="Vocabulary size.")
    postings: NonNegativeInt = Field(description="Non-zero weights (term, passage).")
    tokens: NonNegativeInt = Field(description="Tokens over all passages.")
    runs: NonNegativeInt = Field(description="Sorted runs written by the first pass.")
    buckets: NonNegativeInt = Field(description="Column buckets merged by the second pass.")
    read_batch: int = Field(ge=1, description="Passages read per batch (a memory knob).")
    run_tokens: int = Field(ge=1, description="Tokens per run (a memory knob).")
    bucket_postings: int = Field(ge=1, description="Postings per bucket (a memory knob).")
    tokenize_seconds: float = Field(ge=0, description="Seconds of the first (tokenizing) pass.")
    build_seconds: float = Field(ge=0, description="Seconds of the whole build.")
    build_peak_rss_mb: float | None = Field(description="Peak resident memory of the building process, MiB; null "
                                                        "where it cannot be read.")


class BM25IndexMeta(_Written):
    """``bm25-<key>/`` metadata file of a BM25 index on disk, written last (`purecover.data.retrieval.bm25`)."""

    settings: BM25Settings = Field(description="What the index depends on (hashed into its key).")
    n_docs: NonNegativeInt = Field(description="Passages in the index.")
    source: str = Field(description="Where the corpus was read from.")
    build: BM25BuildStats = Field(description="How it was built.")


class LockHolder(_Written):
    """``run_dir/.purecover.lock``: who holds the run directory (`purecover.utils.rundir_lock`), one compact
    JSON object, rewritten when the holder changes."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"handover"})

    pid: int = Field(description="The holder's process id.")
    host: str = Field(description="Its host name.")
    stage: str = Field(description="The stage (or command) it runs.")
    launch: str | None = Field(description="Its distributed launch's identity; null for a single process.")
    started: str = Field(description="When it took the lock (UTC, ISO 8601, seconds).")
    handover: str | None = Field(default=None, description="sha256 of the token a child process presents to be "
                                                           "let in; present only during a hand-over.")


class PushRecord(_Written):
    """``run_dir/export.push.json`` / ``publish.<what>.push.json``: the last push of a folder to the Hub
    (`purecover.utils.hub.push_folder`); the same fingerprint to the same target is not pushed again."""

    endpoint: str = Field(description="The Hub endpoint pushed to.")
    repo_id: str = Field(description="The repository, owner/name.")
    repo_type: str = Field(description="model or dataset.")
    revision: str = Field(description="The branch pushed to.")
    url: str = Field(description="The repository's (or branch's) URL.")
    commit: str = Field(description="The commit id the push made.")
    commit_url: str = Field(description="The URL of that commit.")
    fingerprint: str = Field(description="sha256 over the relative paths and bytes of the pushed files (16 hex).")
    private: bool = Field(description="Whether the repository was created private.")
    files: list[str] = Field(description="The pushed files, relative, sorted.")
    pushed_at: str = Field(description="When (UTC, ISO 8601, seconds).")


class HubSummary(_Written):
    """The Hub configuration and split a data stage read (``hub`` of its summary)."""

    name: str = Field(description="The dataset's Hub id or local repository folder.")
    config: str | None = Field(description="The configuration read; null for the default one.")
    split: str = Field(description="The split read.")
    requested_config: str | None = Field(description="The configuration asked for (data.hub_config).")
    requested_split: str = Field(description="The split asked for (data.split).")
    data_files: dict[str, list[str]] | None = Field(description="Split -> files, when read from the repository's "
                                                                "files instead of a configuration.")
    checked: bool = Field(description="False when nothing could be verified (offline: the local cache was read).")
    notes: list[str] = Field(description="What differs from the request.")


class DataSummary(StageSummary):
    """The data stage's summary (`purecover.data.candidates.write_candidates`; ``summary`` of data.run.json).

    The supporting-paragraph recall is written under the key ``supporting_recall@<k1>`` (e.g.
    ``supporting_recall@20``), where the other keys' place puts it; reading accepts that key."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = StageSummary.WRITTEN_WHEN_SET | {"hub"}

    questions: NonNegativeInt = Field(description="Questions in the stage's output (after data.sample).")
    sampled_from: NonNegativeInt | None = Field(description="Valid questions the sample was drawn from; null "
                                                            "without data.sample.")
    sample_seed: int | None = Field(description="The sample's seed (data.sample_seed); null without data.sample.")
    written: NonNegativeInt = Field(description="Questions retrieved and written by this run.")
    already_done: NonNegativeInt = Field(description="Questions found already written (a resumed run).")
    repaired_lines: NonNegativeInt = Field(description="Torn last lines of candidates.jsonl cut off (left by a "
                                                       "killed run).")
    invalid_records: NonNegativeInt = Field(description="Records left out as invalid (data.skip_invalid), "
                                                        "listed in data_report.json.")
    corpus: str = Field(description="data.corpus: per_question, shared or the corpus file.")
    corpus_size: NonNegativeInt | None = Field(description="Passages in the corpus; null for per_question.")
    corpus_fingerprint: str | None = Field(description="The corpus's content fingerprint; null for per_question.")
    retriever: str = Field(description="data.retriever: bm25 or dense.")
    index: Literal["built", "loaded"] | None = Field(description="Whether the retrieval index was built or loaded "
                                                                 "from the index directory; null when nothing was "
                                                                 "retrieved from a corpus.")
    index_dir: str | None = Field(description="The index directory; null for per_question.")
    k1: int = Field(ge=1, description="Candidates retrieved per question (data.k1).")
    empty_queries: NonNegativeInt = Field(description="Questions with no indexed word (their candidates are in "
                                                      "corpus order).")
    questions_per_second: float | None = Field(ge=0, description="Retrieval throughput of this run; null when it "
                                                                 "retrieved nothing.")
    supporting_recall: Fraction | None = Field(description="Mean share of each question's gold passages among its "
                                                           "candidates (4 decimals), over the questions with gold "
                                                           "passages; null when none has any. Written as "
                                                           "supporting_recall@<k1>.")
    with_gold: NonNegativeInt | None = Field(default=None, description="Questions with at least one gold passage "
                                                                       "id (label P/R/F1, gold_support and "
                                                                       "Coverage@K need them); null in runs made "
                                                                       "before it was counted.")
    with_oracle_steps: NonNegativeInt | None = Field(default=None, description="Questions with oracle steps "
                                                                               "(teacher.steps: oracle needs "
                                                                               "them); null in runs made before "
                                                                               "it was counted.")
    seconds: dict[str, float] = Field(description="Seconds per phase (questions, corpus, index, retrieve).")
    peak_rss_mb: float | None = Field(description="Peak resident memory of the process, MiB; null where it "
                                                  "cannot be read.")
    candidates: str = Field(description="The candidates.jsonl written.")
    hub: HubSummary | None = Field(default=None, description="The Hub configuration and split read; absent for "
                                                             "a local file.")

    @model_validator(mode="before")
    @classmethod
    def _recall_at_k1(cls, data: Any) -> Any:
        """``supporting_recall@<k1>`` as written -> ``supporting_recall``."""
        if isinstance(data, dict) and "supporting_recall" not in data:
            keys = [k for k in data if isinstance(k, str) and k.startswith("supporting_recall@")]
            if len(keys) == 1:
                data = {("supporting_recall" if k == keys[0] else k): v for k, v in data.items()}
        return data

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The summary as the data stage has always written it: ``supporting_recall@<k1>`` in its place."""
        return {(f"supporting_recall@{self.k1}" if k == "supporting_recall" else k): v
                for k, v in super().to_json_dict().items()}


# ---- eval and select: the generation cache, bring-your-own selection, the select and evaluate stages' summaries


class GenerationRecord(_Written):
    """One line of run_dir/eval/generations.jsonl: the generator's answer to one distinct prompt (evaluate stage's
    cache, `purecover.eval.generation_cache.GenerationCache`; a rerun generates only the prompts missing here)."""

    key: str = Field(min_length=1, description="The prompt's cache key: 24 hex chars of sha256 over generator, "
                                               "max_new_tokens and prompt text (`prompt_key`).")
    prediction: str = Field(description="The generated answer, stripped.")
    prompt_tokens: NonNegativeInt = Field(description="Tokens of the prompt.")
    completion_tokens: NonNegativeInt = Field(description="Tokens of the generated answer.")


class SelectInputRecord(_Written):
    """One question of a bring-your-own ``purecover select --input`` file, as read (`purecover.select.byo`):
    every doc has its id (the 1-based position when the file gives none) and a title ('' when none)."""

    qid: str = Field(min_length=1, description="The question's id (an integer in the file is read as text).")
    question: str = Field(min_length=1, description="The question text.")
    docs: list[CandidateDoc] = Field(description="The candidates in retrieval order (best first), at most the "
                                                 "selector's k1.")


class SelectSummary(StageSummary):
    """The select stage's summary (``select.run.json``; `purecover.select.job.summarize_selections`)."""

    questions: NonNegativeInt = Field(description="Questions selected for (one selections.jsonl record each).")
    written: NonNegativeInt = Field(description="Records written by this run.")
    already_done: NonNegativeInt = Field(description="Records found already written (a resumed run).")
    repaired_lines: NonNegativeInt = Field(description="Torn last lines cut off before resuming.")
    no_candidates: NonNegativeInt = Field(description="Questions without candidates (an empty selection).")
    mean_selected: float | None = Field(description="Mean number of passages kept per question (4 decimals); "
                                                    "null without questions.")
    questions_per_second: float | None = Field(description="Selection throughput of this run, without loading the "
                                                           "selector; null when nothing was written.")
    backend: str = Field(description="The selector backend: hf or vllm.")
    selector: str = Field(description="The exported selector directory used.")
    tau3: float = Field(description="Its threshold on the identifier logits (selector_config.json).")
    k_max: int | None = Field(description="Its most passages kept; null for no limit.")
    min_select: NonNegativeInt = Field(description="Its fewest passages kept.")
    selections: str = Field(description="The selections file written.")
    vllm_read: dict[str, str] | None = Field(
        default=None, description="vLLM backend only: how the identifier scores were read (read mode, logprobs "
                                  "mode, score space, vLLM version, reason); absent for hf.")

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = StageSummary.WRITTEN_WHEN_SET | {"vllm_read"}


class ByoSelectSummary(SelectSummary):
    """The summary of a bring-your-own ``purecover select --selector DIR --input FILE --out OUT`` (printed, and
    stored in ``OUT.run.json``)."""

    input: str = Field(description="The input file.")
    trec: str | None = Field(description="The TREC run file written (--trec); null without one.")
    trec_lines: NonNegativeInt = Field(description="Lines of the TREC run file (0 without one).")
    questions_truncated: NonNegativeInt = Field(description="Questions cut to max_question_tokens among those this "
                                                            "command selected for (0 when all were done).")
    max_question_tokens: int = Field(ge=1, description="The selector's question length limit, in tokens.")


class ByoSelectRun(_Written):
    """``OUT.run.json`` beside a bring-your-own selection: what made OUT (a rerun with another selector or input
    is refused) and, once complete, the command's summary."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"finished", "summary"})

    selector: str = Field(description="The selector directory, as given.")
    selector_fingerprint: str = Field(description="Its fingerprint: config and weight file names and sizes.")
    input: str = Field(description="The input file, as given.")
    input_sha256: str = Field(description="sha256 of the input file's bytes (hex).")
    status: Literal["running", "complete"] = Field(description="running, then complete.")
    started: str = Field(description="When the command started (UTC, ISO 8601, seconds).")
    finished: str | None = Field(default=None, description="When it finished (UTC, ISO 8601, seconds).")
    summary: ByoSelectSummary | None = Field(default=None, description="The command's summary, once complete.")


class EvaluateSummary(StageSummary):
    """The evaluate stage's summary (``evaluate.run.json``). Besides its fields it holds one ``em@K`` key (K the
    report's main budget, eval.table_budget or the largest budget), written after ``prompts_per_second``: the mean
    EM of every method at that budget (`em_at_table_budget`)."""

    __pydantic_extra__: dict[str, dict[str, float | None]] = Field(init=False)

    questions: NonNegativeInt = Field(description="Questions every method answered.")
    methods: list[str] = Field(description="The methods evaluated, by name (eval.methods).")
    budgets: list[Annotated[int, Field(ge=1)]] = Field(description="The budgets K, increasing.")
    prompts: NonNegativeInt = Field(description="Distinct generator prompts over every method and budget.")
    generated: NonNegativeInt = Field(description="Prompts generated by this run (the others were cached).")
    cached: NonNegativeInt = Field(description="Prompts found in the generation cache.")
    repaired_lines: NonNegativeInt = Field(description="Torn last lines cut off the generation cache.")
    prompts_per_second: float | None = Field(description="Generation throughput; null when nothing was generated.")
    report: str = Field(description="The report.md written.")
    metrics: str = Field(description="The metrics.json written.")
    plots: list[str] = Field(description="The plots written.")

    def em_at_table_budget(self) -> tuple[str, dict[str, float | None]] | None:
        """(``em@K``, method -> mean EM) of the summary; None when it has none (a summary of another version)."""
        extra = self.__pydantic_extra__ or {}
        return next(((k, v) for k, v in extra.items() if k.startswith("em@")), None)

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The summary as written: the ``em@K`` key right after ``prompts_per_second``, where the stage always
        wrote it (the other unknown keys of a summary read back stay last)."""
        data = super().to_json_dict()
        keys = [k for k in data if not k.startswith("em@")]
        at = keys.index("prompts_per_second") + 1
        keys[at:at] = [k for k in data if k.startswith("em@")]
        return {k: data[k] for k in keys}


# ---- train, models and publish: the student checkpoint's metadata, the train and export stages' summaries,
# the model card's and the published dataset card's front matter, the publish marker


class TrainSummary(StageSummary):
    """The train stage's summary (``train.run.json``, and ``summary`` of the student metadata;
    `purecover.train.run.train_student`)."""

    train_questions: NonNegativeInt = Field(description="Questions trained on.")
    train_examples: NonNegativeInt | None = Field(
        default=None, description="Training examples: one per candidate order of each training question "
                                  "(student.candidate_shuffles, at least one); null in summaries written before.")
    candidate_shuffles: NonNegativeInt | None = Field(
        default=None, description="Seeded random candidate orders per training question (0: retrieval order "
                                  "only); null in summaries written before the setting existed (retrieval order).")
    calib_questions: NonNegativeInt = Field(description="Questions of the calibration split (early stopping, τ3).")
    test_questions: NonNegativeInt = Field(description="Questions of the test split (used for neither training nor "
                                                       "τ3).")
    labels: NonNegativeInt = Field(description="Lines of labels.jsonl read.")
    used: NonNegativeInt = Field(description="Labels that became training examples.")
    skipped_error: NonNegativeInt = Field(description="Labels skipped because their status is error.")
    global_step: NonNegativeInt = Field(description="Optimizer steps taken, resumes included.")
    lm_reduction: str = Field(description="How L_LM is reduced per question (student.lm_reduction).")
    train_loss: float = Field(description="Mean training loss per step over the whole run, resumes included "
                                          "(6 decimals).")
    train_loss_steps: NonNegativeInt = Field(description="Steps whose loss is known (the steps train_loss is over).")
    train_loss_this_run: float = Field(description="The Trainer's own mean over the last train() call "
                                                   "(6 decimals).")
    resumes: list[int] = Field(description="The steps training resumed at, in order.")
    resumed_from: str | None = Field(description="The checkpoint the last call resumed from; null for a fresh "
                                                 "start.")
    tau3: float = Field(description="Threshold on the first-token identifier logits (6 decimals).")
    tau3_logprob: float = Field(description="The same threshold on the identifier log-softmax (6 decimals).")
    calib_subset_f1: float | None = Field(description="Mean subset F1 at tau3 on the questions it was chosen on "
                                                      "(4 decimals).")
    calib_subset_f1_logprob: float | None = Field(description="The same at tau3_logprob (4 decimals).")
    test_subset_f1: float | None = Field(description="Mean subset F1 at tau3 on the test split (4 decimals); null "
                                                     "without a test split.")
    test_subset_f1_logprob: float | None = Field(description="The same at tau3_logprob; null without a test split.")
    threshold_split: str = Field(description="Where tau3 was chosen: calib, or the training questions when there "
                                             "is no calibration split.")
    final: str = Field(description="The checkpoint directory written (run_dir/checkpoints/final).")


class StudentLora(_Written):
    """The LoRA settings a student was trained with (the recipe's ``student.lora``)."""

    enabled: bool = Field(description="Whether a LoRA adapter was trained (always true here).")
    r: int = Field(ge=1, description="The LoRA rank.")
    alpha: int = Field(description="LoRA scaling alpha.")
    dropout: float = Field(description="Dropout on the LoRA path.")
    target_modules: str | list[str] = Field(description="Modules that got an adapter: all-linear or module names.")


class StudentLosses(_Written):
    """The loss settings a student was trained with (the recipe's ``student`` section).

    ``cl_weight`` and ``lm_reduction`` are absent in checkpoints of early versions, which trained with their
    defaults (1.0, token_mean); the ``reply_order`` and ``negatives`` settings likewise (best, all)."""

    lm_weight: float = Field(description="Weight of L_LM.")
    cl_weight: float = Field(default=1.0, description="Weight of L_CL.")
    m_exact: int = Field(ge=1, description="Subsets up to this size are scored in every ordering.")
    lm_reduction: str = Field(default="token_mean", description="L_LM per question: token_mean or sequence_sum.")
    reply_order: str = Field(default="best", description="The reply L_LM trained on: best or target.")
    negatives: str = Field(default="all", description="L_CL's negatives: all or sampled.")
    negative_sample: int = Field(default=5, ge=1, description="Negatives drawn per question and step (sampled).")
    negative_pool: int = Field(default=10, ge=1, description="The last candidates they were drawn from (sampled).")


class StudentMeta(_Written):
    """``checkpoints/final/purecover_student.json``: what the export needs besides the weights (identifiers, K1,
    τ3, prompt template) and what the model card reports (train stage; read by export and the model card).

    Fields after ``tau3`` other than ``k_max``, ``min_select``, ``max_passage_tokens`` and ``prompt_template``
    may be absent in checkpoints of early versions (read as null, or empty for ``log_history``)."""

    base_model: str = Field(min_length=1, description="Hub id or path of the model the student was trained from.")
    lora: StudentLora | None = Field(default=None, description="Its LoRA settings; null when all weights were "
                                                               "trained.")
    identifiers: IdentifiersRecord = Field(description="The identifier scheme (name, separator, labels).")
    k1: int = Field(ge=1, description="The most candidates one prompt holds.")
    tau3: float = Field(description="Threshold on the first-token identifier logits (not rounded).")
    tau3_logprob: float | None = Field(default=None, description="The same threshold on the identifier "
                                                                 "log-softmax (not rounded).")
    calib_subset_f1: float | None = Field(default=None, description="Mean subset F1 at tau3 on the questions it "
                                                                    "was chosen on (4 decimals).")
    calib_subset_f1_logprob: float | None = Field(default=None, description="The same at tau3_logprob.")
    test_subset_f1: float | None = Field(default=None, description="Mean subset F1 at tau3 on the test split "
                                                                   "(4 decimals); null without one.")
    test_subset_f1_logprob: float | None = Field(default=None, description="The same at tau3_logprob.")
    k_max: int | None = Field(description="At most this many passages are kept; null for no limit.")
    min_select: int = Field(ge=0, description="At least this many passages are kept.")
    max_passage_tokens: int = Field(ge=1, description="Each passage was cut to this many tokens in the prompt.")
    prompt_template: dict[str, str] = Field(description="What defines the selection prompt (system, instructions, "
                                                        "layout, hash).")
    losses: StudentLosses | None = Field(default=None, description="The loss settings it was trained with.")
    log_history: list[dict[str, JsonValue]] = Field(default_factory=list, description="The Trainer's log records "
                                                                                      "(state.log_history), as "
                                                                                      "logged.")
    config_hash: str | None = Field(default=None, description="The train stage's config hash (a rerun with another "
                                                              "configuration is refused).")
    summary: TrainSummary | StageSummary | None = Field(
        default=None, description="The train stage's summary (a summary of an early version, which lacks some of "
                                  "its fields, reads as a plain StageSummary).")


class ExportSummary(StageSummary):
    """The export stage's summary (``export.run.json``; `purecover.train.export.write_selector`)."""

    checkpoint: str = Field(description="The checkpoint exported (run_dir/checkpoints/final).")
    selector: str = Field(description="The selector directory written (run_dir/selector).")
    format: Literal["adapter", "merged", "full"] = Field(description="adapter (export.merge false), merged (LoRA "
                                                                     "merged into the base) or full (a fully "
                                                                     "trained model).")
    base_model: str = Field(description="The model the selector was fine-tuned from.")
    k1: int = Field(ge=1, description="The most candidates one prompt may hold.")
    tau3: float = Field(description="Its threshold on the first-token identifier logits.")
    tau3_logprob: float | None = Field(description="Its threshold on the identifier log-softmax; null for a "
                                                   "checkpoint without one.")
    files: list[str] = Field(description="The files of the selector directory, sorted.")
    size_bytes: NonNegativeInt = Field(description="Their total size.")
    seconds: float = Field(ge=0, description="How long the export took.")


class ModelCardFront(_Written):
    """The YAML front matter of the exported selector's README.md (`purecover.train.model_card`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"license_name", "license_link", "datasets"})

    base_model: str = Field(description="The base model.")
    library_name: Literal["peft", "transformers"] = Field(description="peft for an adapter, else transformers.")
    license: str = Field(description="export.license, else the base model's licence, else other.")
    license_name: str | None = Field(default=None, description="The base model's licence name (licence other).")
    license_link: str | None = Field(default=None, description="The base model's licence link (licence other).")
    datasets: list[str] | None = Field(default=None, description="The training data's Hub dataset, when it is one.")
    tags: list[str] = Field(description="Hub tags: purecover's and the dataset's name.")
    pipeline_tag: str = Field(description="The Hub pipeline tag (text-generation).")


class HubDataFiles(_Written):
    """One split's files in a Hub dataset card's ``configs``."""

    split: str = Field(description="The split's name.")
    path: str = Field(description="Its files, a glob relative to the repository.")


class HubDatasetConfig(_Written):
    """One configuration in a Hub dataset card's ``configs``."""

    config_name: str = Field(description="The configuration's name.")
    data_files: list[HubDataFiles] = Field(description="Its splits and their files.")


class DatasetCardFront(_Written):
    """The YAML front matter of a published dataset's README.md (`purecover.publish.dataset_card`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"source_datasets"})

    license: str = Field(description="The source dataset's licence when known, else other.")
    pretty_name: str = Field(description="purecover <what> (<dataset>).")
    tags: list[str] = Field(description="Hub tags: purecover's and the dataset's name.")
    size_categories: list[str] = Field(description="The Hub size category of the row count.")
    source_datasets: list[str] | None = Field(default=None, description="The source Hub dataset, when it is one.")
    configs: list[HubDatasetConfig] = Field(description="The data files of the default configuration.")


class PublishMarker(_Written):
    """``purecover_publish.json`` inside a ``publish --to-disk`` output: what it is and every file it holds (only
    such a folder, of the same ``--what``, is replaced by a later publish)."""

    what: Literal["labels", "selections", "candidates"] = Field(description="The run file published.")
    run_dir: str = Field(description="The run directory it was published from (resolved).")
    rows: NonNegativeInt = Field(description="Rows of the dataset.")
    files: list[str] = Field(description="Every entry of the folder but this file (relative; folders end in /).")
    published: str = Field(description="When (UTC, ISO 8601, seconds).")
    purecover_version: str = Field(description="The purecover version that published it.")


# ---- teacher: the label stage's shard lines, the calibrate and label stages' summaries, label-report, tune


class InContextBiasRow(_Written):
    """One line of run_dir/bias_in_context.jsonl: one question's in-context calibration values
    (`purecover.teacher.in_context_calibration`)."""

    row: str = Field(description="The key the values were measured under and the qid, 'KEY:QID'.")
    qid: str = Field(description="The question's id.")
    bias: list[float | None] = Field(description="Per position k, the mean attention of the steps to the generic "
                                                 "paragraph put at k; null where the question has no k-th document.")


class ReplyShardRecord(_Written):
    """One line of run_dir/label_shards/replies.<r>-of-<w>.jsonl: the teacher's reply to one question."""

    qid: str = Field(description="The question's id.")
    reply: str = Field(description="The teacher's reasoning reply, as generated.")


class LancerShardRecord(_Written):
    """One line of run_dir/label_shards/lancer.<r>-of-<w>.jsonl: LANCER's sub-questions and ratings of one
    question."""

    qid: str = Field(description="The question's id.")
    subquestions: list[str] = Field(description="The sub-questions written (padded with the question).")
    subquestion_reason: str | None = Field(description="Why they were padded; null when they were not.")
    ratings: list[list[int | float]] = Field(description="Ratings 0-5, one row per candidate, one column per "
                                                         "sub-question (floats: expected ratings).")


class LayersRead(_Written):
    """Which attention layers produced a stage's attention (`purecover.teacher.layers.LayerPlan.record`):
    ``teacher.layers`` resolved for the teacher model (docs/guides/teacher.md#which-layers-are-read)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"beyond_window"})

    setting: Layers = Field(description="teacher.layers as given: full_attention, all, or layer indices.")
    model_type: str = Field(description="The teacher config's model_type (e.g. gemma3_text).")
    num_layers: int = Field(ge=1, description="The teacher's decoder layers.")
    read: list[int] = Field(description="The layers averaged, sorted indices.")
    sliding: list[int] = Field(description="Those of them whose attention is limited to a window (empty with "
                                           "full_attention).")
    window: int | None = Field(default=None, description="The shortest window among `sliding`, in tokens; null "
                                                         "when every layer read sees the whole sequence.")
    beyond_window: int | None = Field(default=None, ge=0, description="Sequences (the questions; the "
                                                                      "calibration sequence) whose reasoning starts "
                                                                      "at least `window` tokens after their first "
                                                                      "document (label stage: where the reply "
                                                                      "starts); written only when `sliding` is not "
                                                                      "empty.")


class InContextCounts(_Written):
    """What an in-context calibration measured (`purecover.teacher.in_context_calibration`)."""

    questions: NonNegativeInt = Field(description="Questions the bias is averaged over.")
    sequences: NonNegativeInt = Field(description="Capture sequences run by this call (questions x positions).")
    resumed: NonNegativeInt = Field(description="Questions taken from bias_in_context.jsonl of an earlier call.")
    fallback: NonNegativeInt = Field(description="Sequences whose steps fell back (unparsable reply, no oracle "
                                                 "steps).")
    spread: Stored = Field(description="Mean over positions of the standard deviation of the values across "
                                       "questions.")


class CalibrateSummary(StageSummary):
    """The calibrate stage's summary (`purecover.teacher.calibrate_stage.write_bias`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"status", "layers", "in_context"})

    bias_file: str = Field(description="The bias.json written.")
    k1: int = Field(description="Positions of the bias (data.k1).")
    seconds: float = Field(description="Seconds the bias computation took.")
    bias_mean: Stored = Field(description="Mean of Bias(k) over the positions.")
    bias_first_last: list[Stored] = Field(description="Bias(1) and Bias(K1).")
    doc_tokens: dict[str, int] = Field(description="min, median and max of the dummy documents' target lengths.")
    doc_tokens_measured: dict[str, int] = Field(description="min and max of their lengths in the built sequence.")
    doc_tokens_source: LengthSource = Field(description="Where the target lengths come from.")
    keys: BiasKeys = Field(description="The calibration keys written to bias.json.")
    layers: LayersRead | None = Field(default=None, description="The attention layers the bias was computed from; "
                                                                "absent in summaries of early versions.")
    in_context: InContextCounts | None = Field(default=None, description="The in-context procedure's counts; "
                                                                         "absent for the fixed procedure.")


class LabelDiagnostics(_Written):
    """Health figures of a labels file (`purecover.teacher.diagnostics.label_diagnostics`); means are None
    when no record defines them."""

    questions: NonNegativeInt = Field(description="Records of the labels file.")
    ok: NonNegativeInt = Field(description="Records with status ok.")
    fallback: NonNegativeInt = Field(description="Records with status fallback.")
    error: NonNegativeInt = Field(description="Records with status error.")
    budget: NonNegativeInt = Field(description="The K of the histograms (teacher.budget, else the largest |S|).")
    size_histogram: dict[str, int] = Field(description="'0'..'budget' -> non-error questions with that |S|.")
    fallback_size_histogram: dict[str, int] = Field(description="The same over fallback records only.")
    mean_size: float | None = Field(description="Mean |S| over non-error records.")
    fallback_rate: float | None = Field(description="Fallback records / questions.")
    fallback_reasons: dict[str, int] = Field(description="Fallback code -> records listing it ('unknown': a "
                                                         "fallback record without codes).")
    first_step_stop_rate: float | None = Field(description="Share of non-error records that stopped after the "
                                                           "first pick, among those recording a stop.")
    stop_counts: dict[str, int] = Field(description="Stop reason -> non-error records ('unknown' when absent).")
    e_entropy: float | None = Field(description="Mean entropy of e (normalised to sum 1), in nats.")
    e_entropy_normalised: float | None = Field(description="The same divided by log N (1 = uniform).")
    max_e: float | None = Field(description="Mean of the largest normalised step weight.")
    max_W: float | None = Field(description="Mean over questions of the mean over steps of max over documents "
                                            "of W.")


class LabelSummary(StageSummary):
    """The label stage's summary (`purecover.teacher.job.write_labels`). Rank 0 (the only process without a
    launcher) returns ``processes``, the `LabelDiagnostics` figures of labels.jsonl and the rest; another rank
    of a multi-process run returns only ``rank``, ``world``, ``shard_questions`` and ``written``."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"status", "rank", "world", "shard_questions", "written", "processes", *LabelDiagnostics.model_fields,
         "written_by_rank0", "questions_per_second_rank0", "labels", "estimation", "warning", "layers"})

    rank: int | None = Field(default=None, description="This process's rank (ranks other than 0).")
    world: int | None = Field(default=None, description="Processes of the run (ranks other than 0).")
    shard_questions: int | None = Field(default=None, description="Questions of this rank's shard.")
    written: int | None = Field(default=None, description="Records this rank wrote in this invocation.")
    processes: int | None = Field(default=None, description="Processes of the run.")
    questions: int | None = Field(default=None, description="Records of labels.jsonl.")
    ok: int | None = Field(default=None, description="Records with status ok.")
    fallback: int | None = Field(default=None, description="Records with status fallback.")
    error: int | None = Field(default=None, description="Records with status error.")
    budget: int | None = Field(default=None, description="The K of the histograms.")
    size_histogram: dict[str, int] | None = Field(default=None, description="'0'..'budget' -> non-error "
                                                                            "questions with that |S|.")
    fallback_size_histogram: dict[str, int] | None = Field(default=None, description="The same over fallback "
                                                                                     "records only.")
    mean_size: float | None = Field(default=None, description="Mean |S| over non-error records.")
    fallback_rate: float | None = Field(default=None, description="Fallback records / questions.")
    fallback_reasons: dict[str, int] | None = Field(default=None, description="Fallback code -> records.")
    first_step_stop_rate: float | None = Field(default=None, description="Share of first-step stops.")
    stop_counts: dict[str, int] | None = Field(default=None, description="Stop reason -> non-error records.")
    e_entropy: float | None = Field(default=None, description="Mean entropy of e, in nats.")
    e_entropy_normalised: float | None = Field(default=None, description="The same divided by log N.")
    max_e: float | None = Field(default=None, description="Mean of the largest normalised step weight.")
    max_W: float | None = Field(default=None, description="Mean of the per-step largest coverage.")
    written_by_rank0: int | None = Field(default=None, description="Records rank 0 wrote in this invocation.")
    questions_per_second_rank0: float | None = Field(default=None, description="Its labelling speed; null when "
                                                                               "it wrote nothing.")
    labels: str | None = Field(default=None, description="The labels.jsonl written.")
    estimation: EstimationSettings | None = Field(default=None, description="The resolved estimation parameters.")
    warning: str | None = Field(default=None, description="The fallback warning; null when the rate is within "
                                                          "teacher.fallback_warn.")
    layers: LayersRead | None = Field(default=None, description="The attention layers the labels were captured "
                                                                "from (rank 0, attention estimators only).")


class PrecisionRecall(_Written):
    """Mean precision, recall and F1 of chosen passages against the gold ones, and the mean size chosen."""

    precision: float | None = Field(description="Mean |C ∩ G| / |C| (0 for an empty C).")
    recall: float | None = Field(description="Mean |C ∩ G| / |G|.")
    f1: float | None = Field(description="Mean F1 (0 without a hit).")
    mean_size: float | None = Field(description="Mean |C| in passages.")


class GoldComparison(_Written):
    """Selected passages against the gold passages, next to plain retrieval
    (`purecover.teacher.diagnostics.gold_comparison`)."""

    questions: NonNegativeInt = Field(description="Non-error labels whose candidates have gold passages.")
    k: int = Field(ge=1, description="The K of retrieval's top-K.")
    labels: PrecisionRecall = Field(description="The teacher's selections.")
    retrieval_top_size: PrecisionRecall = Field(description="Retrieval's first |S| candidates per question.")
    retrieval_top_2: PrecisionRecall = Field(description="Retrieval's first 2 candidates.")
    retrieval_top_k: PrecisionRecall = Field(description="Retrieval's first K candidates.")


class LabelReport(_Written):
    """RUN_DIR/label_report/report.json (`purecover label-report`)."""

    run_dir: str = Field(description="The run directory reported on.")
    labels_file: str = Field(description="Its labels.jsonl.")
    candidates_file: str = Field(description="Its candidates.jsonl.")
    report_file: str = Field(description="This file (report.json).")
    k: int = Field(ge=1, description="The K of retrieval's top-K (default: the labels' budget).")
    fallback_warn: float = Field(description="The warning threshold (the run's teacher.fallback_warn, else 0.1).")
    warning: str | None = Field(description="The fallback warning; null within the threshold.")
    diagnostics: LabelDiagnostics = Field(description="The health figures of labels.jsonl.")
    comparison: GoldComparison = Field(description="Labels and retrieval against the gold passages.")
    figures: dict[str, str] = Field(description="Plot name -> PNG path.")


GridValue = bool | int | float | str  # a `purecover tune` grid value (a teacher key's float, int, bool or scale)


class SplitFigures(TypedDict):
    """Label quality of one setting on one split (`purecover.teacher.tune.evaluate_setting`): means over the
    questions. A TypedDict: benchmarks build and read these rows as plain dicts."""

    precision: float
    recall: float
    f1: float
    mean_size: float
    fallback_rate: float
    first_step_stop_rate: float
    top_s_precision: float


class TuneRow(TypedDict):
    """One grid point of tune.json's ``rows``: its keys, the resolved parameters and both splits' figures
    (``params`` is left out by callers that only choose among rows, as benchmarks/oracle_labels.py)."""

    setting: dict[str, GridValue]
    params: NotRequired[EstimationSettings]
    tune: SplitFigures
    heldout: SplitFigures


class TuneChosen(TuneRow):
    """tune.json's ``chosen``: the chosen row, its index and the setting as ``--set`` arguments."""

    index: int
    overrides: str


class TuneQuestionCounts(_Written):
    """How the questions of a tune run split."""

    with_gold: NonNegativeInt = Field(description="Questions whose candidates carry gold passages.")
    tune: NonNegativeInt = Field(description="Of those, the tuning questions (the first tune_fraction).")
    heldout: NonNegativeInt = Field(description="The held-out rest.")
    without_gold: NonNegativeInt = Field(description="Questions left out (no gold passages).")
    first_tune_qids: list[str] = Field(description="The first tuning questions' ids.")


class TuneRecipeSetting(_Written):
    """The recipe's own setting on both splits."""

    params: EstimationSettings = Field(description="Its resolved parameters.")
    tune: SplitFigures = Field(description="Figures on the tuning questions.")
    heldout: SplitFigures = Field(description="Figures on the held-out questions.")


class TuneResult(_Written):
    """run_dir/tune/tune.json (`purecover tune`): every grid point on the tuning and held-out questions and the
    chosen one."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"plots"})

    command: str = Field(description="purecover tune.")
    created: str = Field(description="When it started (UTC, ISO 8601, seconds).")
    recipe: dict[str, JsonValue] = Field(description="The resolved recipe.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")
    grid: dict[str, list[GridValue]] = Field(description="The values tried per teacher key.")
    tune_fraction: float = Field(description="Share of the questions with gold passages that choose.")
    max_fallback: float = Field(description="Largest tuning fallback rate a chosen point may have.")
    questions: TuneQuestionCounts = Field(description="How the questions split.")
    recipe_setting: TuneRecipeSetting = Field(description="The recipe's own setting on both splits.")
    retrieval: dict[str, dict[str, dict[str, float]]] = Field(
        description="Per split, retrieval's top-k precision, recall and F1 (k = 2 and the budget).")
    chosen: TuneChosen = Field(description="The chosen grid point.")
    rows: list[TuneRow] = Field(description="Every grid point, in grid order.")
    plots: list[str] | None = Field(default=None, description="The plots written (absent without plots).")

