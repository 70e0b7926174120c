"""The fine-tuned cross-encoder baseline, ``cross_encoder_ft``: what a practitioner holding purecover's labels would
build without purecover's student.

**Training data.** The run's teacher labels (``labels.jsonl``; ``error`` records carry no subset and are skipped, as
the train stage skips them) on the student's training questions: `purecover.data.splits.question_split` with
``student.eval_fraction``, ``student.calibration_share`` and the recipe's seed, so exactly the questions the train
stage learns from. Each candidate of a question is one (question, passage) pair, labelled 1 when the passage is in
the label's subset, else 0.

**Model.** A sentence-transformers ``CrossEncoder`` (one score per pair) started from ``eval.cross_encoder_ft_base``
(default: all-MiniLM-L6-v2, bundled, its classifier head new), trained with ``CrossEncoderTrainer`` and binary
cross-entropy weighted by negatives / positives, ``eval.cross_encoder_ft_epochs`` epochs at
``eval.cross_encoder_ft_learning_rate``, batches of `BATCH_SIZE` pairs of at most `MAX_LENGTH` tokens, seeded; under
bfloat16 autocast when ``eval.cross_encoder_ft_bf16`` is true.

**Threshold.** Chosen on the student's calibration questions by the rule of the student's τ3
(`purecover.models.selection.calibrate_threshold`: best mean subset F1 against the labels, at least one passage,
ties to the larger threshold), on the model's scores (sigmoid probabilities, 0-1).

**Selection.** Every passage whose score passes the threshold, best first, at least one, cut to the budget K.

The model lives in ``run_dir/eval/cross_encoder_ft/`` (``model.safetensors``, its config and tokenizer, and
``cross_encoder_ft.json``, a `purecover.records.CrossEncoderTraining`). It is keyed by everything it was made from
(the labels, the candidates' texts, the split, the settings, the base model's files): an evaluation that lists the
method trains it only when that key changed, atomically and under a lock, so it never outlives its inputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Recipe
from ..data.retrieval.dense import embedding_model_source, resolve_embedding_model
from ..data.splits import question_split
from ..records import CandidateRecord, CrossEncoderTraining, LabelRecord
from ..rundir import RunDir
from ..utils.index_lock import building_directory, key_lock
from ..utils.io import atomic_write_json
from ..utils.provenance import package_versions
from .baseline_common import StoredSelection, _check_k, doc_text

log = logging.getLogger(__name__)

__all__ = ["BATCH_SIZE", "FT_DIR", "MAX_LENGTH", "RECORD_FILE", "FineTunedCrossEncoderSelect", "LabelledSplit",
           "ensure_fine_tuned", "labelled_splits"]

FT_DIR = "cross_encoder_ft"  # under run_dir/eval/
RECORD_FILE = "cross_encoder_ft.json"
BATCH_SIZE = 16  # pairs per training step
MAX_LENGTH = 256  # tokens of question + passage (all-MiniLM-L6-v2's own limit)
PREDICT_BATCH = 32


@dataclass(frozen=True)
class LabelledSplit:
    """The questions a split holds, each with the teacher's subset (positions among its candidates)."""

    questions: tuple[CandidateRecord, ...]
    selected: tuple[tuple[int, ...], ...]

    @property
    def qids(self) -> set[str]:
        return {q.qid for q in self.questions}


def labelled_splits(recipe: Recipe, labels: dict[str, LabelRecord]) -> tuple[LabelledSplit, LabelledSplit]:
    """(train, calibration) questions of run_dir's candidates with their teacher labels, split as the train stage
    splits them. A label naming a position outside its candidates is a ValueError naming the question."""
    from ..data.data_stage import read_candidate_records

    rd = RunDir.of(recipe)
    st = recipe.student
    parts: dict[str, tuple[list[CandidateRecord], list[tuple[int, ...]]]] = {"train": ([], []), "calib": ([], [])}
    for q in read_candidate_records(rd.path_of("candidates")):
        label = labels.get(q.qid)
        if label is None or label.status == "error" or not q.docs:
            continue
        part = question_split(q.qid, st.eval_fraction, st.calibration_share, recipe.seed)
        if part not in parts:
            continue
        outside = [k for k in label.selected if k >= len(q.docs)]
        if outside:
            raise ValueError(f"{rd.path_of('labels')}: question {q.qid!r}: label positions {outside} are outside its "
                             f"{len(q.docs)} candidates (labels from another candidates file?)")
        parts[part][0].append(q)
        parts[part][1].append(tuple(label.selected))
    train, calib = (LabelledSplit(tuple(qs), tuple(sel)) for qs, sel in (parts["train"], parts["calib"]))
    if not train.questions:
        raise ValueError("method cross_encoder_ft: no labelled training question (run `purecover label RECIPE`; "
                         "student.eval_fraction leaves none for training?)")
    if not calib.questions:
        raise ValueError("method cross_encoder_ft: no labelled calibration question to choose its threshold on "
                         "(raise student.eval_fraction or student.calibration_share)")
    return train, calib


def _settings(recipe: Recipe) -> dict[str, Any]:
    e, st = recipe.eval, recipe.student
    return {"base": e.cross_encoder_ft_base, "epochs": e.cross_encoder_ft_epochs,
            "learning_rate": e.cross_encoder_ft_learning_rate, "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH,
            "seed": recipe.seed, "eval_fraction": st.eval_fraction, "calibration_share": st.calibration_share,
            **({"bf16": True} if e.cross_encoder_ft_bf16 else {})}  # in the key only when on: float32 keys unchanged


def _training_key(settings: dict[str, Any], base_source: dict[str, Any], train: LabelledSplit,
                  calib: LabelledSplit) -> str:
    """sha256 of the settings, the base model's identity and every question's text, passages and subset."""
    h = hashlib.sha256(json.dumps({"settings": settings, "base": base_source}, sort_keys=True).encode())
    for name, split in (("train", train), ("calib", calib)):
        for q, sel in zip(split.questions, split.selected):
            h.update(json.dumps([name, q.qid, q.question, [doc_text(d) for d in q.docs], list(sel)]).encode())
    return h.hexdigest()


def _pairs(split: LabelledSplit) -> tuple[list[str], list[str], list[float]]:
    queries, passages, labels = [], [], []
    for q, sel in zip(split.questions, split.selected):
        chosen = set(sel)
        for i, d in enumerate(q.docs):
            queries.append(q.question)
            passages.append(doc_text(d))
            labels.append(1.0 if i in chosen else 0.0)
    return queries, passages, labels


def _scores(model: Any, question: CandidateRecord) -> np.ndarray:
    """The model's score of each candidate of `question` (shape (n_docs,), probabilities in 0-1)."""
    if not question.docs:
        return np.zeros(0, dtype=np.float64)
    out = np.asarray(model.predict([(question.question, doc_text(d)) for d in question.docs],
                                   batch_size=PREDICT_BATCH, show_progress_bar=False, convert_to_numpy=True),
                     dtype=np.float64)
    return out.reshape(len(question.docs))


def _train(recipe: Recipe, out: Path, train: LabelledSplit, calib: LabelledSplit, key: str,
           base_source: dict[str, Any], show_progress: bool) -> CrossEncoderTraining:
    """Fine-tune into `out` and choose the threshold; returns the record also written there."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from ..models.selection import calibrate_threshold

    settings = _settings(recipe)
    t0 = time.perf_counter()
    device = None if recipe.eval.device == "auto" else recipe.eval.device
    torch.manual_seed(recipe.seed)
    model = CrossEncoder(resolve_embedding_model(settings["base"]), num_labels=1, max_length=MAX_LENGTH,
                         device=device)
    if settings.get("bf16") and device in (None, "cpu") and not torch.cuda.is_available():
        from ..utils.cpu_features import warn_unless_cpu_bf16

        warn_unless_cpu_bf16("eval.cross_encoder_ft_bf16: true (bfloat16 autocast)")
    queries, passages, labels = _pairs(train)
    positives = sum(labels)
    pos_weight = (len(labels) - positives) / max(positives, 1.0)
    data = Dataset.from_dict({"query": queries, "passage": passages, "label": labels})
    args = CrossEncoderTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=settings["epochs"],
        per_device_train_batch_size=BATCH_SIZE, learning_rate=settings["learning_rate"], warmup_steps=0.1,
        seed=recipe.seed, data_seed=recipe.seed, save_strategy="no", report_to="none", logging_steps=25,
        disable_tqdm=not show_progress, dataloader_num_workers=0, use_cpu=(device == "cpu"),
        bf16=bool(settings.get("bf16")))
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(pos_weight))
    log.info("cross_encoder_ft: fine-tuning %s on %d pairs of %d training questions (%d positive), %s epoch(s)",
             settings["base"], len(labels), len(train.questions), int(positives), settings["epochs"])
    CrossEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
    train_seconds = time.perf_counter() - t0
    calib_scores = [_scores(model, q).tolist() for q in calib.questions]
    threshold, calib_f1 = calibrate_threshold(calib_scores, [list(s) for s in calib.selected], min_select=1)
    shutil.rmtree(out / "trainer", ignore_errors=True)  # ours: the trainer's scratch folder, never a checkpoint
    model.save_pretrained(str(out), safe_serialization=True)
    record = CrossEncoderTraining(
        key=key, base=settings["base"], base_source=base_source, threshold=round(float(threshold), 6),
        calib_subset_f1=round(float(calib_f1), 6), train_questions=len(train.questions),
        calib_questions=len(calib.questions), train_pairs=len(labels), positive_pairs=int(positives),
        epochs=settings["epochs"], learning_rate=settings["learning_rate"], batch_size=BATCH_SIZE,
        max_length=MAX_LENGTH, bf16=bool(settings.get("bf16")), seed=recipe.seed,
        train_seconds=round(train_seconds, 1),
        train_qids_sha256=hashlib.sha256("\n".join(sorted(train.qids)).encode()).hexdigest(),
        versions=package_versions())
    atomic_write_json(out / RECORD_FILE, record.to_json_dict())
    log.info("cross_encoder_ft: trained in %.0f s; threshold %.4f (calibration subset F1 %.3f on %d questions)",
             train_seconds, threshold, calib_f1, len(calib.questions))
    return record


def _read_record(directory: Path) -> CrossEncoderTraining | None:
    f = directory / RECORD_FILE
    if not f.is_file() or f.is_symlink():
        return None
    try:
        return CrossEncoderTraining.model_validate_json(f.read_text(encoding="utf-8"))
    except ValueError:
        return None


def ensure_fine_tuned(recipe: Recipe, labels: dict[str, LabelRecord], evaluation_qids: set[str],
                      show_progress: bool = True) -> tuple[Path, CrossEncoderTraining]:
    """The fine-tuned cross-encoder of `recipe`'s labels (its directory and record), trained first when missing or
    made from other inputs. `evaluation_qids`: the questions it will be scored on; a ValueError if any of them is a
    training or calibration question (a test split is never trained on)."""
    train, calib = labelled_splits(recipe, labels)
    leaked = sorted((train.qids | calib.qids) & evaluation_qids)
    if leaked:
        raise ValueError(f"method cross_encoder_ft: {len(leaked)} evaluation questions are among its training or "
                         f"calibration questions (first: {', '.join(leaked[:3])}); evaluate on the held-out split "
                         "(eval.questions: heldout) or on another file (eval.path)")
    base_source = dict(embedding_model_source(recipe.eval.cross_encoder_ft_base))
    key = _training_key(_settings(recipe), base_source, train, calib)
    final = RunDir.of(recipe).path_of("eval") / FT_DIR
    with key_lock(final.parent / f".{FT_DIR}.lock", "the cross-encoder fine-tuning"):
        done = _read_record(final)
        if done is not None and done.key == key:
            return final, done
        if done is not None:
            log.info("cross_encoder_ft: its labels, candidates or settings changed: training it again")
        with building_directory(final, RECORD_FILE) as tmp:
            record = _train(recipe, tmp, train, calib, key, base_source, show_progress)
    return final, record


class FineTunedCrossEncoderSelect:
    """``cross_encoder_ft``: every passage whose fine-tuned cross-encoder score passes its calibrated threshold,
    best first (ties: earlier position), at least one, at most K."""

    name = "cross_encoder_ft"

    def __init__(self, model_dir: str | Path, threshold: float, *, device: str | None = None) -> None:
        self.model_dir = str(model_dir)
        self.threshold = float(threshold)
        self.device = device
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers.cross_encoder import CrossEncoder

            self._model = CrossEncoder(self.model_dir, device=self.device, max_length=MAX_LENGTH)
        return self._model

    def scores(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One score per candidate (in candidate order), in 0-1."""
        return _scores(self.model, candidate_record)

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        from ..models.selection import select_from_scores

        k = _check_k(k)
        return select_from_scores(self.scores(candidate_record).tolist(), self.threshold, 1, k)
