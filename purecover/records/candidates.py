"""candidates.jsonl: one question and its retrieved passages a line (the data stage's output)."""

from __future__ import annotations

from pydantic import Field, JsonValue

from .base import _Written


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
