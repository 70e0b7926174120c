"""run_dir/bias.json, the teacher's per-position attention bias, and the calibrate stage's other files: its
summary and the in-context procedure's rows (bias_in_context.jsonl) and counts."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import NonNegativeInt, Stored, _Written
from .labels import Layers, LayersRead, PromptWording
from .manifests import StageSummary


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


class InContextBiasRow(_Written):
    """One line of run_dir/bias_in_context.jsonl: one question's in-context calibration values
    (`purecover.teacher.in_context_calibration`)."""

    row: str = Field(description="The key the values were measured under and the qid, 'KEY:QID'.")
    qid: str = Field(description="The question's id.")
    bias: list[float | None] = Field(description="Per position k, the mean attention of the steps to the generic "
                                                 "paragraph put at k; null where the question has no k-th document.")


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
