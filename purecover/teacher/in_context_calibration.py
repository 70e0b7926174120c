"""In-context position-bias calibration (``teacher.calibration_procedure: in_context``): the procedure of the
authors' released code (docs/paper/released-code.md), next to the fixed one of `purecover.teacher.calibration`.

For each of the first ``teacher.calibration_questions`` questions of candidates.jsonl and each position k of its
K1 documents, document k is replaced by a generic paragraph (`GENERIC_PARAGRAPH`, cut to the calibration length
of position k), the question gets reasoning steps over that set (``teacher.steps: model``: a new reply from the
teacher, parsed; ``oracle``: the question's oracle steps, which do not change with the documents), and the
attention of those steps to the generic paragraph is read in the capture layout (uncalibrated, per-token mean,
averaged over the steps). Bias(k) is the mean of that over the questions that have a k-th document.

Cost: questions × K1 capture sequences (plus as many teacher replies with ``steps: model``), against one sequence
for the fixed procedure. Each question's K1 values go to ``run_dir/bias_in_context.jsonl`` as soon as they are
measured, so a killed calibration resumes where it stopped; a row counts only for the key it was measured under
(`row_key`: the calibration's keys with this procedure's), so rows of another configuration are never mixed in.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..records import CandidateRecord, InContextBiasRow, validate_line
from ..utils.io import ResumableJsonl, read_jsonl
from ..utils.progress import tqdm
from .calibration import dummy_document, read_length_records
from .parsing import ParsedReply

__all__ = ["GENERIC_PARAGRAPH", "ROWS_FILE", "InContextBias", "StepsOf", "calibration_questions", "in_context_bias",
           "mixed_steps", "oracle_steps", "procedure_for", "procedure_key", "row_key", "with_generic_document",
           "writes_own_steps"]

ROWS_FILE = "bias_in_context.jsonl"
# Our wording of a paragraph that answers no question: plain, true, unconnected statements (the released code
# uses a paragraph of the same kind, 600 characters at every position).
GENERIC_PARAGRAPH = (
    "This paragraph is filler and answers no question. A week has seven days. Most maps put north at the top. "
    "Rain falls from clouds. A triangle has three sides. Many people drink tea in the morning. Bread is baked in "
    "ovens. The alphabet used for English has twenty-six letters. Trains run on rails. Some trees lose their "
    "leaves in autumn. A clock shows the time. "
)
GENERIC_TITLE = "Note"

StepsOf = Callable[[Sequence[CandidateRecord]], list[ParsedReply]]


def calibration_questions(candidates_path: str | Path, n: int) -> list[CandidateRecord]:
    """The first `n` records of candidates.jsonl (checked as `CandidateRecord`, errors name line and field)."""
    records = read_length_records(candidates_path, limit=n)
    if not records:
        raise ValueError(f"{candidates_path}: no questions to calibrate on")
    return records


def procedure_key(steps: str, records: Sequence[CandidateRecord], k1: int) -> str:
    """What an in-context bias depends on beyond the fixed calibration's keys: the steps' source, the number of
    questions and a hash of their questions, oracle steps and first K1 documents."""
    content = [[r.qid, r.question, list(r.oracle_steps), [[d.title, d.text] for d in r.docs[:k1]]] for r in records]
    digest = hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]
    return f"in_context:steps={steps}:questions={len(records)}:{digest}"


def procedure_for(cfg: Any, k1: int, candidates_path: str | Path) -> str | None:
    """The `procedure_key` of a recipe's ``teacher`` section over its candidates; None for the fixed procedure."""
    if cfg.calibration_procedure == "fixed":
        return None
    return procedure_key(cfg.steps, calibration_questions(candidates_path, cfg.calibration_questions), k1)


def row_key(keys_json: str) -> str:
    """The short key a row of `ROWS_FILE` is valid for (a hash of the calibration's keys as JSON)."""
    return hashlib.sha256(keys_json.encode()).hexdigest()[:16]


def with_generic_document(record: CandidateRecord, k: int, tokenizer: Any, n_tokens: int) -> CandidateRecord:
    """`record` with document k replaced by `GENERIC_PARAGRAPH` (repeated as needed), its body (title, newline,
    text) cut to `n_tokens` tokens (`purecover.teacher.calibration.dummy_document`)."""
    generic = dummy_document(tokenizer, n_tokens, GENERIC_TITLE, GENERIC_PARAGRAPH)
    docs = list(record.docs)
    docs[k] = generic.model_copy(update={"doc_id": f"generic-{k}"})
    return record.model_copy(update={"docs": docs})


def writes_own_steps(steps: str, record: CandidateRecord) -> bool:
    """Whether the teacher writes `record`'s reasoning steps under ``teacher.steps`` = `steps`: always for model,
    never for oracle, and for auto when the question has no (non-blank) oracle step."""
    return steps == "model" or (steps == "auto" and not any(s.strip() for s in record.oracle_steps))


def mixed_steps(steps: str, oracle: StepsOf, model: StepsOf | None) -> StepsOf:
    """`oracle`'s steps for the records whose steps are not the teacher's (`writes_own_steps`), `model`'s for the
    others (one call each per batch, order kept); `model` None: every record's from `oracle`."""
    def steps_of(records: Sequence[CandidateRecord]) -> list[ParsedReply]:
        own = [model is not None and writes_own_steps(steps, r) for r in records]
        from_model = iter(model([r for r, o in zip(records, own) if o]) if model is not None and any(own) else [])
        from_oracle = iter(oracle([r for r, o in zip(records, own) if not o]) if not all(own) else [])
        return [next(from_model) if o else next(from_oracle) for o in own]

    return steps_of


def oracle_steps(max_steps: int) -> StepsOf:
    """Steps from each record's oracle steps (the question alone when it has none, a counted fallback)."""
    def steps_of(records: Sequence[CandidateRecord]) -> list[ParsedReply]:
        out = []
        for r in records:
            steps = [s for s in r.oracle_steps if s.strip()][:max_steps]
            answer = (r.answers or [""])[0]
            out.append(ParsedReply(steps, answer) if steps else
                       ParsedReply([r.question], answer, "fallback", "no oracle steps for this question"))
        return out

    return steps_of


@dataclass
class InContextBias:
    """Bias(k) (K1,), the per-question values (questions × K1, NaN where a question has no k-th document), how
    many sequences were captured this call, how many questions were resumed from the rows file, and how many
    replies fell back (`ParsedReply.status`)."""

    bias: np.ndarray
    per_question: np.ndarray
    captured: int
    resumed: int
    fallback: int


def in_context_bias(model: Any, tokenizer: Any, records: Sequence[CandidateRecord], k1: int, doc_tokens: Sequence[int],
                    steps_of: StepsOf, build_sequence: Callable[[CandidateRecord, ParsedReply], Any],
                    layers: str | Sequence[int], rows_path: str | Path, key: str, batch_size: int = 4,
                    max_chunk_bytes: int = 256 << 20, show_progress: bool = False) -> InContextBias:
    """The in-context bias over `records` (see the module docstring).

    `build_sequence(record, reply)` gives the `purecover.teacher.prompts.TeacherSequence` the capture runs over
    (the label stage's layout); `steps_of` the steps of a batch of records; `key` the `row_key` rows are written
    under. Questions already in `rows_path` under `key` are not measured again.
    """
    from .capture import SegmentSpec, capture_token_lists

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows: dict[str, list[float | None]] = {}
    fallback = captured = 0
    with ResumableJsonl(rows_path, key="row") as out:
        resumed = len([r for r in records if f"{key}:{r.qid}" in out.done])
        bar = tqdm(total=len(records), initial=resumed, desc="calibrate (in context)", unit="q",
                   disable=not show_progress)
        for record in records:
            if f"{key}:{record.qid}" in out.done:
                continue
            variants = [with_generic_document(record, k, tokenizer, int(doc_tokens[k]))
                        for k in range(min(k1, len(record.docs)))]
            values: list[float | None] = [None] * k1
            for start in range(0, len(variants), batch_size):
                chunk = variants[start : start + batch_size]
                replies = steps_of(chunk)
                fallback += sum(r.status != "ok" for r in replies)
                seqs = [build_sequence(v, p) for v, p in zip(chunk, replies)]
                specs = [SegmentSpec.of(s.step_spans, [s.doc_spans[start + i]]) for i, s in enumerate(seqs)]
                mats = capture_token_lists(model, [s.input_ids for s in seqs], specs, pad, layers=layers,
                                           max_chunk_bytes=max_chunk_bytes)
                captured += len(seqs)
                for i, m in enumerate(mats):
                    col = m[:, 0].numpy()
                    col = col[~np.isnan(col)]
                    values[start + i] = float(col.mean()) if col.size else None
            out.write(InContextBiasRow(row=f"{key}:{record.qid}", qid=record.qid, bias=values).to_json_dict())
            bar.update(1)
        bar.close()
    for lineno, line in read_jsonl(rows_path):
        row = validate_line(InContextBiasRow, line, rows_path, lineno)
        if row.row.startswith(f"{key}:"):
            rows[row.qid] = row.bias
    table = np.array([[math.nan if v is None else v for v in rows[r.qid]] for r in records if r.qid in rows],
                     dtype=np.float64)
    counts = (~np.isnan(table)).sum(axis=0)
    if (counts == 0).any():
        missing = [int(k) for k in np.flatnonzero(counts == 0)]
        raise ValueError(f"no calibration question has a document at positions {missing}: use more questions "
                         "(teacher.calibration_questions) or candidates with data.k1 documents")
    return InContextBias(np.nanmean(table, axis=0), table, captured, resumed, fallback)
