"""Hub datasets by name, through `datasets` (streamed, so nothing is downloaded up front).

Offline (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set) only the local `datasets` cache is
tried; online, the Hub endpoint is probed with a short timeout first, so a machine without
network fails at once with a clear message instead of retrying for minutes.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from ..errors import HubUnavailableError

__all__ = ["FLASHRAG_HUB", "default_hub_config", "iter_hub_rows"]

FLASHRAG_HUB = "RUC-NLPIR/FlashRAG_datasets"
_FLASHRAG_CONFIGS = {"hotpotqa": "hotpotqa", "2wiki": "2wikimultihopqa", "musique": "musique",
                     "strategyqa": "strategyqa"}
_ADVICE = ("download the dataset file and set data.path to it, or run where the Hub is reachable "
           "(the Hub name is resolved with `datasets.load_dataset`)")


def default_hub_config(name: str, dataset: str) -> str | None:
    """FlashRAG's Hub repository holds one configuration per dataset; others need none by default."""
    if name == FLASHRAG_HUB:
        return _FLASHRAG_CONFIGS.get(dataset)
    return None


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _probe(timeout: float = 5.0) -> None:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise HubUnavailableError(f"cannot reach the Hugging Face Hub at {endpoint} ({exc}); {_ADVICE}") from None


def iter_hub_rows(name: str, config: str | None, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (``"row I"``, row) from Hub dataset `name`; fails fast when the Hub is unreachable."""
    what = f"Hub dataset {name!r}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    offline = _offline()
    if not offline:
        _probe()
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise HubUnavailableError(f"{what}: the `datasets` package is not installed") from exc
    try:
        rows = datasets.load_dataset(name, config, split=split, streaming=not offline)
        iterator = iter(rows)
    except Exception as exc:
        reason = "offline mode is on and it is not in the local cache" if offline else str(exc)
        raise HubUnavailableError(f"cannot load {what}: {reason}; {_ADVICE}") from exc
    for i, row in enumerate(iterator):
        yield f"row {i}", dict(row)
