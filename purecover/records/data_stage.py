"""The data stage's own files besides candidates.jsonl: data_report.json (the invalid records left out) and its
summary, with the Hub configuration it read."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, model_validator

from .base import Fraction, NonNegativeInt, _Written
from .index_meta import InvalidRecord
from .manifests import StageSummary


class DataReport(_Written):
    """run_dir/data_report.json: the records the data stage left out (data stage, with ``data.skip_invalid``;
    written when any was, and rewritten on later runs once it exists)."""

    invalid_records: list[InvalidRecord] = Field(description="The questions' and the corpus's invalid records, "
                                                             "in the order they were met.")
    n_invalid: NonNegativeInt = Field(description="How many there are.")


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
    """The data stage's summary (`purecover.data.data_stage.write_candidates`; ``summary`` of data.run.json).

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
