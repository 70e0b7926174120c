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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["BiasDocTokens", "BiasFile", "BudgetResult", "CandidateDoc", "CandidateRecord", "CoveragePurity",
           "CruxCoverage", "EvaluationStatistics", "IdentifiersRecord", "LabelRecord", "LineRecordError", "MetricsFile",
           "PairedTest", "PredictionRecord", "QuestionSample", "RecordError", "SelectionRecord", "SelectorConfig",
           "StageManifest", "SupportingCoveragePurity", "load_json_record", "validate_line", "validate_record"]

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

    def to_json_dict(self) -> dict[str, Any]:
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

    def to_json_dict(self) -> dict[str, Any]:
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
    meta: dict[str, Any] = Field(default_factory=dict, description="Dataset-specific extras (type, level, ...).")


# --------------------------------------------------------------------------- labels.jsonl

LabelStatus = Literal["ok", "fallback", "error"]


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
    teacher: dict[str, Any] = Field(description="The teacher configuration the label was made with, and the "
                                                "resolved estimation parameters.")
    attention: dict[str, Any] | None = Field(default=None, description="The captured segment attention (attention "
                                                                       "estimator), at stored precision.")
    similarity: dict[str, Any] | None = Field(default=None, description="The cosine similarities (embedding "
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
               teacher: dict[str, Any]) -> LabelRecord:
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

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"ci", "vs_retrieval"})

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
    ``purecover report``). Keys added after the first version (``question_sample``, ``statistics``) read as
    null when absent."""

    dataset: str = Field(description="The evaluation questions' dataset ('a+b' for several).")
    run_dir: str = Field(description="The run directory evaluated.")
    questions: NonNegativeInt = Field(description="How many questions every method answered.")
    question_source: str = Field(description="Where the questions come from, in words.")
    question_sample: QuestionSample | None = Field(default=None, description="The seeded sample drawn "
                                                                             "(eval.sample); null without one.")
    generator: str = Field(description="The answer generator (eval.generator).")
    backend: str = Field(description="Its generation backend: hf or vllm.")
    max_new_tokens: int = Field(ge=1, description="At most this many tokens were generated per answer.")
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
    recipe: dict[str, Any] = Field(description="The resolved recipe the evaluation ran with.")


# --------------------------------------------------------------------------- bias.json


class BiasDocTokens(_Written):
    """The dummy documents' token lengths of a calibration."""

    target: list[int] = Field(description="The length each dummy document was cut to, per position.")
    measured: list[int] = Field(description="Its length inside the built teacher sequence, per position.")
    source: dict[str, Any] = Field(description="Where the target lengths come from: the setting, and for "
                                               "'candidates' the file, record count and fingerprint.")


class BiasFile(_Written):
    """run_dir/bias.json: the teacher's per-position attention bias (calibrate stage; read by label).

    Only ``keys`` and ``bias`` are needed to read a file; the rest is absent in files of early versions.
    """

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"n_dummy_steps", "prompt", "doc_tokens", "created", "versions"})

    keys: dict[str, Any] = Field(description="What the bias is valid for (model, weights fingerprint, k1, "
                                             "template, layers, doc_tokens); labelling checks each against the run.")
    bias: list[float] = Field(min_length=1, description="Bias(k): mean attention per token pair from the dummy "
                                                        "steps to dummy document k, one value per position.")
    n_dummy_steps: int | None = Field(default=None, ge=1, description="How many dummy reasoning steps were used.")
    prompt: dict[str, str | None] | None = Field(default=None, description="The reasoning prompt's wording (file "
                                                                           "name and hashes) it was computed with.")
    doc_tokens: BiasDocTokens | None = Field(default=None, description="The dummy documents' token lengths.")
    created: str | None = Field(default=None, description="When it was computed (UTC, ISO 8601).")
    versions: dict[str, str] | None = Field(default=None, description="Versions of Python and the packages used.")


# --------------------------------------------------------------------------- <stage>.run.json


class StageManifest(_Written):
    """run_dir/``<stage>.run.json``: a stage's state (``summary.status``: running or complete), what made
    its outputs and, once complete, what its outputs and inputs held."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"outputs", "inputs"})

    stage: str = Field(description="The stage's name (data, calibrate, label, ...).")
    config_hash: str = Field(description="The hash of the recipe sections the stage depends on (and its extras).")
    started: str = Field(description="When the stage started (UTC, ISO 8601, seconds).")
    finished: str = Field(description="When this file was written (UTC, ISO 8601, seconds).")
    command: list[str] = Field(description="The command line of the process that wrote it.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")
    summary: dict[str, Any] = Field(description="The stage's summary; status is running, then complete.")
    outputs: dict[str, dict[str, Any] | None] | None = Field(
        default=None, description="Once complete: what each output held (lines, bytes or files, and hashes), by "
                                  "its path relative to the run directory; null for a missing one.")
    inputs: dict[str, dict[str, Any] | None] | None = Field(
        default=None, description="Once complete: what each input held when the stage ran, by name.")
    recipe: dict[str, Any] = Field(description="The resolved recipe the stage ran with.")
