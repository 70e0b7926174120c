"""What the LangChain, LlamaIndex and Haystack adapters share: the selector they call, one selection
over a list of (title, text) documents, the policy for more than k1 documents, and the metadata keys.

A selector is anything `SelectorLike`: the in-process `purecover.models.selector.Selector` or the
remote `purecover.serve.client.RemoteSelector` (a running ``purecover serve``). Both answer
``select(question, docs, tau, k_max, min_select)`` with a `SelectionResult` for at most ``k1`` docs.

More than k1 documents (`OVERFLOW_POLICIES`): ``"truncate"`` (default) selects among the first k1
documents in the order given (the retriever's order, best first) and drops the rest: they are not
returned, a warning is logged the first time per adapter, and every dropped document is counted
(`SelectionCounters.documents_dropped`); ``"error"`` raises a ValueError naming k1 instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the selector module imports torch; a remote-only adapter need not pay for it at import
    from ..models.selection_result import SelectionResult

log = logging.getLogger(__name__)

__all__ = [
    "METADATA_KEYS",
    "OVERFLOW_POLICIES",
    "PURECOVER_INDEX",
    "PURECOVER_PROBABILITY",
    "PURECOVER_RANK",
    "PURECOVER_SCORE",
    "PURECOVER_SCORE_SPACE",
    "PURECOVER_SELECTED",
    "PURECOVER_THRESHOLD",
    "Kept",
    "Selection",
    "SelectionCounters",
    "SelectorLike",
    "check_selector",
    "check_settings",
    "kept_metadata",
    "load_selector",
    "run_selection",
    "title_of",
]

# Metadata keys every adapter writes on each returned document.
PURECOVER_SCORE = "purecover_score"  # the selector's score (first-token logit, or log-prob: see score space)
PURECOVER_PROBABILITY = "purecover_probability"  # softmax of the scores over the documents scored together
PURECOVER_RANK = "purecover_rank"  # 1-based position in the returned list (1 = best)
PURECOVER_SELECTED = "purecover_selected"  # True when the selector keeps it (passes the threshold, k_max, min_select)
PURECOVER_THRESHOLD = "purecover_threshold"  # the threshold the score was compared with (same space)
PURECOVER_SCORE_SPACE = "purecover_score_space"  # "logit" or "logprob"
PURECOVER_INDEX = "purecover_index"  # 0-based position of the document in the input list
METADATA_KEYS = (PURECOVER_SCORE, PURECOVER_PROBABILITY, PURECOVER_RANK, PURECOVER_SELECTED, PURECOVER_THRESHOLD,
                 PURECOVER_SCORE_SPACE, PURECOVER_INDEX)

OVERFLOW_POLICIES = ("truncate", "error")


class SelectorLike(Protocol):
    """A selector the adapters can call: `purecover.models.selector.Selector` or
    `purecover.serve.client.RemoteSelector`.

    ``k1``: the most documents one call may score. ``threshold`` (optional attribute): the calibrated
    threshold in the selector's score space, reported in the metadata when present.
    """

    @property
    def k1(self) -> int: ...

    def select(self, question: str, docs: Sequence[Any], tau: float | None = None, k_max: int | None = None,
               min_select: int | None = None) -> SelectionResult: ...


@dataclass(frozen=True)
class Kept:
    """One returned document: `position` in the input list, its `score` and `probability`, its 1-based
    `rank` in the returned list and whether the selector keeps it (`selected`)."""

    position: int
    score: float
    probability: float
    rank: int
    selected: bool


@dataclass(frozen=True)
class Selection:
    """The outcome of `run_selection`: the documents to return, best first, and the call's context.

    `dropped`: documents beyond k1 left out under the ``"truncate"`` policy (0 otherwise).
    `threshold`: the threshold applied (None when the selector does not report one).
    """

    kept: list[Kept]
    score_space: str
    threshold: float | None
    dropped: int = 0


@dataclass
class SelectionCounters:
    """Running counts of one adapter: calls, calls over k1 and documents dropped by ``"truncate"``."""

    calls: int = 0
    overflow_calls: int = 0
    documents_dropped: int = 0
    _warned: bool = field(default=False, repr=False)

    def record(self, selection: Selection, k1: int, received: int) -> None:
        """Count one call; log a warning the first time documents were dropped."""
        self.calls += 1
        if selection.dropped:
            self.overflow_calls += 1
            self.documents_dropped += selection.dropped
            level = logging.DEBUG if self._warned else logging.WARNING
            log.log(level, "%d documents received but the selector scores at most k1=%d: selected among the first "
                    "%d, dropped %d (retrieve at most k1 documents, or pass overflow='error' to refuse)",
                    received, k1, k1, selection.dropped)
            self._warned = True


def check_selector(selector: Any) -> Any:
    """`selector` if it has a ``select`` method (the ``k1`` attribute is read later: a remote selector
    fetches it from the server); a TypeError otherwise."""
    if not callable(getattr(selector, "select", None)):
        hint = " (for a selector directory or a server URL use from_pretrained(...) / from_url(...))" \
            if isinstance(selector, (str, Path)) else ""
        raise TypeError(f"selector: expected a purecover Selector or RemoteSelector (an object with .select and "
                        f".k1), got {type(selector).__name__}{hint}")
    return selector


def check_settings(*, k_max: int | None, threshold: float | None, min_select: int | None, overflow: str) -> None:
    """A ValueError naming the setting when one is out of range."""
    if k_max is not None and (isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1):
        raise ValueError(f"k_max must be an integer >= 1 or None, got {k_max!r}")
    if min_select is not None and (isinstance(min_select, bool) or not isinstance(min_select, int) or min_select < 0):
        raise ValueError(f"min_select must be an integer >= 0 or None, got {min_select!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or math.isnan(threshold)):
        raise ValueError(f"threshold must be a number or None, got {threshold!r}")
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {OVERFLOW_POLICIES}, got {overflow!r}")


def title_of(meta: Any, key: str | None) -> str | None:
    """The title stored under `key` in a metadata mapping (None when absent, empty, or `key` is None);
    a non-string value is converted with str()."""
    if key is None or not isinstance(meta, dict):
        return None
    value = meta.get(key)
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


def run_selection(selector: SelectorLike, question: str, docs: Sequence[tuple[str | None, str]], *,
                  k_max: int | None = None, threshold: float | None = None, min_select: int | None = None,
                  overflow: str = "truncate", include_unselected: bool = False) -> Selection:
    """Select among `docs` ((title, text) pairs in retrieval order) for `question`.

    Returns the kept positions (indices into `docs`) best first with their scores; with
    `include_unselected`, the other scored documents follow, by decreasing score. `k_max`,
    `threshold` (in the selector's score space) and `min_select` override the calibrated values
    (None: the selector's own). Empty `docs` → an empty selection, without calling the selector.
    More than ``selector.k1`` documents: see the module docstring (`overflow`).
    """
    check_settings(k_max=k_max, threshold=threshold, min_select=min_select, overflow=overflow)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"query must be a non-empty string, got {question!r}")
    if not docs:  # nothing to choose from: the selector (maybe a remote one) is not contacted at all
        return Selection(kept=[], score_space="", threshold=threshold)
    for i, (title, text) in enumerate(docs):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"document {i}: its text is empty or not a string ({text!r}); the selector needs the "
                             "passage text")
        if title is not None and not isinstance(title, str):
            raise TypeError(f"document {i}: the title must be a str or None, got {type(title).__name__}")
    k1 = int(selector.k1)
    dropped = 0
    if len(docs) > k1:
        if overflow == "error":
            raise ValueError(f"{len(docs)} documents, but this selector scores at most k1={k1} documents per query; "
                             f"retrieve at most {k1}, or use overflow='truncate' to select among the first {k1}")
        dropped = len(docs) - k1
        docs = docs[:k1]
    rows = [{"text": text, "title": title} if title else {"text": text} for title, text in docs]
    result = selector.select(question, rows, tau=threshold, k_max=k_max, min_select=min_select)
    if len(result.logits) != len(rows):
        raise RuntimeError(f"the selector returned {len(result.logits)} scores for {len(rows)} documents")
    chosen = [int(i) for i in result.indices]
    if any(not 0 <= i < len(rows) for i in chosen):
        raise RuntimeError(f"the selector returned positions {chosen} outside 0..{len(rows) - 1}")
    if len(set(chosen)) != len(chosen):  # never return one document several times
        raise RuntimeError(f"the selector returned positions {chosen} with repeats")
    taken = set(chosen)
    order = list(chosen)
    if include_unselected:
        order += sorted((i for i in range(len(rows)) if i not in taken), key=lambda i: (-result.logits[i], i))
    kept = [Kept(position=i, score=float(result.logits[i]), probability=float(result.probabilities[i]),
                 rank=rank, selected=i in taken) for rank, i in enumerate(order, start=1)]
    applied = float(threshold) if threshold is not None else getattr(selector, "threshold", None)
    return Selection(kept=kept, score_space=result.score_space, threshold=applied, dropped=dropped)


def kept_metadata(item: Kept, selection: Selection) -> dict[str, Any]:
    """The purecover metadata of one returned document (keys: `METADATA_KEYS`)."""
    return {PURECOVER_SCORE: item.score, PURECOVER_PROBABILITY: item.probability, PURECOVER_RANK: item.rank,
            PURECOVER_SELECTED: item.selected, PURECOVER_THRESHOLD: selection.threshold,
            PURECOVER_SCORE_SPACE: selection.score_space, PURECOVER_INDEX: item.position}


def load_selector(selector_dir: str | Path | None = None, *, base_url: str | None = None, api_key: str | None = None,
                  timeout: float = 60.0, backend: str = "hf", device: str = "auto", dtype: str = "auto",
                  batch_size: int = 8, **load_kwargs: Any) -> Any:
    """An in-process `Selector` loaded from `selector_dir`, or a `RemoteSelector` for `base_url` (exactly
    one of the two). `backend`/`device`/`dtype`/`batch_size` and `load_kwargs` go to
    `Selector.from_pretrained`; `api_key`/`timeout` to the remote client."""
    if (selector_dir is None) == (base_url is None):
        raise ValueError("give exactly one of selector_dir (load the selector in this process) or base_url (call "
                         "a running `purecover serve`)")
    if base_url is not None:
        try:
            from ..serve.client import RemoteSelector
        except ImportError as exc:
            raise ImportError(f"calling a remote selector needs httpx ({exc}): pip install -e '.[serve]'") from exc
        return RemoteSelector(base_url, api_key=api_key, timeout=timeout)
    from ..models.selector import Selector

    return Selector.from_pretrained(selector_dir, backend=backend, device=device, dtype=dtype,  # type: ignore[arg-type]
                                    batch_size=batch_size, **load_kwargs)
