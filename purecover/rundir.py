"""`RunDir`: the one owner of a run directory's layout, lock and stage manifests.

* **File names** live in `FILES` only; stages ask ``RunDir(...).path_of("labels")``.
* **Lock**: `lock(stage)` holds the run directory's exclusive lock (`purecover.utils.rundir_lock`):
  a second process gets one line naming the holder's stage, pid, host and start; a lock left by a
  dead process is released by the kernel and taken over.
* **Manifest lifecycle**: ``<stage>.run.json`` is written ``running`` before a stage writes
  anything (`begin`) and ``complete`` after all its outputs are durable (`complete`), atomically
  both times. The complete manifest records what each output held (lines and a content hash of a
  JSONL file, bytes and, up to `HASH_LIMIT`, a content hash of a file, name and size of every file
  of a directory) and what each input held, so a later skip is checked against the disk.
* **Status**: `status` says, without running anything, whether a stage would run, resume, skip, redo
  (complete, but an output is missing or was changed: `set_aside` moves it out of the way) or is
  blocked (its outputs were made with another configuration or from inputs that have changed since).
  `purecover.contract.execute_stage` acts on it for every stage, and the pipeline's plan shows it.

It reads the stage registry (`purecover.stages`: what each stage writes, its hooks) and is read by the contract
(`purecover.contract`); it never imports the contract.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from .config import Recipe, recipe_to_dict
from .records import OutputDescription, RecordError, StageManifest, StageSummary, load_json_record
from .stages import get_stage, load_hook
from .utils.io import atomic_write_json
from .utils.provenance import write_stage_manifest
from .utils.rundir_lock import run_dir_lock

__all__ = ["FILES", "RunDir", "StageStatus", "describe_change", "describe_input", "describe_output", "file_digest",
           "test_set_directory"]

log = logging.getLogger(__name__)

# Every file or folder a stage reads or writes, relative to the run directory.
FILES: dict[str, str] = {
    "candidates": "candidates.jsonl",
    "data_report": "data_report.json",
    "bias": "bias.json",
    "bias_rows": "bias_in_context.jsonl",  # the in-context calibration's per-question values (resumable)
    "labels": "labels.jsonl",
    "label_shards": "label_shards",
    "checkpoints": "checkpoints",
    "final": "checkpoints/final",
    "student_meta": "checkpoints/final/purecover_student.json",  # the trained student's identifiers, K1, tau3
    "selector": "selector",
    "selector_config": "selector/selector_config.json",
    "selections": "selections.jsonl",
    "test": "test",  # the test set of eval.path: its own run directory (candidates, bias, labels, selections)
    "eval": "eval",  # the evaluate stage's outputs
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


# Files up to this size get a content hash in manifests (JSONL outputs always do); larger ones (model
# weights) are checked by size, so a skip never reads gigabytes.
HASH_LIMIT = 256 << 20
SMALL_FILE = 1 << 20  # files of a directory output up to this size (configs, tokenizers) get a content hash too
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of `path`'s bytes, remembered per process for the same (path, size, mtime, inode)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
        _DIGESTS[key] = "sha256:" + h.hexdigest()
    return _DIGESTS[key]


def describe_output(path: Path) -> OutputDescription | None:
    """What `path` holds: ``lines`` and ``sha256`` (JSONL), ``bytes`` and ``sha256`` (a file; no hash above
    `HASH_LIMIT`), ``files``, ``sizes`` and ``digests`` (a directory, recursive; digests of its files up to
    `SMALL_FILE`, so weights are checked by size); None when it does not exist."""
    if path.is_dir():
        files = [p for p in sorted(path.rglob("*")) if p.is_file()]
        sizes = {str(p.relative_to(path)): p.stat().st_size for p in files}
        digests = {str(p.relative_to(path)): file_digest(p) for p in files if p.stat().st_size <= SMALL_FILE}
        return OutputDescription(files=len(sizes), sizes=sizes, digests=digests)
    if not path.is_file():
        return None
    if path.suffix == ".jsonl":
        return OutputDescription(lines=_count_lines(path), sha256=file_digest(path))
    size = path.stat().st_size
    return OutputDescription(bytes=size, **({"sha256": file_digest(path)} if size <= HASH_LIMIT else {}))


def describe_input(path: Path) -> OutputDescription | None:
    """What an input holds: like `describe_output`, but a file always gets its content hash (a dataset file
    edited in place must be noticed; it is hashed once per process)."""
    if path.is_file() and path.suffix != ".jsonl":
        return OutputDescription(bytes=path.stat().st_size, sha256=file_digest(path))
    return describe_output(path)


def describe_change(rel: str, before: OutputDescription | None, now: OutputDescription | None) -> str | None:
    """Why `now` differs from the recorded `before` (only what was recorded is compared, so manifests
    written by earlier versions keep working); None when it does not."""
    if before is None:
        return None if now is None else f"{rel} appeared"
    if now is None:
        return f"{rel} is missing"
    sizes_before, sizes_now = before.sizes, now.sizes
    if sizes_before is not None and sizes_now is not None and sizes_before != sizes_now:
        missing = sorted(set(sizes_before) - set(sizes_now))
        if missing:
            return f"{rel}/{missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        changed = sorted(k for k in sizes_now if sizes_before.get(k) != sizes_now[k])
        return f"{rel}/{changed[0]} " + ("was added" if changed[0] not in sizes_before else "changed size")
    digests_before, digests_now = before.digests or {}, now.digests or {}
    edited = sorted(k for k in digests_before if k in digests_now and digests_before[k] != digests_now[k])
    if edited:
        return f"{rel}/{edited[0]} was changed since it was recorded (content hash differs)"
    for unit in ("lines", "bytes", "files"):
        recorded, held = getattr(before, unit), getattr(now, unit)
        if recorded is not None and recorded != held:
            return f"{rel} holds {held} {unit}, its manifest recorded {recorded}"
    if before.sha256 is not None and now.sha256 is not None and before.sha256 != now.sha256:
        return f"{rel} was changed since it was recorded (content hash differs)"
    return None


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

    def test_set(self) -> RunDir:
        """The run directory of the test set of ``eval.path`` (``run_dir/test``), apart from evaluate's outputs
        (``run_dir/eval``). A run made before the test set had its own directory kept it in ``run_dir/eval``:
        that one is used while ``run_dir/test`` does not exist, so its candidates and labels are not redone."""
        legacy = self.path_of("eval")
        if not self.path_of("test").exists() and (legacy / "data.run.json").is_file():
            return RunDir(legacy)
        return RunDir(self.path_of("test"))

    def manifest_path(self, stage: str) -> Path:
        return self.path / f"{stage}.run.json"

    def outputs(self, stage: str) -> list[Path]:
        """The outputs stage `stage` declares in the registry (checked before a complete stage is skipped)."""
        return [self.path_of(key) for key in get_stage(stage).writes]

    def work_areas(self, stage: str) -> list[Path]:
        """The outputs plus the stage's resumable work areas (`Stage.scratch`): what counts as "the stage has
        written something here" when deciding between run, resume and refuse."""
        return self.outputs(stage) + [self.path_of(key) for key in get_stage(stage).scratch]

    # ------------------------------------------------------------------ lock

    @contextlib.contextmanager
    def lock(self, stage: str) -> Iterator[RunDir]:
        """Hold this run directory's exclusive lock (re-entrant in one process)."""
        with run_dir_lock(self.path, stage):
            yield self

    # ------------------------------------------------------------------ manifests

    def manifest(self, stage: str) -> StageManifest | None:
        """The ``<stage>.run.json``, validated as a `purecover.records.StageManifest`. None when absent; None
        too, with a warning naming the file (and the field), when it is unreadable or not a manifest."""
        path = self.manifest_path(stage)
        try:
            return load_json_record(path, StageManifest)
        except FileNotFoundError:
            return None
        except RecordError as exc:
            log.warning("%s; ignoring this manifest", exc)
            return None
        except OSError as exc:  # not readable
            log.warning("%s: unreadable (%s); ignoring this manifest", path, exc)
            return None

    def begin(self, stage: str, recipe: Recipe, config_hash: str, started: _dt.datetime | None = None,
              inputs: dict[str, OutputDescription | None] | None = None) -> None:
        """Mark `stage` running (before it writes any output), recording what each input holds now (`inputs`), so a
        resume can tell whether its partial outputs came from the same inputs (`status`)."""
        write_stage_manifest(self.path, stage, recipe_to_dict(recipe), config_hash, StageSummary(status="running"),
                             started, inputs=inputs)

    def complete(self, stage: str, recipe: Recipe, config_hash: str, summary: StageSummary,
                 started: _dt.datetime | None = None,
                 inputs: dict[str, OutputDescription | None] | None = None) -> StageSummary:
        """Mark `stage` complete (after its outputs are written), recording what each output holds and, when
        given, what each input held (`inputs`: name -> `describe_input`); returns `summary` marked complete."""
        summary = summary.model_copy(update={"status": "complete"})
        outputs = {self._rel(p): describe_output(p) for p in self.outputs(stage)}
        write_stage_manifest(self.path, stage, recipe_to_dict(recipe), config_hash, summary, started,
                             outputs=outputs, inputs=inputs)
        return summary

    def record_outputs(self, stage: str) -> None:
        """Re-record what `stage`'s outputs hold in its complete manifest, after the stage itself changed one
        of them on purpose (the export's model card refreshed with new metrics)."""
        manifest = self.manifest(stage)
        if manifest is None or manifest.summary.status != "complete":
            return
        manifest.outputs = {self._rel(p): describe_output(p) for p in self.outputs(stage)}
        atomic_write_json(self.manifest_path(stage), manifest.to_json_dict())

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.path))

    def output_problem(self, stage: str, manifest: StageManifest | None = None) -> str | None:
        """Why `stage`'s outputs do not match its complete manifest (None when they do)."""
        manifest = manifest if manifest is not None else self.manifest(stage)
        if manifest is None:
            return "no manifest"
        return next(iter(self.damaged_outputs(stage, manifest).values()), None)

    def damaged_outputs(self, stage: str, manifest: StageManifest | None = None) -> dict[Path, str]:
        """Each output of `stage` that is missing or differs from what its manifest recorded, with the reason."""
        manifest = manifest if manifest is not None else self.manifest(stage)
        recorded = (manifest.outputs if manifest is not None else None) or {}
        found: dict[Path, str] = {}
        for path in self.outputs(stage):
            rel = self._rel(path)
            now = describe_output(path)
            if now is None:
                problem: str | None = f"{rel} is missing"
            else:  # an output its manifest did not record (written by an earlier version) is only checked to exist
                problem = describe_change(rel, recorded[rel], now) if rel in recorded else None
            if problem is not None:
                found[path] = problem
        return found

    def completed(self, stage: str, config_hash: str) -> StageSummary | None:
        """The stored summary when `stage` is complete for `config_hash` and its outputs check; else None."""
        manifest = self.manifest(stage)
        if manifest is None or manifest.config_hash != config_hash or manifest.summary.status != "complete":
            return None
        if self.output_problem(stage, manifest) is not None:
            return None
        return manifest.summary

    def status(self, stage: str, config_hash: str,
               inputs: dict[str, OutputDescription | None] | None = None) -> StageStatus:
        """What running `stage` for `config_hash` means now, from its manifest and the disk (nothing is run).

        `inputs` (name -> `describe_output`) is compared with what the manifest recorded (when the stage began,
        and again when it completed). The actions: ``run`` (nothing of this stage yet, or a ``rerun`` stage whose
        configuration or inputs changed), ``resume`` (partly done for this configuration and these inputs), ``skip`` (complete, outputs and inputs
        as recorded), ``redo`` (complete, but an output is missing or was changed: it is set aside and the
        stage runs again) and ``blocked`` (outputs made with another configuration or from other inputs,
        which the stage would mix: refused).
        """
        spec = get_stage(stage)
        present = [p for p in self.work_areas(stage) if p.is_dir() or (p.is_file() and p.stat().st_size > 0)]
        manifest = self.manifest(stage)
        if manifest is None:
            if not present:
                return StageStatus("run", "no outputs yet")
            foreign = load_hook(spec.foreign)(self, config_hash) if spec.foreign else None
            if foreign is not None:
                return StageStatus("blocked", f"{foreign}; use another run_dir or delete "
                                              f"{self._describe_paths(present)}")
            return StageStatus("resume", "outputs exist without a manifest")
        previous = manifest.config_hash
        complete = manifest.summary.status == "complete"
        if not present and not (complete and previous == config_hash):
            return StageStatus("run", "no outputs yet")
        rerun = spec.on_change == "rerun"
        if previous != config_hash:
            if rerun:
                return StageStatus("run", spec.changed_reason)
            sections = spec.hashed or "/".join(s for s in spec.sections if s != "seed")
            return StageStatus("blocked", f"{self._rel(present[0])} was made with a different {sections} "
                                          f"configuration (hash {previous}, now {config_hash}); use another "
                                          f"run_dir or delete {self._describe_paths(present)}", cause="config")
        change = self._input_change(manifest.inputs, inputs)
        if change is not None and not present:  # nothing left of what the old input made: nothing to mix
            return StageStatus("run", f"its input changed ({change}) and none of its outputs are left")
        if not complete:
            # an input that was absent when the stage began (calibrate run after a label stage that stopped for
            # want of bias.json) cannot have made any of its partial outputs
            change = self._input_change(manifest.inputs, inputs, appeared=False)
            if change is None:
                return StageStatus("resume", "partly done for this configuration")
            if rerun:
                return StageStatus("run", f"its input changed: {change}")
            return StageStatus("blocked", f"partly done from other inputs ({change}); resuming would mix outputs of "
                                          f"the old input with the new: use another run_dir or delete "
                                          f"{self._describe_paths(present)}", cause="inputs")
        if change is not None:
            if rerun:
                return StageStatus("run", f"its input changed: {change}")
            return StageStatus("blocked", f"its input changed since it ran ({change}); its outputs "
                                          f"came from the old one: use another run_dir or delete "
                                          f"{self._describe_paths(present)}", cause="inputs")
        damaged = self.damaged_outputs(stage, manifest)
        if damaged:
            return StageStatus("redo", f"marked complete but {next(iter(damaged.values()))}")
        return StageStatus("skip", "complete for this configuration")

    @staticmethod
    def _input_change(recorded: dict[str, OutputDescription | None] | None,
                      now: dict[str, OutputDescription | None] | None, appeared: bool = True) -> str | None:
        """How an input differs from what the manifest recorded (`describe_change`), or None. A missing input is
        not judged (an earlier stage makes it again), nor is a manifest that recorded none (an older version);
        `appeared=False`: nor an input that was absent when recorded."""
        if recorded is None or now is None:
            return None
        for name, held in now.items():
            if name in recorded and held is not None and (appeared or recorded[name] is not None):
                change = describe_change(name, recorded[name], held)
                if change is not None:
                    return change
        return None

    def _describe_paths(self, paths: list[Path]) -> str:
        return " and ".join(self._rel(p) + ("/" if p.is_dir() else "") for p in paths)

    def set_aside(self, stage: str) -> list[Path]:
        """Move every damaged output of `stage` (`damaged_outputs`) to ``<name>.damaged-<UTC time>`` beside it
        (never deleted: a user may have edited it on purpose); returns the new paths."""
        moved = []
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        for path, why in self.damaged_outputs(stage).items():
            if path.is_symlink() or path.exists():
                target = path.with_name(f"{path.name}.damaged-{stamp}")
                os.replace(path, target)
                log.warning("%s: %s; moved it to %s and running the stage again", stage, why, target)
                moved.append(target)
        return moved


@dataclasses.dataclass(frozen=True)
class StageStatus:
    """What a stage would do now: `action` (run | resume | skip | redo | blocked), why, and for ``blocked`` its
    `cause`: ``config`` (another configuration) or ``inputs`` (inputs changed since it completed)."""

    action: str
    reason: str
    cause: str = ""


def test_set_directory(recipe: Recipe) -> Path:
    """run_dir, or with eval.path the test set's run directory (`RunDir.test_set`: run_dir/test), where
    selections for the evaluation questions go."""
    rd = RunDir.of(recipe)
    return rd.test_set().path if recipe.eval.path else rd.path
