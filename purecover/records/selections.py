"""selections.jsonl (the select stage's and ``purecover select``'s output), a bring-your-own selection's input
lines and ``OUT.run.json``, and the select summaries."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import NonNegativeInt, _Written
from .candidates import CandidateDoc
from .manifests import StageSummary


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
        default="logit", description="What logits holds: the logits the selector's readout reads, or "
                                     "log-probabilities renormalised over the identifiers (vLLM log-prob modes, "
                                     "identifier readout); absent in files written before it existed.")
    doc_ids: list[str] | None = Field(default=None, description="The doc ids of all candidates in candidate order "
                                                                "(bring-your-own selection only).")


class SelectInputRecord(_Written):
    """One question of a bring-your-own ``purecover select --input`` file, as read (`purecover.select.byo`):
    every doc has its id (the 1-based position when the file gives none) and a title ('' when none)."""

    qid: str = Field(min_length=1, description="The question's id (an integer in the file is read as text).")
    question: str = Field(min_length=1, description="The question text.")
    docs: list[CandidateDoc] = Field(description="The candidates in retrieval order (best first), at most the "
                                                 "selector's k1.")


class SelectSummary(StageSummary):
    """The select stage's summary (``select.run.json``; `purecover.select.select_stage.summarize_selections`)."""

    questions: NonNegativeInt = Field(description="Questions selected for (one selections.jsonl record each).")
    written: NonNegativeInt = Field(description="Records written by this run.")
    already_done: NonNegativeInt = Field(description="Records found already written (a resumed run).")
    repaired_lines: NonNegativeInt = Field(description="Torn last lines cut off before resuming.")
    dropped_records: NonNegativeInt = Field(0, description="Records of questions outside this run's set found in "
                                                           "the file (left by a run over other questions with the "
                                                           "same selector and candidates) and removed.")
    no_candidates: NonNegativeInt = Field(description="Questions without candidates (an empty selection).")
    mean_selected: float | None = Field(description="Mean number of passages kept per question (4 decimals); "
                                                    "null without questions.")
    questions_per_second: float | None = Field(description="Selection throughput of this run, without loading the "
                                                           "selector; null when nothing was written.")
    backend: str = Field(description="The selector backend: hf or vllm.")
    selector: str = Field(description="The exported selector directory used.")
    tau3: float = Field(description="Its threshold on the readout's logits (selector_config.json).")
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
