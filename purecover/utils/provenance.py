"""What made an output: the resolved recipe, package versions and a summary, written beside it."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import platform
import sys
from pathlib import Path
from typing import Any

from .io import atomic_write_json

__all__ = ["check_same_config", "package_versions", "write_stage_manifest"]

_PACKAGES = (
    "purecover", "torch", "transformers", "peft", "accelerate", "deepspeed", "datasets", "numpy",
    "bm25s", "sentence-transformers", "faiss-cpu", "safetensors", "vllm",
)


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are omitted)."""
    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in (*_PACKAGES, *extra):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def write_stage_manifest(
    run_dir: str | Path,
    stage: str,
    recipe: dict[str, Any],
    config_hash: str,
    summary: dict[str, Any] | None = None,
    started: _dt.datetime | None = None,
) -> Path:
    """Write ``run_dir/<stage>.run.json``: stage, resolved recipe, config hash, versions, summary."""
    now = _dt.datetime.now(_dt.timezone.utc)
    path = Path(run_dir) / f"{stage}.run.json"
    atomic_write_json(
        path,
        {
            "stage": stage,
            "config_hash": config_hash,
            "started": (started or now).isoformat(timespec="seconds"),
            "finished": now.isoformat(timespec="seconds"),
            "command": sys.argv,
            "versions": package_versions(),
            "summary": summary or {},
            "recipe": recipe,
        },
    )
    return path


def check_same_config(run_dir: str | Path, stage: str, config_hash: str, outputs: list[Path], what: str,
                      remedy: str) -> None:
    """Refuse to continue `stage` when its existing outputs were made with another configuration.

    The previous hash is read from ``run_dir/<stage>.run.json``; nothing is checked while none of
    `outputs` exists (or all are empty files).
    """
    manifest = Path(run_dir) / f"{stage}.run.json"
    present = [p for p in outputs if p.is_dir() or (p.is_file() and p.stat().st_size > 0)]
    if not manifest.is_file() or not present:
        return
    previous = json.loads(manifest.read_text(encoding="utf-8")).get("config_hash")
    if previous and previous != config_hash:
        raise RuntimeError(f"{present[0]} was made with a different {what} configuration (hash {previous}, now "
                           f"{config_hash}); {remedy}")
