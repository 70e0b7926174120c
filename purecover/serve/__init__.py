"""`purecover serve`: a deployed selector behind HTTP (``pip install -e '.[serve]'``).

- `purecover.serve.app.create_app(selector, model_name=...)`: the FastAPI app (``/v1/select``,
  ``/v1/rerank`` = ``/v2/rerank``, ``/health``, ``/v1/models``, ``/metrics``) with dynamic batching.
- `purecover.serve.server.run_server` (blocking, graceful on SIGTERM/SIGINT) and
  `purecover.serve.server.serve_in_thread` (a real server on a free loopback port, for tests and embedding).
- `purecover.serve.client.RemoteSelector`: the `Selector` interface over HTTP (needs only httpx).

This package's ``__init__`` imports nothing optional, so ``purecover.serve.client`` works without
FastAPI; the names above are loaded on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SERVE_EXTRA_HINT", "RemoteSelector", "RemoteSelectorError", "create_app", "require_serve_extra",
           "run_server", "serve_in_thread"]

SERVE_EXTRA_HINT = "pip install -e '.[serve]'"
_LAZY = {"create_app": "app", "run_server": "server", "serve_in_thread": "server", "RemoteSelector": "client",
         "RemoteSelectorError": "client"}


def require_serve_extra() -> None:
    """Raise an ImportError naming the extra when FastAPI, uvicorn or prometheus-client is missing."""
    missing = []
    for module in ("fastapi", "uvicorn", "prometheus_client", "httpx"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(f"purecover serve needs {', '.join(missing)}, which are not installed: {SERVE_EXTRA_HINT}")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        if _LAZY[name] != "client":
            require_serve_extra()
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
