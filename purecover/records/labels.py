"""labels.jsonl: the teacher's selection for one question a line, with the teacher settings it was made with
(`TeacherSettings` and its parts) and which attention layers were read (`LayersRead`, also in the calibrate
and label summaries)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from .base import NonNegativeInt, Stored, _Written, check_same_lengths

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

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"objective", "repeated_steps"})

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
    repeated_steps: Literal["drop"] | None = Field(default=None, description="drop when steps that repeat an "
                                                   "earlier one were weighted 0 (teacher.repeated_steps); absent "
                                                   "when every step counts.")


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
    steps: str | None = Field(default=None, description="teacher.steps: model, oracle or auto.")
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
        {"attention", "similarity", "reply", "reply_issue", "ratings", "subquestions"})

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
    reply: str | None = Field(default=None, description="The teacher's reply, when it wrote the steps (teacher.steps: "
                                                         "model, or auto for a question without oracle steps).")
    reply_issue: Literal["empty", "language", "copied", "no_steps", "unclosed"] | None = Field(
        default=None, description="Why the reply's parse fell back (a record with a reply; written only then): empty, "
        "language (another script than the question's), copied (the prompt's worked example copied), no_steps (no "
        "step lines), unclosed (the token limit came before an answer line; its steps are kept).")
    ratings: list[list[int | float]] | None = Field(default=None, description="LANCER ratings 0-5, one row per "
                                                                              "candidate, one column per "
                                                                              "sub-question.")
    subquestions: list[str] | None = Field(default=None, description="LANCER's sub-questions.")

    @model_validator(mode="after")
    def _one_id_and_gain_per_pick(self) -> LabelRecord:
        return check_same_lengths(self, "selected", "selected_doc_ids", "gains")

    @classmethod
    def failed(cls, qid: str, error: BaseException | str, *, bias_key: str | None,
               teacher: TeacherSettings) -> LabelRecord:
        """The record of a question that could not be labelled: an empty selection, status ``error`` and
        ``reason`` naming the exception (``Type: message``)."""
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(qid=qid, selected=[], selected_doc_ids=[], gains=[], objective=None, steps=[], answer="", e=[],
                   W=[], bias_key=bias_key, status="error", reason=reason, fallback_reasons=[], stop=None,
                   teacher=teacher)


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
