"""What a readout is: where a trained selector reads each candidate's score, and everything that follows from it.

A readout owns its prompt layout (the layout version recorded in selector_config.json's ``prompt_template`` and
the marker written after each passage), its scores (how a backend reads them, and whether vLLM can), its
training score (the token it reads and the head it trains, if any) and its model-card text. The registry
(`purecover.models.readouts`) maps the recipe's ``student.readout`` / ``student.passage_score`` pair, which
selector_config.json records under the same keys, to one `Readout`.

Light on purpose: importing a readout imports neither torch nor transformers (the recipe check and the dry run
read the registry); the score head and the scoring code are imported when used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Readout"]


@dataclass(frozen=True)
class Readout:
    """One readout. Subclasses fill the fields and override the methods whose default does not fit.

    `name`: the registry's name; `readout` / `passage_score`: the recipe and selector_config.json values that
    select it; `layout`: the prompt layout version it renders (selector_config.json ``prompt_template.layout``);
    `marker`: the text written after each passage body ("" for none; scores are then read after the prompt);
    `vllm`: whether the vLLM backend can read it; `usage_template`: the model card's usage file (a merged
    export; an adapter export has its own); `card_sentence`: what the card says the score is."""

    name: str
    readout: str
    passage_score: str
    layout: str
    marker: str
    vllm: bool
    usage_template: str
    card_sentence: str

    @property
    def reads_at_markers(self) -> bool:
        """Whether each passage's score is read at its marker (the prompt keeps the markers' positions)."""
        return bool(self.marker)

    @property
    def has_head(self) -> bool:
        """Whether it scores with a trained head saved as score_head.safetensors beside the weights."""
        return False

    def read_token(self, tokenizer: Any) -> int | None:
        """The token id whose logit is the score at each marker (checked to be one known token), or None when
        the scores are not a token's logit at markers."""
        return None

    def new_head(self, model: Any, read_token: int | None) -> Any:
        """The scoring head to train with the adapter (a `ScoreHead`), or None."""
        return None

    def load_head(self, directory: str | Path, hidden_size: int | None = None) -> Any:
        """The trained head saved in `directory` (a `ScoreHead`, checked; against `hidden_size` when given), or
        None when it has none."""
        return None

    def check_backend(self, backend: Any) -> None:
        """ValueError when the selector backend `backend` cannot read these scores."""

    def scores(self, backend: Any, prompts: Sequence[Sequence[int]], identifier_ids: Sequence[Sequence[int]],
               read_positions: Sequence[Sequence[int]], read_token: int | None) -> list[list[float]]:
        """One score per candidate of each prompt (raw logits: the selector's threshold applies to them)."""
        raise NotImplementedError
