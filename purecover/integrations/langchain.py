"""LangChain: `PurecoverCompressor`, a `BaseDocumentCompressor` keeping the documents the selector selects.

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from purecover.integrations.langchain import PurecoverCompressor

    compressor = PurecoverCompressor.from_pretrained("runs/demo/selector")   # or .from_url("http://host:8000")
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=my_retriever)
    docs = retriever.invoke("Who ...?")   # the selected set, best first; scores in doc.metadata

Needs ``pip install -e '.[langchain]'`` (langchain-core). Each document's ``page_content`` is the
passage text and ``metadata[title_key]`` (default "title") its title when present. Returned
documents are copies carrying the keys of `purecover.integrations._common.METADATA_KEYS`; the
inputs are not modified. More than k1 documents: see `overflow` (docs/guides/langchain.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"purecover's LangChain adapter needs langchain-core ({exc}): "
                      "pip install -e '.[langchain]'") from exc
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ._common import (
    SelectionCounters,
    check_selector,
    check_settings,
    kept_metadata,
    load_selector,
    run_selection,
    title_of,
)

__all__ = ["PurecoverCompressor"]


class PurecoverCompressor(BaseDocumentCompressor):
    """Keep the documents a purecover selector selects for the query, best first.

    `selector`: a `purecover.models.selector.Selector` or `purecover.serve.client.RemoteSelector`
    (or use `from_pretrained` / `from_url`). `k_max`, `threshold` (in the selector's score space) and
    `min_select` override the calibrated values; None keeps the selector's own. `overflow`: more
    than k1 documents are ``"truncate"``-d to the first k1 (counted in `counters`) or refused
    (``"error"``). `include_unselected`: also return the other scored documents after the selected
    ones (``metadata["purecover_selected"]`` tells them apart). `title_key`: the metadata key holding a
    document's title (None: no titles).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    selector: Any = Field(exclude=True, description="a purecover Selector or RemoteSelector")
    k_max: int | None = None
    threshold: float | None = None
    min_select: int | None = None
    overflow: Literal["truncate", "error"] = "truncate"
    include_unselected: bool = False
    title_key: str | None = "title"
    _counters: SelectionCounters = PrivateAttr(default_factory=SelectionCounters)

    @field_validator("selector")
    @classmethod
    def _check_selector(cls, value: Any) -> Any:
        return check_selector(value)

    @model_validator(mode="after")
    def _check_settings(self) -> PurecoverCompressor:
        check_settings(k_max=self.k_max, threshold=self.threshold, min_select=self.min_select, overflow=self.overflow)
        return self

    @classmethod
    def from_pretrained(cls, selector_dir: str | Path, *, backend: str = "hf", device: str = "auto",
                        dtype: str = "auto", batch_size: int = 8, **fields: Any) -> PurecoverCompressor:
        """Load the selector directory in this process (`Selector.from_pretrained`); `fields`: the
        compressor's settings (k_max, threshold, overflow, ...)."""
        return cls(selector=load_selector(selector_dir, backend=backend, device=device, dtype=dtype,
                                          batch_size=batch_size), **fields)

    @classmethod
    def from_url(cls, base_url: str, api_key: str | None = None, *, timeout: float = 60.0,
                 **fields: Any) -> PurecoverCompressor:
        """Call a running ``purecover serve`` at `base_url` (`RemoteSelector`; `api_key` sent as a Bearer
        token); `fields`: the compressor's settings."""
        return cls(selector=load_selector(base_url=base_url, api_key=api_key, timeout=timeout), **fields)

    @property
    def counters(self) -> SelectionCounters:
        """Calls made and documents dropped beyond k1 so far."""
        return self._counters

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        """The selected documents (copies, best first) with the purecover metadata; [] for no documents.

        The default `acompress_documents` of the base class runs this in a worker thread, which suits
        both the in-process model and the blocking remote client.
        """
        docs = list(documents)
        pairs = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}]: expected a langchain Document, got {type(doc).__name__}")
            pairs.append((title_of(doc.metadata, self.title_key), doc.page_content))
        if not pairs:
            return []
        selection = run_selection(self.selector, query, pairs, k_max=self.k_max, threshold=self.threshold,
                                  min_select=self.min_select, overflow=self.overflow,
                                  include_unselected=self.include_unselected)
        self._counters.record(selection, int(self.selector.k1), len(docs))
        return [docs[item.position].model_copy(
                    update={"metadata": {**docs[item.position].metadata, **kept_metadata(item, selection)}})
                for item in selection.kept]

    def close(self) -> None:
        """Release the selector (the model's memory, or the remote client's connections)."""
        close = getattr(self.selector, "close", None)
        if callable(close):
            close()
