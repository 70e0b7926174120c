"""Position-bias calibration (DESIGN §3.2) and the bias.json contract.

Bias(k) is the mean attention from the steps of a fixed, content-free reasoning trace to the
k-th of K1 content-free documents, in one teacher pass over the same prompt template. It is
computed once per (model, K1, template, layers) and stored in ``bias.json`` with those keys;
labelling with a bias file whose keys differ is an error naming the key.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..utils.io import atomic_write_json
from ..utils.provenance import package_versions
from .capture import SegmentSpec, capture_segment_attention
from .prompts import build_reasoning_prompt, build_teacher_sequence, template_key

__all__ = ["BIAS_FILE", "BiasMismatchError", "bias_keys", "compute_position_bias", "load_bias", "save_bias"]

BIAS_FILE = "bias.json"
DUMMY_QUESTION = "What does the information in these documents say?"
DUMMY_DOC = {"title": "N/A", "text": "This document contains no information. N/A."}
DUMMY_STEPS = (
    "The first document gives no relevant information.",
    "Another document also gives no relevant information.",
    "None of the documents contains the needed fact.",
    "Combining these observations does not lead to a conclusion.",
    "Therefore, the answer cannot be determined from the documents.",
)
DUMMY_ANSWER = "N/A"


class BiasMismatchError(ValueError):
    """bias.json was computed for another model, K1, template or layer set."""


def bias_keys(model_name: str, k1: int, tokenizer: Any, layers: str | Sequence[int]) -> dict[str, Any]:
    """The identity of a calibration: what must match for a bias vector to be valid."""
    return {"model": model_name, "k1": int(k1), "template": template_key(tokenizer),
            "layers": layers if isinstance(layers, str) else [int(i) for i in layers]}


def compute_position_bias(model: Any, tokenizer: Any, k1: int, layers: str | Sequence[int] = "all") -> np.ndarray:
    """Bias(k), k = 1..K1: mean over dummy steps of Attn(dummy step, dummy document k). Shape (K1,)."""
    prompt, doc_chars = build_reasoning_prompt(tokenizer, DUMMY_QUESTION, [DUMMY_DOC] * k1)
    seq = build_teacher_sequence(tokenizer, prompt, doc_chars, list(DUMMY_STEPS), DUMMY_ANSWER)
    device = next(model.parameters()).device
    ids = torch.tensor([seq.input_ids], device=device)
    spec = SegmentSpec.of(seq.step_spans, seq.doc_spans)
    (matrix,) = capture_segment_attention(model, ids, torch.ones_like(ids), [spec], layers=layers)
    return matrix.numpy().mean(axis=0)


def save_bias(path: str | Path, bias: np.ndarray, keys: dict[str, Any]) -> None:
    atomic_write_json(path, {
        "keys": keys, "bias": [float(x) for x in bias], "n_dummy_steps": len(DUMMY_STEPS),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "versions": package_versions(),
    })


def load_bias(path: str | Path, expected: dict[str, Any]) -> tuple[np.ndarray, str]:
    """The bias vector and its key string; raises BiasMismatchError naming the first differing key."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `purecover calibrate RECIPE` first "
                                "(or set teacher.calibrate=false)")
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = data.get("keys", {})
    for name, value in expected.items():
        if keys.get(name) != value:
            raise BiasMismatchError(
                f"{path}: calibration key {name!r} differs: the file has {keys.get(name)!r}, this run needs "
                f"{value!r}; rerun `purecover calibrate` for this configuration"
            )
    bias = np.asarray(data["bias"], dtype=np.float64)
    if bias.shape[0] != expected["k1"]:
        raise BiasMismatchError(f"{path}: {bias.shape[0]} bias values for k1={expected['k1']}")
    return bias, key_string(keys)


def key_string(keys: dict[str, Any]) -> str:
    """Compact printable form of the keys (stored as labels.jsonl's `bias_key`)."""
    return json.dumps(keys, sort_keys=True, separators=(",", ":"))
