"""Training examples: candidates.jsonl joined with labels.jsonl by qid, rendered as selector prompts.

Candidates are read with `purecover.data.data_stage.read_candidate_records` and each labels.jsonl line is
checked as a `purecover.records.LabelRecord`; beyond that, every label must name a question of candidates.jsonl
(once) and every selected index must be a distinct candidate position. Violations are errors naming the
file, line and field. Labels with ``status: "error"`` carry no subset and are skipped (counted). The
held-out split is a deterministic function of the qid (a hash), so it is the same on every run and process.

Candidate orders (``student.candidate_shuffles``). `read_labelled_questions` gives each question in the
retrieval order of candidates.jsonl; `shuffled_views` turns a training question into N copies whose candidates
are shown in seeded random orders (`candidate_order`), the subset's indices moved with their passages
(`LabelledQuestion.permuted`). Identifier i always labels the i-th passage *shown*, so the reply and both
losses read the permuted indices. An order is a pure function of (seed, view, qid): the same recipe renders
the same examples on every load, rank and resume, which is what lets the Trainer's seeded sampler and its
checkpoint skip reproduce an uninterrupted run. The calibration and test splits are rendered in retrieval
order (`render_examples` of the unpermuted questions) unless a caller permutes them itself.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypedDict, TypeVar

import torch

from ..data.data_stage import read_candidate_records
from ..data.splits import question_split
from ..models.identifiers import IdentifierScheme
from ..models.selector_prompt import SelectorWording, build_selector_prompt
from ..records import CandidateDoc, LabelRecord, LineRecordError, validate_line
from ..utils.io import read_jsonl

__all__ = ["TARGETS", "ExampleCounts", "LabelledQuestion", "SelectorBatch", "SelectorCollator", "SelectorDataset",
           "SelectorExample", "candidate_order", "load_training_examples", "read_labelled_questions", "render_examples",
           "shuffled_views", "split_examples", "top_k_target", "training_splits"]


@dataclass
class SelectorExample:
    """One training example: prompt token ids, the teacher's subset (pick order), candidate count.

    `selected` holds positions among the passages *as shown* in `input_ids` (identifier i labels shown passage i).
    `order`: shown position i holds the candidate at position ``order[i]`` of candidates.jsonl (a permutation of
    range(n_docs)); None for the retrieval order (``order[i] == i``). `read_positions`: the passage readout's
    marker token of each shown passage, indices into `input_ids` (None: identifier readout).
    """

    qid: str
    input_ids: list[int]
    selected: list[int]
    n_docs: int
    order: list[int] | None = None
    read_positions: list[int] | None = None


@dataclass(frozen=True)
class LabelledQuestion:
    """A question with its candidates and the teacher's subset, before rendering.

    `docs` are in the order they are shown; `selected` are positions in `docs` (the teacher's pick order);
    `order[i]` is the position in candidates.jsonl of ``docs[i]`` (None: retrieval order, ``order[i] == i``).
    """

    qid: str
    question: str
    docs: tuple[CandidateDoc, ...]
    selected: tuple[int, ...]
    order: tuple[int, ...] | None = None

    def permuted(self, order: Sequence[int]) -> LabelledQuestion:
        """This question with ``docs[order[i]]`` shown at position i; each selected index follows its passage
        (pick order kept). `order` must be a permutation of range(len(docs)) (ValueError otherwise)."""
        n = len(self.docs)
        order = tuple(int(k) for k in order)
        if sorted(order) != list(range(n)):
            raise ValueError(f"{self.qid!r}: order {list(order)} is not a permutation of its {n} candidate positions")
        shown_at = {k: i for i, k in enumerate(order)}  # position in docs -> shown position
        base = self.order if self.order is not None else tuple(range(n))
        return replace(self, docs=tuple(self.docs[k] for k in order), selected=tuple(shown_at[k] for k in self.selected),
                       order=tuple(base[k] for k in order))


def candidate_order(qid: str, n_docs: int, seed: int, view: int = 0) -> list[int]:
    """The `view`-th seeded random order of a question's `n_docs` candidates: a permutation of range(n_docs),
    uniform, a pure function of (seed, view, qid) (the same in every process, whatever PYTHONHASHSEED).

    Fisher-Yates over `random.Random.random`, whose sequence for an integer seed Python keeps across versions
    (`random.shuffle`'s draws are not promised to stay the same).
    """
    digest = hashlib.sha256(f"candidate-order:{seed}:{view}:{qid}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    order = list(range(n_docs))
    for i in range(n_docs - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        order[i], order[j] = order[j], order[i]
    return order


def shuffled_views(questions: Sequence[LabelledQuestion], shuffles: int, seed: int) -> list[LabelledQuestion]:
    """Each question `shuffles` times, view v with its candidates in `candidate_order` (qid, v) (question-major:
    q0 v0, q0 v1, ..., q1 v0, ...); ``shuffles == 0``: the questions unchanged (retrieval order)."""
    if shuffles < 0:
        raise ValueError(f"shuffles must be >= 0, got {shuffles}")
    if shuffles == 0:
        return list(questions)
    return [q.permuted(candidate_order(q.qid, len(q.docs), seed, v)) for q in questions for v in range(shuffles)]


@dataclass(frozen=True)
class ExampleCounts:
    """What became of labels.jsonl: lines read, labels used as examples, error labels skipped."""

    labels: int
    used: int
    skipped_error: int


TARGETS = ("set", "top_k")


def top_k_target(selected: Sequence[int], gains: Sequence[float | None], n_docs: int, k: int) -> tuple[int, ...]:
    """The released code's student target (``student.target: top_k``): the `k` picks with the highest gains (ties:
    the earlier pick), padded to `k` with unselected candidates in retrieval order; at most `n_docs`.

    The code pads with the unselected documents' own scores, which the labels do not keep: retrieval order is
    this project's choice (docs/paper/released-code.md)."""
    scored = [(-(g if g is not None else float("-inf")), i, doc) for i, (doc, g) in enumerate(zip(selected, gains))]
    chosen = [doc for _, _, doc in sorted(scored)][:k]
    for doc in range(n_docs):
        if len(chosen) >= min(k, n_docs):
            break
        if doc not in chosen:
            chosen.append(doc)
    return tuple(chosen)


def read_labelled_questions(candidates_path: str | Path, labels_path: str | Path, target: str = "set",
                            target_k: int = 5) -> tuple[list[LabelledQuestion], ExampleCounts]:
    """Join the two files (order of labels.jsonl), checking each label against its candidates; returns the
    usable questions in retrieval order and the counts. `target`: ``set``, the label's subset in pick order (the
    paper), or ``top_k``, `top_k_target` of it with `target_k` (the released code)."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r}; expected one of {', '.join(TARGETS)}")
    candidates_path, labels_path = Path(candidates_path), Path(labels_path)
    for p, stage in ((candidates_path, "data"), (labels_path, "label")):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist: run `purecover {stage} RECIPE` first")
    cands = {rec.qid: rec for rec in read_candidate_records(candidates_path)}
    questions: list[LabelledQuestion] = []
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
        if target == "top_k":
            selected = list(top_k_target(selected, list(label.gains), len(docs), target_k))
        questions.append(LabelledQuestion(qid, cands[qid].question, tuple(docs), tuple(selected)))
        used += 1
    counts = ExampleCounts(labels=n_labels, used=used, skipped_error=skipped_error)
    if not questions:
        raise ValueError(f"{labels_path}: no usable labels ({counts})")
    return questions, counts


def render_examples(questions: Sequence[LabelledQuestion], tokenizer: Any, scheme: IdentifierScheme,
                    max_passage_tokens: int, wording: SelectorWording | None = None,
                    readout: str = "identifier") -> list[SelectorExample]:
    """Each question as a selector prompt of `readout`'s layout, its candidates in the order given (`wording`:
    ours when None)."""
    out = []
    for q in questions:
        prompt = build_selector_prompt(tokenizer, q.question, q.docs, scheme, max_passage_tokens, wording, readout)
        out.append(SelectorExample(q.qid, prompt.input_ids, list(q.selected), len(q.docs),
                                   None if q.order is None else list(q.order), prompt.read_positions))
    return out


def load_training_examples(candidates_path: str | Path, labels_path: str | Path, tokenizer: Any,
                           scheme: IdentifierScheme, max_passage_tokens: int,
                           wording: SelectorWording | None = None) -> tuple[list[SelectorExample], ExampleCounts]:
    """`read_labelled_questions` + `render_examples`, in retrieval order (`wording`: ours when None); returns
    (examples, counts)."""
    questions, counts = read_labelled_questions(candidates_path, labels_path)
    return render_examples(questions, tokenizer, scheme, max_passage_tokens, wording), counts


class _HasQid(Protocol):
    @property
    def qid(self) -> str: ...


_Q = TypeVar("_Q", bound=_HasQid)


def split_examples(examples: Sequence[_Q], eval_fraction: float, seed: int = 0, calibration_share: float = 0.5
                   ) -> tuple[list[_Q], list[_Q], list[_Q]]:
    """(train, calib, test) by `question_split` of each item's qid (`SelectorExample` or `LabelledQuestion`); at
    least one training example is kept (with no training question at all, every example trains and the other
    two splits are empty)."""
    parts: dict[str, list[_Q]] = {"train": [], "calib": [], "test": []}
    for e in examples:
        parts[question_split(e.qid, eval_fraction, calibration_share, seed)].append(e)
    if not parts["train"]:
        return list(examples), [], []
    return parts["train"], parts["calib"], parts["test"]


def training_splits(questions: Sequence[LabelledQuestion], tokenizer: Any, scheme: IdentifierScheme,
                    max_passage_tokens: int, wording: SelectorWording | None = None, *, eval_fraction: float,
                    calibration_share: float, seed: int, candidate_shuffles: int, readout: str = "identifier"
                    ) -> tuple[list[SelectorExample], list[SelectorExample], list[SelectorExample]]:
    """The train stage's (train, calib, test) examples: `split_examples` by qid, then each training question
    rendered in `candidate_shuffles` seeded orders (`shuffled_views`; 0: retrieval order) and the calibration
    and test questions in retrieval order, so their figures compare across settings."""
    train_q, calib_q, test_q = split_examples(questions, eval_fraction, seed, calibration_share)
    train = render_examples(shuffled_views(train_q, candidate_shuffles, seed), tokenizer, scheme,
                            max_passage_tokens, wording, readout)
    calib = render_examples(calib_q, tokenizer, scheme, max_passage_tokens, wording, readout)
    test = render_examples(test_q, tokenizer, scheme, max_passage_tokens, wording, readout)
    return train, calib, test


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
    selected: list[list[int]]  # the teacher's subset of each question, in pick order, as shown positions
    n_docs: list[int]  # the candidate count of each question
    qids: list[str]
    orders: list[list[int] | None]  # per question the retrieval position of each shown passage (None: retrieval order)
    read_positions: list[list[int]] | None  # passage readout: per question each passage's marker index; else None


class SelectorCollator:
    """Batch of examples → a `SelectorBatch` (``prompts``, ``selected``, ``n_docs``, ``qids``, ``orders``).

    Prompts stay unpadded: the loss scores orderings per prompt and pads the training batch itself.
    """

    def __call__(self, features: Sequence[SelectorExample]) -> SelectorBatch:
        return SelectorBatch(
            prompts=[torch.tensor(f.input_ids, dtype=torch.long) for f in features],
            selected=[list(f.selected) for f in features],
            n_docs=[f.n_docs for f in features],
            qids=[f.qid for f in features],
            orders=[None if f.order is None else list(f.order) for f in features],
            read_positions=_read_positions(features),
        )


def _read_positions(features: Sequence[SelectorExample]) -> list[list[int]] | None:
    """The batch's marker positions: None when no example has them (identifier readout); a batch that mixes
    both layouts is a ValueError."""
    reads = [f.read_positions for f in features]
    if all(r is None for r in reads):
        return None
    if any(r is None for r in reads):
        raise ValueError("a batch mixes passage-readout and identifier-readout examples")
    return [list(r) for r in reads]  # type: ignore[arg-type]
