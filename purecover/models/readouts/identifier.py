"""The identifier readout (the paper's): candidate k's score is the logit of its identifier's first token at the
first reply position, after the whole prompt. One forward pass reads every candidate; vLLM can read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import Readout

__all__ = ["IDENTIFIER", "LAYOUT_VERSION", "IdentifierReadout"]

LAYOUT_VERSION = "selector-layout-v1"


@dataclass(frozen=True)
class IdentifierReadout(Readout):
    def scores(self, backend: Any, prompts: Sequence[Sequence[int]], identifier_ids: Sequence[Sequence[int]],
               read_positions: Sequence[Sequence[int]], read_token: int | None) -> list[list[float]]:
        return backend.identifier_logits(prompts, identifier_ids)


IDENTIFIER = IdentifierReadout(
    name="identifier", readout="identifier", passage_score="token", layout=LAYOUT_VERSION, marker="", vllm=True,
    usage_template="model_card_usage_transformers.md",
    card_sentence="the first-token logit of each candidate's identifier")
