"""The passage readout (purecover's extension): a marker follows each passage, and passage k's score is the logit
of one fixed token (`READ_TOKEN`, ' yes') at the last token of its marker, where the passage sits rather than
after the whole prompt. Read with transformers only (`purecover.models.passage_scores`); the vLLM backend reads
identifier logits at the first reply position and refuses it (`backend_refusal`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import Readout

__all__ = ["LAYOUT_VERSION", "MARKER", "PASSAGE", "READ_TOKEN", "PassageReadout", "backend_refusal", "read_token_id"]

LAYOUT_VERSION = "selector-layout-passage-v1"
MARKER = "\nRelevant:"  # after each passage body
READ_TOKEN = " yes"  # its logit at the marker's last token is the passage's score


def backend_refusal(backend: str) -> str:
    """The one-line refusal of a backend that cannot read the passage readout."""
    return (f"this selector uses the passage readout (selector_config.json readout: passage), which {backend} "
            "cannot read (it reads identifier logits at the first reply position only); use backend='hf'")


def read_token_id(tokenizer: Any) -> int:
    """The id of `READ_TOKEN` for `tokenizer`; ValueError when it is not exactly one token the tokenizer knows."""
    ids = tokenizer(READ_TOKEN, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"the passage readout reads the logit of {READ_TOKEN!r}, which is {len(ids)} tokens "
                         f"({ids}) for this tokenizer; use student.readout: identifier")
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and int(ids[0]) == int(unk):
        raise ValueError(f"the passage readout reads the logit of {READ_TOKEN!r}, which this tokenizer does "
                         f"not know: it becomes its unknown token {getattr(tokenizer, 'unk_token', None)!r} (id {unk}), "
                         "shared by every unknown word; use student.readout: identifier, or a tokenizer that has it")
    return int(ids[0])


@dataclass(frozen=True)
class PassageReadout(Readout):
    def read_token(self, tokenizer: Any) -> int | None:
        return read_token_id(tokenizer)

    def check_backend(self, backend: Any) -> None:
        if not callable(getattr(backend, "passage_logits", None)):
            raise ValueError(backend_refusal(type(backend).__name__))

    def scores(self, backend: Any, prompts: Sequence[Sequence[int]], identifier_ids: Sequence[Sequence[int]],
               read_positions: Sequence[Sequence[int]], read_token: int | None) -> list[list[float]]:
        return backend.passage_logits(prompts, read_positions, read_token)


PASSAGE = PassageReadout(
    name="passage", readout="passage", passage_score="token", layout=LAYOUT_VERSION, marker=MARKER, vllm=False,
    usage_template="model_card_usage_passage.md",
    card_sentence="the logit of ' yes' at a marker after each candidate (the passage readout, purecover's extension)")
