"""LlamaIndex: `PurecoverNodePostprocessor`, a `BaseNodePostprocessor` keeping the nodes the selector selects.

    from purecover.integrations.llamaindex import PurecoverNodePostprocessor

    post = PurecoverNodePostprocessor.from_pretrained("runs/demo/selector")   # or .from_url("http://host:8000")
    engine = index.as_query_engine(similarity_top_k=20, node_postprocessors=[post])
    nodes = post.postprocess_nodes(retrieved_nodes, query_str="Who ...?")

Needs ``pip install -e '.[llamaindex]'`` (llama-index-core). A node's text is its content
without metadata (``MetadataMode.NONE``); ``metadata[title_key]`` (default "title") is its title
when present. Returned nodes are copies: ``score`` is the selector's score and the metadata carries
the keys of `purecover.integrations._common.METADATA_KEYS`, which are also added to the node's
excluded LLM/embedding metadata keys, so they never enter the generator's prompt. More than k1
nodes: see `overflow` (docs/guides/llamaindex.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

try:
    from llama_index.core.bridge.pydantic import Field, PrivateAttr, model_validator
    from llama_index.core.callbacks import CBEventType, EventPayload
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"purecover's LlamaIndex adapter needs llama-index-core ({exc}): "
                      "pip install -e '.[llamaindex]'") from exc

from ._common import (
    METADATA_KEYS,
    SelectionCounters,
    check_selector,
    check_settings,
    kept_metadata,
    load_selector,
    run_selection,
    title_of,
)

__all__ = ["PurecoverNodePostprocessor"]


class PurecoverNodePostprocessor(BaseNodePostprocessor):
    """Keep the nodes a purecover selector selects for the query, best first.

    `selector` (constructor argument; or use `from_pretrained` / `from_url`): a
    `purecover.models.selector.Selector` or `purecover.serve.client.RemoteSelector`. The settings
    are as for the LangChain adapter: `k_max`, `threshold` (selector's score space), `min_select`
    override the calibrated values; `overflow` ("truncate" | "error") handles more than k1 nodes;
    `include_unselected` also returns the other scored nodes after the selected ones.
    """

    k_max: int | None = Field(default=None, description="Keep at most this many nodes (None: the selector's k_max).")
    threshold: float | None = Field(default=None, description="Score threshold in the selector's score space "
                                                               "(None: the calibrated tau3).")
    min_select: int | None = Field(default=None, description="Keep at least this many nodes (None: the selector's).")
    overflow: Literal["truncate", "error"] = Field(default="truncate", description="More than k1 nodes: select "
                                                   "among the first k1 and drop the rest, or raise.")
    include_unselected: bool = Field(default=False, description="Also return the unselected scored nodes.")
    title_key: str | None = Field(default="title", description="Metadata key of a node's title (None: no titles).")
    _selector: Any = PrivateAttr()
    _counters: SelectionCounters = PrivateAttr(default_factory=SelectionCounters)

    def __init__(self, selector: Any, **fields: Any) -> None:
        super().__init__(**fields)
        self._selector = check_selector(selector)

    @model_validator(mode="after")
    def _check_settings(self) -> PurecoverNodePostprocessor:
        check_settings(k_max=self.k_max, threshold=self.threshold, min_select=self.min_select, overflow=self.overflow)
        return self

    @classmethod
    def class_name(cls) -> str:
        return "PurecoverNodePostprocessor"

    @classmethod
    def from_pretrained(cls, selector_dir: str | Path, *, backend: str = "hf", device: str = "auto",
                        dtype: str = "auto", batch_size: int = 8, **fields: Any) -> PurecoverNodePostprocessor:
        """Load the selector directory in this process; `fields`: the postprocessor's settings."""
        return cls(load_selector(selector_dir, backend=backend, device=device, dtype=dtype, batch_size=batch_size),
                   **fields)

    @classmethod
    def from_url(cls, base_url: str, api_key: str | None = None, *, timeout: float = 60.0,
                 **fields: Any) -> PurecoverNodePostprocessor:
        """Call a running ``purecover serve`` at `base_url`; `fields`: the postprocessor's settings."""
        return cls(load_selector(base_url=base_url, api_key=api_key, timeout=timeout), **fields)

    @property
    def selector(self) -> Any:
        """The selector called (in-process or remote)."""
        return self._selector

    @property
    def counters(self) -> SelectionCounters:
        """Calls made and nodes dropped beyond k1 so far."""
        return self._counters

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        """The selected nodes (copies, best first), ``score`` = the selector's score; [] for no nodes."""
        if query_bundle is None:
            raise ValueError("PurecoverNodePostprocessor needs the query: call postprocess_nodes(nodes, "
                             "query_str=...) or pass a QueryBundle (a query engine passes it)")
        nodes = list(nodes)
        if not nodes:
            return []
        pairs = []
        for i, item in enumerate(nodes):
            if not isinstance(item, NodeWithScore):
                raise TypeError(f"nodes[{i}]: expected a NodeWithScore, got {type(item).__name__}")
            pairs.append((title_of(item.node.metadata, self.title_key),
                          item.node.get_content(metadata_mode=MetadataMode.NONE)))
        with self.callback_manager.event(CBEventType.RERANKING, payload={
                EventPayload.NODES: nodes, EventPayload.MODEL_NAME: "purecover-selector",
                EventPayload.QUERY_STR: query_bundle.query_str, EventPayload.TOP_K: self.k_max}) as event:
            selection = run_selection(self._selector, query_bundle.query_str, pairs, k_max=self.k_max,
                                      threshold=self.threshold, min_select=self.min_select, overflow=self.overflow,
                                      include_unselected=self.include_unselected)
            self._counters.record(selection, int(self._selector.k1), len(nodes))
            out = [NodeWithScore(node=_annotated(nodes[item.position].node, kept_metadata(item, selection)),
                                 score=item.score) for item in selection.kept]
            event.on_end(payload={EventPayload.NODES: out})
        return out

    def close(self) -> None:
        """Release the selector (the model's memory, or the remote client's connections)."""
        close = getattr(self._selector, "close", None)
        if callable(close):
            close()


def _annotated(node: Any, extra: dict[str, Any]) -> Any:
    """A copy of `node` with `extra` in its metadata, hidden from the LLM and embedding text."""
    return node.model_copy(update={
        "metadata": {**node.metadata, **extra},
        "excluded_llm_metadata_keys": _merged(node.excluded_llm_metadata_keys),
        "excluded_embed_metadata_keys": _merged(node.excluded_embed_metadata_keys),
    })


def _merged(keys: list[str]) -> list[str]:
    return [*keys, *(k for k in METADATA_KEYS if k not in keys)]
