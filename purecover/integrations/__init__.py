"""The selector inside RAG frameworks: a LangChain document compressor, a LlamaIndex node postprocessor
and a Haystack component, each keeping the variable-size set the selector chooses (threshold τ3).

    from purecover.integrations.langchain import PurecoverCompressor          # pip install -e '.[langchain]'
    from purecover.integrations.llamaindex import PurecoverNodePostprocessor  # pip install -e '.[llamaindex]'
    from purecover.integrations.haystack import PurecoverSelector             # pip install -e '.[haystack]'

Each runs an in-process `purecover.models.selector.Selector` or calls a running ``purecover serve``
(`purecover.serve.client.RemoteSelector`). This package imports no framework itself: the names
above are loaded on first access, so ``import purecover.integrations`` works without the extras.
Shared behaviour (metadata keys, more than k1 documents) lives in `purecover.integrations._common`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._common import METADATA_KEYS, OVERFLOW_POLICIES, SelectorLike

__all__ = ["METADATA_KEYS", "OVERFLOW_POLICIES", "PurecoverCompressor", "PurecoverNodePostprocessor",
           "PurecoverSelector", "SelectorLike"]

_LAZY = {"PurecoverCompressor": "langchain", "PurecoverNodePostprocessor": "llamaindex",
         "PurecoverSelector": "haystack"}


def __getattr__(name: str) -> Any:
    """The adapters, imported on first access (each needs its framework's extra)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
