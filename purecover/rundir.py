"""`RunDir`: the one owner of a run directory's layout, lock and stage manifests.

* **File names** live in `FILES` only; stages ask ``RunDir(...).path_of("labels")``.
* **Lock**: `lock(stage)` holds the run directory's exclusive lock (`purecover.utils.rundir_lock`):
  a second process gets one line naming the holder's stage, pid, host and start; a lock left by a
  dead process is released by the kernel and taken over.
* **Manifest lifecycle**: ``<stage>.run.json`` is written ``running`` before a stage writes
  anything (`begin`) and ``complete`` after all its outputs are durable (`complete`), atomically
  both times. The complete manifest records what each output held (lines of a JSONL file, bytes
  of a file, files of a directory), so a later skip is checked cheaply against the disk.
* **Config guard**: `guard` refuses to continue a stage whose existing outputs were made with
  another configuration hash (`purecover.stages.config_hash`).
* **Skip**: `completed` returns the stored summary only when the manifest is complete, for the
  same hash, and every output still matches what the manifest recorded.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import Recipe, recipe_to_dict
from .utils.provenance import write_stage_manifest
from .utils.rundir_lock import run_dir_lock

__all__ = ["FILES", "RunDir"]

# Every file or folder a stage reads or writes, relative to the run directory.
FILES: dict[str, str] = {
    "candidates": "candidates.jsonl",
    "data_report": "data_report.json",
    "bias": "bias.json",
    "labels": "labels.jsonl",
    "label_shards": "label_shards",
    "checkpoints": "checkpoints",
    "final": "checkpoints/final",
    "selector": "selector",
    "selector_config": "selector/selector_config.json",
    "selections": "selections.jsonl",
    "eval": "eval",
    "metrics": "eval/metrics.json",
    "report": "eval/report.md",
    "tune": "tune",
    "label_report": "label_report",
}


def _count_lines(path: Path) -> int:
    """Complete lines of `path` (newline count), read in 1 MiB blocks."""
    n = 0
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
    return n


def describe_output(path: Path) -> dict[str, Any] | None:
    """What `path` holds, cheaply: ``{"lines": n}`` (JSONL), ``{"bytes": n}`` (file), ``{"files": n}``
    (directory, recursive); None when it does not exist."""
    if path.is_dir():
        return {"files": sum(1 for p in path.rglob("*") if p.is_file())}
    if not path.is_file():
        return None
    if path.suffix == ".jsonl":
        return {"lines": _count_lines(path)}
    return {"bytes": path.stat().st_size}


class RunDir:
    """A run directory: ``RunDir(recipe.run_path)`` or `RunDir.of(recipe)`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def of(cls, recipe: Recipe) -> RunDir:
        return cls(recipe.run_path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ layout

    def path_of(self, key: str) -> Path:
        """The path of file `key` of `FILES` in this run directory."""
        try:
            return self.path / FILES[key]
        except KeyError:
            raise KeyError(f"unknown run-directory file {key!r}; known: {', '.join(FILES)}") from None

    def manifest_path(self, stage: str) -> Path:
        return self.path / f"{stage}.run.json"

    def outputs(self, stage: str) -> list[Path]:
        """The outputs stage `stage` declares in the registry."""
        from .stages import get_stage

        return [self.path_of(key) for key in get_stage(stage).writes]

    # ------------------------------------------------------------------ lock

    @contextlib.contextmanager
    def lock(self, stage: str) -> Iterator[RunDir]:
        """Hold this run directory's exclusive lock (re-entrant in one process)."""
        with run_dir_lock(self.path, stage):
            yield self

    # ------------------------------------------------------------------ manifests

    def manifest(self, stage: str) -> dict[str, Any] | None:
        """The parsed ``<stage>.run.json`` (None when absent or unreadable)."""
        path = self.manifest_path(stage)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def begin(self, stage: str, recipe: Recipe, config_hash: str, started: _dt.datetime | None = None) -> None:
        """Mark `stage` running (before it writes any output)."""
        write_stage_manifest(self.path, stage, recipe_to_dict(recipe), config_hash, {"status": "running"}, started)

    def complete(self, stage: str, recipe: Recipe, config_hash: str, summary: dict[str, Any],
                 started: _dt.datetime | None = None) -> dict[str, Any]:
        """Mark `stage` complete (after its outputs are written), recording what each output holds."""
        summary = {**summary, "status": "complete"}
        outputs = {str(p.relative_to(self.path)): describe_output(p) for p in self.outputs(stage)}
        write_stage_manifest(self.path, stage, recipe_to_dict(recipe), config_hash, summary, started,
                             outputs=outputs)
        return summary

    def output_problem(self, stage: str, manifest: dict[str, Any] | None = None) -> str | None:
        """Why `stage`'s outputs do not match its complete manifest (None when they do)."""
        manifest = manifest if manifest is not None else self.manifest(stage)
        if manifest is None:
            return "no manifest"
        recorded = manifest.get("outputs") or {}
        for path in self.outputs(stage):
            rel = str(path.relative_to(self.path))
            now = describe_output(path)
            if now is None:
                return f"{rel} is missing"
            before = recorded.get(rel)
            if before is not None and before != now:
                (unit, was), = before.items()
                return f"{rel} holds {now.get(unit)} {unit}, its manifest recorded {was}"
        return None

    def completed(self, stage: str, config_hash: str) -> dict[str, Any] | None:
        """The stored summary when `stage` is complete for `config_hash` and its outputs check; else None."""
        manifest = self.manifest(stage)
        if manifest is None or manifest.get("config_hash") != config_hash:
            return None
        if (manifest.get("summary") or {}).get("status") != "complete":
            return None
        if self.output_problem(stage, manifest) is not None:
            return None
        return manifest["summary"]

    def guard(self, stage: str, config_hash: str, remedy: str, outputs: list[Path] | None = None,
              what: str | None = None) -> None:
        """Refuse to continue `stage` when its existing outputs were made with another configuration.

        Nothing is checked while none of the outputs exists (or all are empty files).
        """
        outputs = outputs if outputs is not None else self.outputs(stage)
        present = [p for p in outputs if p.is_dir() or (p.is_file() and p.stat().st_size > 0)]
        manifest = self.manifest(stage)
        if manifest is None or not present:
            return
        previous = manifest.get("config_hash")
        if previous and previous != config_hash:
            from .stages import get_stage

            sections = what or "/".join(s for s in get_stage(stage).sections if s != "seed")
            raise RuntimeError(f"{present[0]} was made with a different {sections} configuration (hash "
                               f"{previous}, now {config_hash}); {remedy}")
