"""The one question type every dataset loader produces."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import JsonValue

__all__ = ["Example", "Paragraph"]


@dataclass
class Paragraph:
    """A passage that comes with a question (HotpotQA/2Wiki context, MuSiQue paragraphs, StrategyQA facts).

    `sentences` keeps the original sentence split when the dataset has one (supporting facts
    point into it); `text` is the sentences joined.
    """

    title: str
    text: str
    is_supporting: bool = False
    sentences: list[str] | None = None


@dataclass
class Example:
    """One question with its gold answers (answer first, then aliases) and its own paragraphs.

    `supporting_titles`: titles of the gold supporting paragraphs (empty when the dataset has
    none). `oracle_steps`: a gold reasoning decomposition used by ``teacher.steps: oracle``
    (HotpotQA/2Wiki supporting sentences, MuSiQue sub-questions with answers, StrategyQA
    decomposition). `meta`: dataset-specific extras (type, level, facts, ...).
    """

    qid: str
    dataset: str
    question: str
    answers: list[str]
    paragraphs: list[Paragraph] = field(default_factory=list)
    supporting_titles: list[str] = field(default_factory=list)
    oracle_steps: list[str] = field(default_factory=list)
    meta: dict[str, JsonValue] = field(default_factory=dict)  # as the dataset gives it

    @property
    def supporting_paragraphs(self) -> list[Paragraph]:
        return [p for p in self.paragraphs if p.is_supporting]
