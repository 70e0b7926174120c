"""run_dir/``<stage>.run.json``: a stage's manifest, the `StageSummary` every stage's summary extends and
the description of each output; and run_dir/.purecover.lock, who holds the run directory."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, JsonValue

from .base import _Written
from .gguf import GgufSource


class OutputDescription(_Written):
    """What one output (or input) of a stage held when its manifest was written (`purecover.rundir.describe_output`):
    a JSONL file by ``lines`` and ``sha256``; another file by ``bytes`` (and ``sha256`` up to 256 MiB); a
    directory by ``files``, ``sizes`` and the ``digests`` of its small files (weights are checked by size)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"lines", "bytes", "files", "sizes", "digests", "sha256"})

    lines: int | None = Field(default=None, ge=0, description="Complete lines of a JSONL file.")
    bytes: int | None = Field(default=None, ge=0, description="Size of a file.")
    files: int | None = Field(default=None, ge=0, description="Files under a directory (recursive).")
    sizes: dict[str, int] | None = Field(default=None, description="Each file of a directory (relative name) and "
                                                                   "its size in bytes.")
    digests: dict[str, str] | None = Field(default=None, description="``sha256:<hex>`` of each small file of a "
                                                                     "directory (up to 1 MiB), by relative name.")
    sha256: str | None = Field(default=None, description="``sha256:<hex>`` of a file's bytes.")


class StageSummary(_Written):
    """A stage's summary: what its body returns, stored in its manifest and shown by the pipeline's table.

    Each stage returns its own subclass (named by `purecover.stages.Stage.summary`); ``status`` is set by
    the runner (running while the stage works, complete once its outputs are recorded). A summary read back
    from a manifest written by another version keeps the keys it has (unknown keys are kept)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"status"})

    status: Literal["running", "complete"] | None = Field(default=None, description="running, then complete.")

    def figures(self) -> dict[str, JsonValue]:
        """The summary as written, without ``status`` (what the pipeline's table picks headline figures from)."""
        data = self.to_json_dict()
        data.pop("status", None)
        return data


class StageManifest(_Written):
    """run_dir/``<stage>.run.json``: a stage's state (``summary.status``: running or complete), what made
    its outputs and, once complete, what its outputs and inputs held."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"outputs", "inputs", "model_sources"})

    stage: str = Field(description="The stage's name (data, calibrate, label, ...).")
    config_hash: str = Field(description="The hash of the recipe sections the stage depends on (and its extras).")
    started: str = Field(description="When the stage started (UTC, ISO 8601, seconds).")
    finished: str = Field(description="When this file was written (UTC, ISO 8601, seconds).")
    command: list[str] = Field(description="The command line of the process that wrote it.")
    versions: dict[str, str] = Field(description="Versions of Python and the packages that shape results.")
    summary: StageSummary = Field(description="The stage's summary; status is running, then complete.")
    outputs: dict[str, OutputDescription | None] | None = Field(
        default=None, description="Once complete: what each output held (lines, bytes or files, and hashes), by "
                                  "its path relative to the run directory; null for a missing one.")
    inputs: dict[str, OutputDescription | None] | None = Field(
        default=None, description="Once complete: what each input held when the stage ran, by name.")
    recipe: dict[str, JsonValue] = Field(description="The resolved recipe the stage ran with.")
    model_sources: dict[str, GgufSource] | None = Field(
        default=None, description="For each recipe key naming a GGUF file or a catalogue model (e.g. teacher.model): "
                                  "the file's sha256, quantisation, licence and upstream model.")


class LockHolder(_Written):
    """``run_dir/.purecover.lock``: who holds the run directory (`purecover.utils.rundir_lock`), one compact
    JSON object, rewritten when the holder changes."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"handover"})

    pid: int = Field(description="The holder's process id.")
    host: str = Field(description="Its host name.")
    stage: str = Field(description="The stage (or command) it runs.")
    launch: str | None = Field(description="Its distributed launch's identity; null for a single process.")
    started: str = Field(description="When it took the lock (UTC, ISO 8601, seconds).")
    handover: str | None = Field(default=None, description="sha256 of the token a child process presents to be "
                                                           "let in; present only during a hand-over.")
