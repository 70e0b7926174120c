"""The passage readout with a trained head (``passage_score: head``): the passage readout's prompt and markers,
with passage k's score a linear head on the hidden state at its marker (`purecover.models.score_head`), started
as the read token's logit and trained with the adapter, saved as score_head.safetensors beside the weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .passage import LAYOUT_VERSION, MARKER, PassageReadout

__all__ = ["PASSAGE_HEAD", "PassageHeadReadout"]


@dataclass(frozen=True)
class PassageHeadReadout(PassageReadout):
    @property
    def has_head(self) -> bool:
        return True

    def new_head(self, model: Any, read_token: int | None) -> Any:
        from ..score_head import ScoreHead

        if read_token is None:
            raise ValueError("the scoring head starts as the read token's logit: read_token is needed")
        return ScoreHead.from_token(model, read_token)

    def load_head(self, directory: str | Path, hidden_size: int | None = None) -> Any:
        from ..score_head import ScoreHead

        return ScoreHead.load(directory, hidden_size=hidden_size)

    def check_backend(self, backend: Any) -> None:
        super().check_backend(backend)
        if getattr(backend, "head_readout", None) is None:
            raise ValueError(f"this selector scores each passage with a trained head (selector_config.json "
                             f"passage_score: head), which {type(backend).__name__} does not load; use "
                             "backend='hf'")


PASSAGE_HEAD = PassageHeadReadout(
    name="passage_head", readout="passage", passage_score="head", layout=LAYOUT_VERSION, marker=MARKER, vllm=False,
    usage_template="model_card_usage_passage_head.md",
    card_sentence="a trained linear head (score_head.safetensors) on the hidden state at a marker after each "
                  "candidate (the passage readout, purecover's extension)")
