"""The label stage's other files: its shard lines (label_shards/), its summary and the labels' health figures,
``purecover label-report``'s report.json and ``purecover tune``'s tune.json."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, JsonValue
from typing_extensions import NotRequired, TypedDict

from .base import NonNegativeInt, _Written
from .labels import EstimationSettings, LayersRead
from .manifests import StageSummary


class ReplyShardRecord(_Written):
    """One line of run_dir/label_shards/replies.<r>-of-<w>.jsonl: the teacher's reply to one question."""

    qid: str = Field(description="The question's id.")
    reply: str = Field(description="The teacher's reasoning reply, as generated.")
    finished: bool | None = Field(default=None, description="Whether the reply ended by itself (end of sequence or a "
                                  "closed answer line) rather than at teacher.max_new_tokens; null: not known (a "
                                  "backend that cannot tell, or a shard written before this field).")


class LancerShardRecord(_Written):
    """One line of run_dir/label_shards/lancer.<r>-of-<w>.jsonl: LANCER's sub-questions and ratings of one
    question."""

    qid: str = Field(description="The question's id.")
    subquestions: list[str] = Field(description="The sub-questions written (padded with the question).")
    subquestion_reason: str | None = Field(description="Why they were padded; null when they were not.")
    ratings: list[list[int | float]] = Field(description="Ratings 0-5, one row per candidate, one column per "
                                                         "sub-question (floats: expected ratings).")


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
    replies: NonNegativeInt = Field(0, description="Records holding a teacher reply (teacher.steps: model, or "
                                                           "auto for questions without oracle steps).")
    reply_usable_rate: float | None = Field(None, description="Share of those whose steps are the reply's own step "
                                            "lines (no reply_issue, or unclosed); None without replies.")
    reply_issues: dict[str, int] = Field(default_factory=dict, description="reply_issue -> records with it.")


class LabelSummary(StageSummary):
    """The label stage's summary (`purecover.teacher.label_stage.write_labels`). Rank 0 (the only process without a
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
    questions_per_second_rank0: float | None = Field(default=None, description="Rank 0's labelling speed, in questions per second; null when "
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


# --------------------------------------------------------------------------- tune.json


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
