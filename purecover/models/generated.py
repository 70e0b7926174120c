"""What a generation backend returns with its text, and the one call that asks any backend for it (no torch: the
label stage's planning and the dry run import this, not `purecover.models.generation`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Generated", "generate_detailed"]


@dataclass(frozen=True)
class Generated:
    """One continuation: its `text` (special tokens removed) and whether it `finished` by itself (an end-of-sequence
    token or the caller's stop) rather than at ``max_new_tokens``; None: the backend cannot tell."""

    text: str
    finished: bool | None


def generate_detailed(backend: Any, prompts: Sequence[str], max_new_tokens: int,
                      stop_when: Callable[[str], bool] | None = None) -> list[Generated]:
    """`backend`'s continuations with how each ended: its ``generate_detailed`` (HF, vLLM), else its plain
    ``generate`` (a custom backend: ``finished`` None). `stop_when(text)`: the HF backend stops a continuation as soon
    as it holds for the text so far (e.g. a closed answer line); the others stop at the end of sequence."""
    if hasattr(backend, "generate_detailed"):
        return list(backend.generate_detailed(prompts, max_new_tokens, stop_when))
    return [Generated(text, None) for text in backend.generate(prompts, max_new_tokens)]
