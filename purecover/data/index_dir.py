"""Where corpus stores and retrieval indexes live: one directory shared by every run.

A Wikipedia corpus store is ~15 GB, its BM25 index ~12 GB and its dense embeddings ~32-64 GB, so they
are built once and shared by every run, dataset and test set that uses the same corpus, instead of
once per run directory. Everything in it is keyed by what it holds (corpus file, content fingerprint,
retriever settings), so runs with different corpora or settings never mix. The directory is
``data.index_dir`` when a recipe sets it, else ``$PURECOVER_INDEX_DIR``, else
``$XDG_CACHE_HOME/purecover/index`` (``~/.cache/purecover/index`` by default).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["INDEX_DIR_ENV", "default_index_dir", "purecover_cache_dir", "resolve_index_dir"]

INDEX_DIR_ENV = "PURECOVER_INDEX_DIR"


def purecover_cache_dir(env_var: str, name: str) -> Path:
    """``$<env_var>`` when set, else ``$XDG_CACHE_HOME/purecover/<name>`` (``~/.cache/purecover/<name>``)."""
    env = os.environ.get(env_var)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "purecover" / name


def default_index_dir() -> Path:
    """``$PURECOVER_INDEX_DIR``, else ``$XDG_CACHE_HOME/purecover/index`` (``~/.cache/purecover/index``)."""
    return purecover_cache_dir(INDEX_DIR_ENV, "index")


def resolve_index_dir(configured: str | None) -> Path:
    """`configured` (``data.index_dir``, ``~`` expanded) when set, else `default_index_dir`."""
    return Path(configured).expanduser() if configured else default_index_dir()
