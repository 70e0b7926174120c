"""Haystack: `PurecoverSelector`, a component keeping the documents the selector selects.

    from haystack import Pipeline
    from purecover.integrations.haystack import PurecoverSelector

    pipe = Pipeline()
    pipe.add_component("retriever", retriever)
    pipe.add_component("selector", PurecoverSelector("runs/demo/selector"))   # or base_url="http://host:8000"
    pipe.connect("retriever.documents", "selector.documents")
    out = pipe.run({"retriever": {"query": q}, "selector": {"query": q}})["selector"]["documents"]

Needs ``pip install -e '.[haystack]'`` (haystack-ai). A document's ``content`` is the passage
text and ``meta[title_key]`` (default "title") its title when present. Returned documents are
copies (`dataclasses.replace`): ``score`` is the selector's score and ``meta`` carries the keys of
`purecover.integrations._common.METADATA_KEYS`. The model is loaded (or the server's k1 read)
by `warm_up`, which a `Pipeline` calls before running; a standalone `run` warms up itself.
More than k1 documents: see `overflow` (docs/guides/haystack.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

try:
    from haystack import Document, component, default_from_dict, default_to_dict
    from haystack.core.errors import SerializationError
    from haystack.utils import Secret, deserialize_secrets_inplace
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"purecover's Haystack adapter needs haystack-ai ({exc}): "
                      "pip install -e '.[haystack]'") from exc

from ._common import (
    SelectionCounters,
    check_selector,
    check_settings,
    kept_metadata,
    load_selector,
    run_selection,
    title_of,
)

__all__ = ["API_KEY_ENV", "PurecoverSelector"]

API_KEY_ENV = "PURECOVER_API_KEY"  # where the default `api_key` secret reads the server's key
_DEFAULT_API_KEY = Secret.from_env_var(API_KEY_ENV, strict=False)  # an immutable secret: safe as a shared default


@component
class PurecoverSelector:
    """Keep the documents a purecover selector selects for the query, best first.

    Exactly one of `selector_dir` (load the selector in this process: `backend`, `device`, `dtype`,
    `batch_size` as in `Selector.from_pretrained`), `base_url` (call a running ``purecover serve``;
    `api_key` is a Haystack `Secret`, by default the ``PURECOVER_API_KEY`` environment variable if
    set; `timeout` in seconds) or `selector` (a ready `Selector` / `RemoteSelector`; such a component
    cannot be serialised). `k_max`, `threshold` (selector's score space), `min_select` override the
    calibrated values (also per call in `run`); `overflow` ("truncate" | "error") handles more than
    k1 documents; `include_unselected` also returns the other scored documents after the selected ones.
    """

    def __init__(self, selector_dir: str | Path | None = None, *, base_url: str | None = None,
                 api_key: Secret | None = _DEFAULT_API_KEY, timeout: float = 60.0,
                 backend: str = "hf", device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                 k_max: int | None = None, threshold: float | None = None, min_select: int | None = None,
                 overflow: str = "truncate", include_unselected: bool = False, title_key: str | None = "title",
                 selector: Any = None) -> None:
        given = [name for name, value in (("selector_dir", selector_dir), ("base_url", base_url),
                                          ("selector", selector)) if value is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of selector_dir, base_url or selector (got {given or 'none'})")
        check_settings(k_max=k_max, threshold=threshold, min_select=min_select, overflow=overflow)
        self.selector_dir = str(selector_dir) if selector_dir is not None else None
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.backend, self.device, self.dtype, self.batch_size = backend, device, dtype, batch_size
        self.k_max, self.threshold, self.min_select = k_max, threshold, min_select
        self.overflow = overflow
        self.include_unselected = include_unselected
        self.title_key = title_key
        self._given_selector = selector is not None
        self._selector: Any = check_selector(selector) if selector is not None else None
        self.counters = SelectionCounters()

    @property
    def selector(self) -> Any:
        """The selector called (None before `warm_up` when built from selector_dir or base_url)."""
        return self._selector

    def warm_up(self) -> None:
        """Load the selector once (a model from `selector_dir`, or a client for `base_url`); later calls do nothing."""
        if self._selector is not None:
            return
        if self.base_url is not None:
            key = self.api_key.resolve_value() if self.api_key is not None else None
            self._selector = load_selector(base_url=self.base_url, api_key=key, timeout=self.timeout)
        else:
            self._selector = load_selector(self.selector_dir, backend=self.backend, device=self.device,
                                           dtype=self.dtype, batch_size=self.batch_size)

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], k_max: int | None = None,
            threshold: float | None = None) -> dict[str, list[Document]]:
        """``{"documents": the selected documents, best first}``; `k_max` / `threshold` override the
        component's settings for this call. No documents → no documents (the model is not called)."""
        docs = list(documents)
        if not docs:
            return {"documents": []}
        pairs = []
        for i, doc in enumerate(docs):
            if not isinstance(doc, Document):
                raise TypeError(f"documents[{i}]: expected a haystack Document, got {type(doc).__name__}")
            pairs.append((title_of(doc.meta, self.title_key), doc.content))
        self.warm_up()
        selection = run_selection(self._selector, query, pairs, k_max=self.k_max if k_max is None else k_max,
                                  threshold=self.threshold if threshold is None else threshold,
                                  min_select=self.min_select, overflow=self.overflow,
                                  include_unselected=self.include_unselected)
        self.counters.record(selection, int(self._selector.k1), len(docs))
        return {"documents": [replace(docs[item.position], score=item.score,
                                      meta={**docs[item.position].meta, **kept_metadata(item, selection)})
                              for item in selection.kept]}

    def to_dict(self) -> dict[str, Any]:
        """The component as a dict for `Pipeline.dumps` (the api_key only as an environment-variable secret)."""
        if self._given_selector:
            raise SerializationError("a PurecoverSelector built around a selector object cannot be serialised; "
                                     "build it with selector_dir=... or base_url=...")
        return default_to_dict(
            self, selector_dir=self.selector_dir, base_url=self.base_url,
            api_key=self.api_key.to_dict() if self.api_key is not None else None, timeout=self.timeout,
            backend=self.backend, device=self.device, dtype=self.dtype, batch_size=self.batch_size,
            k_max=self.k_max, threshold=self.threshold, min_select=self.min_select, overflow=self.overflow,
            include_unselected=self.include_unselected, title_key=self.title_key)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PurecoverSelector:
        """The component from `to_dict` output (`data` is not modified)."""
        data = {**data, "init_parameters": dict(data.get("init_parameters", {}))}
        deserialize_secrets_inplace(data["init_parameters"], keys=["api_key"])
        return default_from_dict(cls, data)

    def close(self) -> None:
        """Release the selector (the model's memory, or the remote client's connections); `warm_up` reloads."""
        close = getattr(self._selector, "close", None)
        if callable(close):
            close()
        if not self._given_selector:
            self._selector = None
