"""The evaluate stage's files: eval/predictions/<method>@<K>.jsonl, the generation cache eval/generations.jsonl,
eval/metrics.json (its ``results`` a `BudgetResult` per method and budget) and the stage's summary."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, JsonValue, model_validator

from .base import Finite, Fraction, NonNegativeInt, PositiveInt, _Written, check_same_lengths
from .manifests import StageSummary

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
        return check_same_lengths(self, "selected", "doc_ids")


class GenerationRecord(_Written):
    """One line of run_dir/eval/generations.jsonl: the generator's answer to one distinct prompt (evaluate stage's
    cache, `purecover.eval.generation_cache.GenerationCache`; a rerun generates only the prompts missing here)."""

    key: str = Field(min_length=1, description="The prompt's cache key: 24 hex chars of sha256 over generator, "
                                               "max_new_tokens and prompt text (`prompt_key`).")
    prediction: str = Field(description="The generated answer, stripped.")
    prompt_tokens: NonNegativeInt = Field(description="Tokens of the prompt.")
    completion_tokens: NonNegativeInt = Field(description="Tokens of the generated answer.")


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
    unit: Literal["passage", "title", "nugget"] = Field(
        description="What one subtopic is: a gold passage (the dataset's own paragraphs), a supporting title (a "
                    "corpus file's chunks of one article) or a nugget of a coverage collection's qrels.")


class PairedTest(_Written):
    """One method against retrieval on the same questions, for one metric (`purecover.eval.stats.paired_test`)."""

    diff: Finite = Field(description="Mean per-question difference (method - retrieval), 6 decimals.")
    low: Finite = Field(description="Lower bound of its paired bootstrap interval.")
    high: Finite = Field(description="Upper bound of its paired bootstrap interval.")
    p: Fraction = Field(description="Two-sided p-value of the paired sign-flip permutation test.")
    n: int = Field(ge=1, description="How many questions were paired.")
    p_method: Literal["exact", "monte_carlo"] = Field(description="exact (every sign vector) or monte_carlo "
                                                                  "(random sign flips).")


class BudgetResult(_Written):
    """One method at one budget K in metrics.json's ``results``: means over the evaluation questions."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"ci", "vs_retrieval", "vs_reference", "subtopics",
                                                            "judged", "select_ms"})

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
    judged: CruxCoverage | None = Field(
        default=None, description="CRUX Cov@K from a coverage collection's judge file (eval.judgments): the share of "
                                  "a topic's sub-questions some selected passage rates 3 or more; absent without one.")
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
    vs_reference: dict[str, PairedTest] | None = Field(
        default=None, description="The paired test against the reference, retrieval at the main budget "
                                  "(statistics.reference, e.g. retrieval@5), for em, f1 and acc, whatever this "
                                  "result's own K; absent for the reference itself, when it is not evaluated, and in "
                                  "files of earlier versions.")
    select_ms: float | None = Field(
        default=None, ge=0, description="Mean milliseconds per question this method spends choosing its passages, "
                                        "beyond the retrieval every method shares (0 for none, retrieval and "
                                        "gold_support; the student: the select stage's throughput; the teacher: its "
                                        "label stage's wall time per question, model loading included). Absent when "
                                        "unknown (an external file) and in files of earlier versions.")


class QuestionSample(_Written):
    """The seeded random sample of evaluation questions (eval.sample)."""

    size: NonNegativeInt = Field(description="How many questions were drawn.")
    seed: int = Field(description="The seed they were drawn with (eval.seed).")
    population: NonNegativeInt = Field(description="How many questions they were drawn from.")
    population_source: str = Field(description="Where those questions come from.")


class EvaluationStatistics(_Written):
    """How the intervals and paired tests of ``results`` were made (`purecover.eval.stats.statistics_meta`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"reference"})

    confidence: float = Field(gt=0, lt=1, description="Confidence level of the intervals, e.g. 0.95.")
    interval: str = Field(description="What the intervals are (percentile bootstrap over questions).")
    bootstrap_resamples: int = Field(ge=1, description="Bootstrap resamples per interval.")
    test: str = Field(description="The paired test against the baseline.")
    permutations: int = Field(ge=1, description="Random sign flips of the permutation test.")
    seed: int = Field(description="The seed of the resampling (the recipe's seed).")
    baseline: str | None = Field(description="The method every other is tested against (retrieval); null when it "
                                             "was not evaluated.")
    reference: str | None = Field(default=None, description="The one result every result is also tested against "
                                                            "(vs_reference): retrieval at the main budget, e.g. "
                                                            "retrieval@5; null when retrieval was not evaluated and "
                                                            "in files of earlier versions.")


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
    budgets: list[PositiveInt] = Field(min_length=1, description="The budgets K, increasing.")
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


class CrossEncoderTraining(_Written):
    """``run_dir/eval/cross_encoder_ft/cross_encoder_ft.json``: how the fine-tuned cross-encoder baseline
    (``cross_encoder_ft``) was made (`purecover.eval.cross_encoder_ft`)."""

    key: str = Field(description="sha256 of everything it was made from: settings, base model, and each training "
                                 "and calibration question's text, passages and label subset.")
    base: str = Field(description="The model it started from (eval.cross_encoder_ft_base).")
    base_source: dict[str, JsonValue] = Field(description="Where that model came from (bundled, local or hub; with "
                                                          "its files' sha256 when bundled).")
    threshold: Finite = Field(description="The score threshold chosen on the calibration questions (0-1).")
    calib_subset_f1: Fraction = Field(description="Mean subset F1 against the labels at that threshold, on the "
                                                  "calibration questions it was chosen on.")
    train_questions: NonNegativeInt = Field(description="Labelled training questions (the student's train split).")
    calib_questions: NonNegativeInt = Field(description="Labelled calibration questions (the student's calibration "
                                                        "split).")
    train_pairs: NonNegativeInt = Field(description="(question, passage) pairs trained on.")
    positive_pairs: NonNegativeInt = Field(description="Of those, pairs whose passage is in the label's subset.")
    epochs: PositiveInt = Field(description="Training epochs.")
    learning_rate: Finite = Field(description="Peak learning rate (linear warm-up over 10% of the steps, then decay).")
    batch_size: PositiveInt = Field(description="Pairs per step.")
    max_length: PositiveInt = Field(description="Tokens of question + passage kept per pair.")
    bf16: bool = Field(False, description="Fine-tuned under bfloat16 autocast (eval.cross_encoder_ft_bf16).")
    seed: int = Field(description="The recipe's seed (split, shuffling, head initialisation).")
    train_seconds: Finite = Field(description="Wall seconds of the fine-tuning (loading included).")
    train_qids_sha256: str = Field(description="sha256 of the sorted training qids, one per line: which questions "
                                               "it learned from.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")


# --------------------------------------------------------------------------- evaluate.run.json


class EvaluateSummary(StageSummary):
    """The evaluate stage's summary (``evaluate.run.json``). Besides its fields it holds one ``em@K`` key (K the
    report's main budget, eval.table_budget or the largest budget), written after ``prompts_per_second``: the mean
    EM of every method at that budget (`em_at_table_budget`)."""

    __pydantic_extra__: dict[str, dict[str, float | None]] = Field(init=False)

    questions: NonNegativeInt = Field(description="Questions every method answered.")
    methods: list[str] = Field(description="The methods evaluated, by name (eval.methods).")
    budgets: list[PositiveInt] = Field(description="The budgets K, increasing.")
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
