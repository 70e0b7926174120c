"""Position-bias calibration and the bias.json contract (`purecover.records.BiasFile`).

Bias(k) is the mean attention from the steps of a fixed, content-free reasoning trace to the
k-th of K1 content-free documents, in one teacher pass over the same prompt template. The
bias is a per-token mean, so its scale depends on document length: the dummy documents are
cut to the candidates' token lengths (`document_token_lengths`: the bias is compared with attention over
documents of those lengths). It is computed
once per (model, K1, template, layers, document lengths) and stored in ``bias.json`` with
those keys; labelling with a bias file whose keys differ is an error naming the key.

The model is matched on its weights, not on the path string: key ``weights`` is a cheap
fingerprint (`weights_fingerprint`): for a local directory, a hash of config.json, the
safetensors index and the name, size and a few small byte samples of every ``*.safetensors``
file; for a Hub id, the commit of the cached snapshot. Key ``model`` stays for display only,
so the same model copied elsewhere still matches and another model saved at the same path does not.

This module imports torch only inside `compute_position_bias`, so the length helpers are
cheap to use from the pipeline's planning step.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..models.prompt_tokens import encode_plain
from ..records import (
    BiasDocTokens,
    BiasFile,
    BiasKeys,
    CandidateDoc,
    CandidateRecord,
    LengthSource,
    RecordError,
    load_json_record,
    validate_line,
)
from ..utils.io import atomic_write_json, read_jsonl
from ..utils.provenance import package_versions
from .prompts import (
    ReasoningPrompt,
    TeacherSequence,
    build_attention_prompt,
    build_teacher_sequence,
    document_body,
    template_key,
)

__all__ = [
    "BIAS_FILE",
    "LENGTH_RECORDS",
    "BiasMismatchError",
    "CalibrationLengths",
    "PositionBias",
    "bias_keys",
    "calibration_keys",
    "calibration_lengths",
    "calibration_sequence",
    "compute_position_bias",
    "cut_to_tokens",
    "document_bodies",
    "document_token_lengths",
    "dummy_document",
    "length_source",
    "load_bias",
    "read_bias_file",
    "read_length_records",
    "save_bias",
    "weights_fingerprint",
]

BIAS_FILE = "bias.json"
CANDIDATES_FILE = "candidates.jsonl"  # = purecover.data.data_stage.CANDIDATES_FILE (not imported: it is heavy)
LENGTH_RECORDS = 500  # candidates records the document lengths are measured on (the first ones in the file)
DUMMY_QUESTION = "What does the information in these documents say?"
FILLER_TITLE = "N/A"
FILLER_SENTENCE = "This placeholder text holds no information."
DUMMY_STEPS = (
    "The first document gives no relevant information.",
    "Another document also gives no relevant information.",
    "None of the documents contains the needed fact.",
    "Combining these observations does not lead to a conclusion.",
    "Therefore, the answer cannot be determined from the documents.",
)
DUMMY_ANSWER = "N/A"
_MISSING_HINT = "run `purecover data` first, or set teacher.calibration_lengths to a token count"
_RECALIBRATE = "rerun `purecover calibrate` for this configuration"


class BiasMismatchError(ValueError):
    """bias.json was computed for another model, K1, template, layer set or document lengths."""


# --------------------------------------------------------------------------- document lengths


@dataclass(frozen=True)
class CalibrationLengths:
    """Target token length of each dummy document, shape (K1,), and where the lengths come from."""

    target: list[int]
    source: LengthSource

    def summary(self) -> dict[str, int]:
        return {"min": min(self.target), "median": int(np.median(self.target)), "max": max(self.target)}


def document_bodies(docs: Sequence[CandidateDoc]) -> list[str]:
    """Each document's body (title + text) exactly as the teacher prompt renders it."""
    return [document_body(d) for d in docs]


def read_length_records(path: str | Path, limit: int = LENGTH_RECORDS) -> list[CandidateRecord]:
    """The first `limit` records of a candidates.jsonl (only their ``docs`` are used), each checked as a
    `CandidateRecord` (errors name line and field); the rest of the file is not read."""
    records: list[CandidateRecord] = []
    reader = read_jsonl(path)
    try:
        for lineno, rec in reader:
            records.append(validate_line(CandidateRecord, rec, path, lineno))
            if len(records) >= limit:
                break
    finally:
        reader.close()
    return records


def _median(values: Sequence[int]) -> int:
    return max(1, int(np.floor(np.median(values) + 0.5)))


def document_token_lengths(tokenizer: Any, candidates: Sequence[CandidateRecord] | None, k1: int,
                           setting: str | int) -> list[int]:
    """Target token length per position k = 0..K1-1 (tokens of the document body, no special tokens).

    ``setting`` an int: that many tokens at every position. ``"candidates"``: at each position,
    the median length of the documents at that position over the first `LENGTH_RECORDS`
    records of `candidates`; positions no record fills use the median over all positions.
    """
    if isinstance(setting, int) and not isinstance(setting, bool):
        if setting < 1:
            raise ValueError(f"calibration_lengths must be >= 1 tokens, got {setting}")
        return [setting] * k1
    if setting != "candidates":
        raise ValueError(f"calibration_lengths must be 'candidates' or a token count, got {setting!r}")
    if candidates is None:
        raise ValueError(f"calibration_lengths='candidates' needs the candidates: {_MISSING_HINT}")
    bodies = [document_bodies(rec.docs)[:k1] for rec in candidates[:LENGTH_RECORDS]]
    flat = [b for row in bodies for b in row]
    if not flat:
        raise ValueError(f"the candidates hold no documents to measure: {_MISSING_HINT}")
    ids = tokenizer(flat, add_special_tokens=False, split_special_tokens=True)["input_ids"]  # passages: plain text
    per_pos: list[list[int]] = [[] for _ in range(k1)]
    i = 0
    for row in bodies:
        for k in range(len(row)):
            per_pos[k].append(len(ids[i]))
            i += 1
    overall = _median([len(x) for x in ids])
    return [_median(v) if v else overall for v in per_pos]


def _fingerprint(candidates: Sequence[CandidateRecord], k1: int) -> str:
    """Hash of the document bodies the lengths are measured on (K1 positions of the first records)."""
    bodies = [document_bodies(rec.docs)[:k1] for rec in candidates[:LENGTH_RECORDS]]
    return hashlib.sha256(json.dumps([k1, bodies], ensure_ascii=False).encode()).hexdigest()[:16]


def _length_records(setting: str | int, candidates_path: str | Path) -> list[CandidateRecord] | None:
    if setting != "candidates":
        return None
    path = Path(candidates_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist and teacher.calibration_lengths is 'candidates': "
                                f"{_MISSING_HINT}")
    return read_length_records(path)


def _source(k1: int, setting: str | int, path: str | Path, records: list[CandidateRecord] | None) -> LengthSource:
    if records is None:
        return LengthSource(setting=setting)
    return LengthSource(setting="candidates", file=Path(path).name, records=len(records),
                        fingerprint=_fingerprint(records, k1))


def length_source(k1: int, setting: str | int, candidates_path: str | Path) -> LengthSource:
    """Where the lengths come from, without a tokenizer: the setting, or the candidates' fingerprint.

    Raises FileNotFoundError (one line, with the fix) when ``"candidates"`` and the file is missing.
    """
    return _source(k1, setting, candidates_path, _length_records(setting, candidates_path))


def calibration_lengths(tokenizer: Any, k1: int, setting: str | int, candidates_path: str | Path) -> CalibrationLengths:
    """The dummy documents' target lengths for this run (reads `candidates_path` only for ``"candidates"``)."""
    records = _length_records(setting, candidates_path)
    return CalibrationLengths(document_token_lengths(tokenizer, records, k1, setting),
                              _source(k1, setting, candidates_path, records))


_SAMPLE_BYTES = 4096
_SAMPLES = (0.0, 0.25, 0.5, 0.75, 1.0)  # where in each weights file's tensor data a sample is read


def _sample_safetensors(path: Path, size: int) -> bytes:
    """A few small slices of a safetensors file's tensor data (its header is shared by every model
    of one architecture; the data is what tells two of them apart). Reads ~20 KiB, not the weights."""
    out = []
    with path.open("rb") as fh:
        head = fh.read(8)
        start = min(size, 8 + int.from_bytes(head, "little")) if len(head) == 8 else 0
        span = max(0, size - start - _SAMPLE_BYTES)
        for where in _SAMPLES:
            fh.seek(start + int(span * where))
            out.append(fh.read(_SAMPLE_BYTES))
    return b"".join(out)


def _local_fingerprint(directory: Path) -> str:
    digest = hashlib.sha256()
    config = directory / "config.json"
    digest.update(b"config.json\0" + (config.read_bytes() if config.is_file() else b"-"))
    for path in sorted(directory.iterdir()):
        if path.name.endswith(".safetensors.index.json"):
            digest.update(f"\0{path.name}\0".encode() + path.read_bytes())
        elif path.name.endswith(".safetensors") and path.is_file():
            size = path.stat().st_size
            digest.update(f"\0{path.name}\0{size}\0".encode() + _sample_safetensors(path, size))
    return "sha256:" + digest.hexdigest()[:32]


def _hub_commit(repo_id: str) -> str | None:
    """The commit of the cached snapshot `from_pretrained` loads `repo_id` from (None: not cached)."""
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of transformers
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
        if isinstance(found, str):
            return Path(found).parent.name  # .../snapshots/<commit>/config.json
        ref = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
        return (ref.read_text(encoding="utf-8").strip() or None) if ref.is_file() else None
    except (OSError, ValueError):  # HFValidationError (not an owner/name id) is a ValueError
        return None


def weights_fingerprint(model_name: str) -> str:
    """A cheap identity of the weights `model_name` loads, for matching a bias.json to its teacher.

    A local directory: ``sha256:...`` over config.json, any ``*.safetensors.index.json``, and the
    name, byte size and five 4 KiB samples of every ``*.safetensors`` file (the same files copied
    to another path give the same value). A Hub id: ``hub:ID@COMMIT`` when a snapshot is in the
    local Hugging Face cache, else ``hub:ID``. A GGUF file or catalogue model (once converted): ``gguf:sha256:...``
    of the GGUF file.
    """
    from ..models.loading import model_source

    source = model_source(model_name)  # a GGUF file or catalogue model: the file's content names the weights
    if source is not None:
        return f"gguf:sha256:{source.sha256}"
    local = Path(model_name).expanduser()
    if local.is_dir():
        return _local_fingerprint(local)
    commit = _hub_commit(model_name)
    return f"hub:{model_name}@{commit}" if commit else f"hub:{model_name}"


def bias_keys(model_name: str, k1: int, tokenizer: Any, layers: str | Sequence[int],
              doc_tokens: Sequence[int], weights: str | None = None,
              prompt: ReasoningPrompt | None = None, layers_read: Sequence[int] | None = None,
              procedure: str | None = None) -> BiasKeys:
    """The identity of a calibration: what must match for a bias vector to be valid.

    `weights` defaults to `weights_fingerprint(model_name)`; ``model`` is kept for display.
    ``template`` hashes the reasoning prompt's wording (`prompt`, default ours) and the chat template.
    `layers` is ``teacher.layers`` as given; `layers_read` the layer indices it resolves to on the teacher
    (`purecover.teacher.layers.LayerPlan.read`), recorded when given; `procedure` the in-context procedure's
    identity (`purecover.teacher.in_context_calibration.procedure_for`), None for the fixed one.
    """
    optional: dict[str, Any] = {"layers_read": [int(i) for i in layers_read]} if layers_read is not None else {}
    if procedure is not None:
        optional["procedure"] = procedure
    return BiasKeys(model=model_name,
                    weights=weights if weights is not None else weights_fingerprint(model_name),
                    k1=int(k1), template=template_key(tokenizer, prompt),
                    layers=layers if isinstance(layers, str) else [int(i) for i in layers],
                    doc_tokens=[int(n) for n in doc_tokens], **optional)


def calibration_keys(model_name: str, k1: int, tokenizer: Any, layers: str | Sequence[int], setting: str | int,
                     candidates_path: str | Path, prompt: ReasoningPrompt | None = None,
                     layers_read: Sequence[int] | None = None, procedure: str | None = None
                     ) -> tuple[BiasKeys, CalibrationLengths]:
    """The bias keys of a run and its target lengths: the one helper the calibrate and label stages share
    (both pass the resolved `layers_read` and the procedure, so a bias computed from other layers or another way
    is refused)."""
    lengths = calibration_lengths(tokenizer, k1, setting, candidates_path)
    return bias_keys(model_name, k1, tokenizer, layers, lengths.target, prompt=prompt,
                     layers_read=layers_read, procedure=procedure), lengths


# --------------------------------------------------------------------------- bias


def cut_to_tokens(tokenizer: Any, head: str, n_tokens: int, filler: str = FILLER_SENTENCE) -> str:
    """`head` + `filler` repeated, cut after its first `n_tokens` tokens."""
    reps = max(2, n_tokens // 4 + 2)
    while True:
        text = head + " ".join([filler] * reps)
        enc = encode_plain(tokenizer, text, offsets=True)
        if len(enc["input_ids"]) >= n_tokens:
            return text[: enc["offset_mapping"][n_tokens - 1][1]]
        reps *= 2


def dummy_document(tokenizer: Any, n_tokens: int, title: str = FILLER_TITLE, filler: str = FILLER_SENTENCE
                   ) -> CandidateDoc:
    """A content-free document whose body (`title` + newline + `filler` repeated; default ``N/A`` and a placeholder
    sentence) is `n_tokens` tokens on its own.

    Too short for the title and some text: the filler alone, without a title.
    """
    head, _, text = cut_to_tokens(tokenizer, title + "\n", n_tokens, filler).partition("\n")
    if not text.strip():
        return CandidateDoc(title="", text=cut_to_tokens(tokenizer, "", n_tokens, filler))
    return CandidateDoc(title=head, text=text)


@dataclass
class PositionBias:
    """Bias(k), shape (K1,), mean attention per token pair; `doc_tokens`: each dummy's measured token length."""

    bias: np.ndarray
    doc_tokens: list[int]


def calibration_sequence(tokenizer: Any, doc_tokens: Sequence[int],
                         prompt: ReasoningPrompt | None = None) -> TeacherSequence:
    """The calibration's teacher sequence: the dummy question, K1 = len(doc_tokens) dummy documents (document k
    cut to `doc_tokens[k]` tokens) and the fixed dummy reasoning trace, with its token spans."""
    docs = [dummy_document(tokenizer, int(n)) for n in doc_tokens]
    text, doc_chars = build_attention_prompt(tokenizer, DUMMY_QUESTION, docs, prompt)
    return build_teacher_sequence(tokenizer, text, doc_chars, list(DUMMY_STEPS), DUMMY_ANSWER)


def compute_position_bias(model: Any, tokenizer: Any, doc_tokens: Sequence[int], layers: str | Sequence[int] = "all",
                          max_chunk_bytes: int = 256 << 20, prompt: ReasoningPrompt | None = None) -> PositionBias:
    """Bias(k), k = 1..K1 (K1 = len(doc_tokens)): mean over dummy steps of Attn(dummy step, dummy document k).

    Dummy document k is cut to `doc_tokens[k]` tokens (`calibration_sequence`); the lengths obtained inside the
    built sequence (token spans) are returned with the bias. `layers`: as `capture_segment_attention` takes them
    (the calibrate stage passes the resolved indices, the label stage's). `prompt`: the reasoning prompt's
    wording (default ours), the same as the label stage's.
    """
    import torch

    from .capture import SegmentSpec, capture_segment_attention

    seq = calibration_sequence(tokenizer, doc_tokens, prompt)
    device = next(model.parameters()).device
    ids = torch.tensor([seq.input_ids], device=device)
    spec = SegmentSpec.of(seq.step_spans, seq.doc_spans)
    (matrix,) = capture_segment_attention(model, ids, torch.ones_like(ids), [spec], layers=layers,
                                          max_chunk_bytes=max_chunk_bytes)
    return PositionBias(matrix.numpy().mean(axis=0), [b - a for a, b in seq.doc_spans])


def save_bias(path: str | Path, bias: PositionBias, keys: BiasKeys, lengths: CalibrationLengths,
              prompt: ReasoningPrompt | None = None) -> None:
    """Write bias.json: keys, Bias(k), the dummy lengths (target, measured, their source) and the reasoning
    prompt's wording (`ReasoningPrompt.record`, which `purecover.teacher.bias_fingerprint.bias_inputs_fingerprint` hashes
    without a tokenizer)."""
    record = BiasFile(
        keys=keys, bias=[float(x) for x in bias.bias], n_dummy_steps=len(DUMMY_STEPS),
        prompt=(prompt or ReasoningPrompt.default()).record(),
        doc_tokens=BiasDocTokens(target=list(lengths.target), measured=list(bias.doc_tokens), source=lengths.source),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), versions=package_versions(),
    )
    atomic_write_json(path, record.to_json_dict())


def read_bias_file(path: str | Path) -> BiasFile | None:
    """bias.json as a `BiasFile`; None when it is absent, unreadable or not a valid bias file (for the
    checks that only decide whether to recalibrate)."""
    try:
        return load_json_record(path, BiasFile)
    except (OSError, RecordError):
        return None


def load_bias(path: str | Path, expected: BiasKeys) -> tuple[np.ndarray, str]:
    """The bias vector and its key string; raises BiasMismatchError naming the first differing key (and
    a `RecordError` naming the field when the file is not a valid bias.json).

    Every key `expected` holds is compared (in its order) with the file's, but ``model`` when ``weights`` is
    there: a key the file lacks (an early version's) differs from any value.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `purecover calibrate RECIPE` first "
                                "(or set teacher.calibrate=false)")
    record = load_json_record(path, BiasFile, hint=_RECALIBRATE)
    keys = record.keys
    written = keys.to_json_dict()
    wanted = expected.to_json_dict()
    for name, value in wanted.items():
        if name == "model" and "weights" in wanted:
            continue  # display only: the weights fingerprint decides
        if name == "weights" and written.get(name) != value:
            raise BiasMismatchError(_weights_mismatch(path, keys, expected))
        if written.get(name) != value:
            raise BiasMismatchError(
                f"{path}: calibration key {name!r} differs: the file has {written.get(name)!r}, this run needs "
                f"{value!r}; {_RECALIBRATE}"
            )
    if written.get("procedure") != wanted.get("procedure"):  # a key only one side may have: compared both ways
        raise BiasMismatchError(
            f"{path}: calibration key 'procedure' differs: the file has {written.get('procedure')!r} (null: the "
            f"fixed procedure), this run needs {wanted.get('procedure')!r}; {_RECALIBRATE}")
    bias = np.asarray(record.bias, dtype=np.float64)
    if bias.shape[0] != expected.k1:
        raise BiasMismatchError(f"{path}: {bias.shape[0]} bias values for k1={expected.k1}")
    return bias, key_string(keys)


def _weights_mismatch(path: Path, keys: BiasKeys, expected: BiasKeys) -> str:
    if keys.weights is None:
        return (f"{path}: calibration key 'weights' is missing: the file was written before bias.json recorded a "
                f"fingerprint of the teacher's weights (teacher {keys.model!r}), so it cannot be matched to "
                f"this run's teacher {expected.model!r}; rerun `purecover calibrate` for this configuration")
    return (f"{path}: calibration key 'weights' differs: the file has {keys.weights!r} (teacher "
            f"{keys.model!r}), this run needs {expected.weights!r} (teacher {expected.model!r}): "
            "the bias was computed with other model weights; rerun `purecover calibrate` for this configuration")


def key_string(keys: BiasKeys) -> str:
    """Compact printable form of the keys (stored as labels.jsonl's `bias_key`): the keys as written (a file's
    own keys, unknown ones included), sorted."""
    return json.dumps(keys.to_json_dict(), sort_keys=True, separators=(",", ":"))
