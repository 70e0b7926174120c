"""Training examples: candidates.jsonl joined with labels.jsonl by qid, rendered as selector prompts.

Candidates are read with `purecover.data.candidates.read_candidate_records` and each labels.jsonl line is
checked as a `purecover.records.LabelRecord`; beyond that, every label must name a question of candidates.jsonl
(once) and every selected index must be a distinct candidate position. Violations are errors naming the
file, line and field. Labels with ``status: "error"`` carry no subset and are skipped (counted). The
held-out split is a deterministic function of the qid (a hash), so it is the same on every run and process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch

from ..data.candidates import read_candidate_records
from ..data.splits import question_split
from ..models.identifiers import IdentifierScheme
from ..models.selector_prompt import SelectorWording, build_selector_prompt
from ..records import LabelRecord, LineRecordError, validate_line
from ..utils.io import read_jsonl

__all__ = ["ExampleCounts", "SelectorBatch", "SelectorCollator", "SelectorDataset", "SelectorExample",
           "load_training_examples", "split_examples"]


@dataclass
class SelectorExample:
    """One training question: prompt token ids, the teacher's subset (pick order), candidate count."""

    qid: str
    input_ids: list[int]
    selected: list[int]
    n_docs: int


@dataclass(frozen=True)
class ExampleCounts:
    """What became of labels.jsonl: lines read, labels used as examples, error labels skipped."""

    labels: int
    used: int
    skipped_error: int


def load_training_examples(candidates_path: str | Path, labels_path: str | Path, tokenizer: Any,
                           scheme: IdentifierScheme, max_passage_tokens: int,
                           wording: SelectorWording | None = None) -> tuple[list[SelectorExample], ExampleCounts]:
    """Join the two files (order of labels.jsonl) and render prompts (`wording`: ours when None); returns
    (examples, counts)."""
    candidates_path, labels_path = Path(candidates_path), Path(labels_path)
    for p, stage in ((candidates_path, "data"), (labels_path, "label")):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist: run `purecover {stage} RECIPE` first")
    cands = {rec.qid: rec for rec in read_candidate_records(candidates_path)}
    examples: list[SelectorExample] = []
    n_labels = used = skipped_error = 0
    seen: set[str] = set()
    for lineno, lab in read_jsonl(labels_path):
        n_labels += 1
        label = validate_line(LabelRecord, lab, labels_path, lineno)
        qid = label.qid

        def bad(field: str, problem: str, lineno: int = lineno) -> LineRecordError:
            return LineRecordError(labels_path, lineno, field, problem)

        if qid not in cands:
            raise bad("qid", f"{qid!r} is not in {candidates_path} (labels from another run?)")
        if qid in seen:
            raise bad("qid", f"duplicate {qid!r}")
        seen.add(qid)
        if label.status == "error":
            skipped_error += 1
            continue
        docs = cands[qid].docs
        selected = label.selected
        outside = [k for k in selected if k >= len(docs)]
        if outside:
            raise bad("selected", f"positions {outside} outside the {len(docs)} candidates of {qid!r}")
        if len(set(selected)) != len(selected):
            raise bad("selected", f"repeated positions {selected}")
        ids = label.selected_doc_ids
        if ids and [docs[k].doc_id for k in selected] != ids:
            raise bad("selected_doc_ids", f"do not match the candidates of {qid!r} (labels made from another "
                                          "candidates file?)")
        prompt = build_selector_prompt(tokenizer, cands[qid].question, docs, scheme, max_passage_tokens, wording)
        examples.append(SelectorExample(qid, prompt.input_ids, list(selected), len(docs)))
        used += 1
    counts = ExampleCounts(labels=n_labels, used=used, skipped_error=skipped_error)
    if not examples:
        raise ValueError(f"{labels_path}: no usable labels ({counts})")
    return examples, counts


def split_examples(examples: Sequence[SelectorExample], eval_fraction: float, seed: int = 0,
                   calibration_share: float = 0.5
                   ) -> tuple[list[SelectorExample], list[SelectorExample], list[SelectorExample]]:
    """(train, calib, test) by `question_split`; at least one training example is kept (with no training
    question at all, every example trains and the other two splits are empty)."""
    parts: dict[str, list[SelectorExample]] = {"train": [], "calib": [], "test": []}
    for e in examples:
        parts[question_split(e.qid, eval_fraction, calibration_share, seed)].append(e)
    if not parts["train"]:
        return list(examples), [], []
    return parts["train"], parts["calib"], parts["test"]


class SelectorDataset(torch.utils.data.Dataset):
    """A list of `SelectorExample` as a torch dataset."""

    def __init__(self, examples: Sequence[SelectorExample]) -> None:
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> SelectorExample:
        return self.examples[i]


class SelectorBatch(TypedDict):
    """A training batch (`SelectorCollator`): a dict, as the Trainer moves its values to the device."""

    prompts: list[torch.Tensor]  # one unpadded LongTensor of prompt token ids per question
    selected: list[list[int]]  # the teacher's subset of each question, in pick order
    n_docs: list[int]  # the candidate count of each question
    qids: list[str]


class SelectorCollator:
    """Batch of examples → a `SelectorBatch` (``prompts``, ``selected``, ``n_docs``, ``qids``).

    Prompts stay unpadded: the loss scores orderings per prompt and pads the training batch itself.
    """

    def __call__(self, features: Sequence[SelectorExample]) -> SelectorBatch:
        return SelectorBatch(
            prompts=[torch.tensor(f.input_ids, dtype=torch.long) for f in features],
            selected=[list(f.selected) for f in features],
            n_docs=[f.n_docs for f in features],
            qids=[f.qid for f in features],
        )
