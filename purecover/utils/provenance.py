"""What made an output: the resolved recipe, package versions and a summary, written beside it."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import sys
from pathlib import Path

from pydantic import JsonValue

from ..records import GgufSource, OutputDescription, StageManifest, StageSummary
from .io import atomic_write_json

__all__ = ["MODEL_KEYS", "model_sources", "package_versions", "write_stage_manifest"]

MODEL_KEYS = (("teacher", "model"), ("student", "model"), ("eval", "generator"))  # recipe keys naming causal LMs

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


def model_sources(recipe: dict[str, JsonValue]) -> dict[str, GgufSource]:
    """For each of `MODEL_KEYS` whose model is a GGUF file or a catalogue model: its `GgufSource` (sha256,
    quantisation, licence, upstream), by dotted key. Reads only what is already converted."""
    from ..models.loading import model_source

    out: dict[str, GgufSource] = {}
    for section, key in MODEL_KEYS:
        part = recipe.get(section)
        name = part.get(key) if isinstance(part, dict) else None
        src = model_source(name) if isinstance(name, str) else None
        if src is not None:
            out[f"{section}.{key}"] = src
    return out


def write_stage_manifest(
    run_dir: str | Path,
    stage: str,
    recipe: dict[str, JsonValue],
    config_hash: str,
    summary: StageSummary,
    started: _dt.datetime | None = None,
    outputs: dict[str, OutputDescription | None] | None = None,
    inputs: dict[str, OutputDescription | None] | None = None,
) -> Path:
    """Write ``run_dir/<stage>.run.json`` (a `StageManifest`): stage, resolved recipe, config hash, versions,
    summary and, once complete, what each output and input holds (`purecover.rundir.RunDir.complete`)."""
    now = _dt.datetime.now(_dt.timezone.utc)
    path = Path(run_dir) / f"{stage}.run.json"
    sources = model_sources(recipe)
    manifest = StageManifest(
        stage=stage,
        config_hash=config_hash,
        started=(started or now).isoformat(timespec="seconds"),
        finished=now.isoformat(timespec="seconds"),
        command=list(sys.argv),
        versions=package_versions(),
        summary=summary,
        **({"outputs": outputs} if outputs is not None else {}),
        **({"inputs": inputs} if inputs is not None else {}),
        recipe=recipe,
        **({"model_sources": sources} if sources else {}),
    )
    atomic_write_json(path, manifest.to_json_dict())
    return path
