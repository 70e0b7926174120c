"""``purecover publish RUN_DIR --what labels|selections|candidates (--to-disk DIR | --push-to-hub REPO)``.

Turns one of a run's JSONL files into a `datasets.Dataset` (one row per record, nested fields kept as Arrow
lists/structs; keys missing from some records are null there) with a dataset card (README.md: YAML metadata
with the source dataset's licence when known, what every field means, the recipe sections that made the
file), then either ``save_to_disk`` (written beside DIR and renamed into place) or a push to a Hub dataset
repo as ``data/train-00000-of-00001.parquet`` + README.md through `purecover.utils.hub.push_folder`
(recorded in ``RUN_DIR/publish.<what>.push.json``; an unchanged file is not pushed twice).

``--to-disk DIR`` replaces DIR only when it is absent, an empty folder, or an earlier ``publish
--to-disk`` output of the same ``--what``: such an output holds `PUBLISH_MARKER` (``{what, run_dir,
rows, files, ...}``, written with the dataset) and nothing but the files it lists. Anything else (a run
directory, a folder with a user's files, a file, a symbolic link, a publish of another kind) is refused
with a `PublishTargetError` naming DIR and what it holds, and left untouched.

Command-line level, like `validate`: reads only run-directory files, imports no stage.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, TypedDict

from pydantic import JsonValue

from . import __version__
from .records import (
    DatasetCardFront,
    HubDataFiles,
    HubDatasetConfig,
    PublishMarker,
    RecordError,
    load_json_record,
)
from .rundir import FILES
from .utils.hub import DATASET_LICENSES, PushResult, folder_fingerprint, hub_dataset_id, push_folder
from .utils.io import atomic_write_json, atomic_write_text, read_jsonl

__all__ = ["FIELDS", "PUBLISH_MARKER", "PublishTargetError", "PublishedToDisk", "PublishedToHub", "build_dataset",
           "check_publish_target", "dataset_card", "publish"]

PUBLISH_MARKER = "purecover_publish.json"  # inside a `publish --to-disk` output: what it is and what it holds

WHAT = ("labels", "selections", "candidates")
# What each field means (docs/reference/run-files.md); fields not listed are described as "see the purecover docs".
FIELDS: dict[str, dict[str, str]] = {
    "candidates": {
        "qid": "question id (from the source dataset)", "dataset": "source dataset name",
        "question": "the question", "answers": "gold answer and its aliases",
        "docs": "the top-K1 retrieved candidates in retrieval order: doc_id, title, text, retrieval score",
        "gold_doc_ids": "doc_ids of the supporting paragraphs, where the dataset has them (else empty)",
    },
    "labels": {
        "qid": "question id (joins candidates)",
        "selected": "the teacher's selected candidate positions (0-based, in pick order)",
        "gains": "the marginal gain of each pick", "steps": "the teacher's reasoning steps",
        "answer": "the teacher's answer", "e": "weight of each reasoning step (softmax over steps)",
        "W": "coverage W[k][i] of step i by candidate k (softmax over candidates); non-finite values are null",
        "bias_key": "the position-bias calibration used", "status": "ok | fallback | error",
        "reason": "why a fallback or error happened", "ratings": "LANCER ratings 0..5 [k][subquestion] (optional)",
        "subquestions": "LANCER sub-questions (optional)", "teacher": "the teacher settings that made this label",
    },
    "selections": {
        "qid": "question id (joins candidates)",
        "selected": "the student selector's kept candidate positions, best first",
        "logits": "the student's score (its readout's logit) of every candidate, in candidate order",
        "probabilities": "softmax of the logits over the candidates, in candidate order",
    },
}
_MANIFESTS = {"candidates": ("data",), "labels": ("data", "label"), "selections": ("data", "train", "select")}
_SECTIONS = {"data": ("data",), "label": ("teacher",), "train": ("student",), "select": ()}


def _read_json(path: Path) -> dict[str, JsonValue] | None:
    """The JSON object in `path` (a stage manifest, read as it is); None when missing, not JSON or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _rows(file: Path) -> tuple[list[dict[str, JsonValue]], list[str]]:
    """The records of `file`, published as they are, and the union of their keys (first-appearance order)."""
    rows, keys = [], {}
    for line, rec in read_jsonl(file):
        if not isinstance(rec, dict):
            raise ValueError(f"{file}:{line}: expected a JSON object")
        rows.append(rec)
        keys.update(dict.fromkeys(rec))
    if not rows:
        raise ValueError(f"{file} has no records: nothing to publish")
    return rows, list(keys)


def build_dataset(file: str | Path) -> Any:
    """A `datasets.Dataset` of the JSONL `file`: every key of any record is a column (null where absent)."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    file = Path(file)
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist")
    rows, keys = _rows(file)
    columns = {}
    for key in keys:
        values = [r.get(key) for r in rows]
        try:
            columns[key] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            bad = next((i for i, v in enumerate(values, 1) if v is not None
                        and type(v) is not type(next(x for x in values if x is not None))), None)
            where = f" (first differing value in record {bad})" if bad else ""
            raise ValueError(f"{file}: field {key!r} has values of incompatible types{where}: {exc}") from None
    return datasets.Dataset(InMemoryTable(pa.table(columns)))


def _section(value: JsonValue, *keys: str) -> dict[str, JsonValue]:
    """``value[keys[0]][keys[1]]...`` when each step is a JSON object, else ``{}``."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _source(run_dir: Path) -> dict[str, JsonValue]:
    """The data section of the recipe that made the run's candidates (data.run.json); {} when unknown."""
    return _section(_read_json(run_dir / "data.run.json"), "recipe", "data")


def dataset_card(run_dir: str | Path, what: str, ds: Any) -> str:
    """README.md of the published dataset: YAML metadata, field meanings, the recipe that made it."""
    import yaml

    run_dir = Path(run_dir)
    data = _source(run_dir)
    name = data.get("dataset")
    path = data.get("path")
    real_source = path not in (None, "demo")
    licence = DATASET_LICENSES.get(str(name)) if real_source else None
    hub_id = hub_dataset_id(path if isinstance(path, str) else None)
    front = DatasetCardFront(
        license=licence or "other", pretty_name=f"purecover {what} ({name or 'unknown'})",
        tags=["purecover", "rag", "reranking"] + ([str(name)] if name else []), size_categories=[_size(len(ds))],
        **({"source_datasets": [hub_id]} if hub_id else {}),
        configs=[HubDatasetConfig(config_name="default", data_files=[HubDataFiles(split="train", path="data/train-*")])])
    recipe: dict[str, JsonValue] = {}
    for stage in _MANIFESTS[what]:
        stage_recipe = _section(_read_json(run_dir / f"{stage}.run.json"), "recipe")
        for section in _SECTIONS[stage]:
            if section in stage_recipe:
                recipe[section] = stage_recipe[section]
    select_summary = _section(_read_json(run_dir / "select.run.json"), "summary")
    if what == "selections" and select_summary:
        recipe["select_summary"] = select_summary
    lic_line = (f"{licence}: the licence of the source dataset ({name}); these records contain or derive from it."
                if licence else "not determined: the source dataset's licence is not known here; check it before "
                "redistributing.")
    fields = FIELDS[what]
    lines = [
        "---", yaml.safe_dump(front.to_json_dict(), sort_keys=False, allow_unicode=True).rstrip("\n"), "---", "",
        f"# purecover {what}", "",
        f"`{FILES[what]}` of a purecover run ({len(ds)} rows), one row per question. Source data: {name} "
        f"(`{' + '.join(map(str, path)) if isinstance(path, list) else path}`, split {data.get('split')}).", "",
        f"License: {lic_line}", "", "## Fields", "",
    ]
    for column in ds.column_names:
        lines.append(f"- `{column}` ({ds.features[column]}): {fields.get(column, 'see the purecover docs')}")
    lines += ["", "## Recipe", "", "The recipe sections of the run that made this file:", "", "```yaml",
              yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True).rstrip("\n") if recipe
              else "# no stage manifests found in the run directory", "```", ""]
    return "\n".join(lines)


def _size(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "n>1M"


class PublishedToDisk(TypedDict):
    """What `publish` returns for ``--to-disk``: the dataset's rows and the folder written."""

    rows: int
    path: str


class PublishedToHub(PushResult):
    """What `publish` returns for ``--push-to-hub``: the push (`purecover.utils.hub.push_folder`) and the rows."""

    rows: int


class PublishTargetError(ValueError):
    """``--to-disk DIR`` names something publish must not replace (module docstring)."""


def _entries(folder: Path) -> list[str]:
    """Relative paths of everything under `folder` (folders with a trailing "/"), sorted."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [f"{(rel / d).as_posix()}/" for d in dirs] + [(rel / f).as_posix() for f in files]
    return sorted(out)


def _earlier_publish(folder: Path) -> PublishMarker | None:
    """The marker of an earlier ``publish --to-disk`` output in `folder`, when it holds only what it lists."""
    marker = folder / PUBLISH_MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        record = load_json_record(marker, PublishMarker)
    except (OSError, RecordError):
        return None
    listed = {*record.files, PUBLISH_MARKER}
    entries = _entries(folder)
    if any(e.endswith("/") or e not in listed or (folder / e).is_symlink() for e in entries):
        return None
    return record


def _describe_folder(folder: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in folder.iterdir())
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"{len(names)} entr{'y' if len(names) == 1 else 'ies'} ({shown})"


def check_publish_target(out: Path, what: str) -> bool:
    """Whether `out` exists and may be replaced by a ``publish --what`` `what` output (False: absent).

    Raises `PublishTargetError` (naming `out` and what it holds) for anything publish must not replace.
    """
    refuse = (f"choose a new or empty folder for --to-disk, or move {out} away yourself "
              "(purecover only replaces an earlier `publish --to-disk` output of the same --what)")
    if out.is_symlink():
        raise PublishTargetError(f"--to-disk {out} is a symbolic link (to {os.readlink(out)}); purecover does "
                                 f"not write through links: {refuse}")
    if not out.exists():
        return False
    if not out.is_dir():
        raise PublishTargetError(f"--to-disk {out} is a file, not a folder, and is not replaced: {refuse}")
    if not any(out.iterdir()):
        return True
    earlier = _earlier_publish(out)
    if earlier is None:
        marked = (out / PUBLISH_MARKER).is_file()
        holds = (f"an earlier publish output with files purecover did not write: {_describe_folder(out)}" if marked
                 else _describe_folder(out))
        raise PublishTargetError(f"--to-disk {out} is not empty and not a purecover publish output: it holds "
                                 f"{holds}; {refuse}")
    if earlier.what != what:
        raise PublishTargetError(f"--to-disk {out} holds the published {earlier.what} of "
                                 f"{earlier.run_dir}, not {what}: {refuse}")
    return True


def _save_to_disk(ds: Any, card: str, out: Path, what: str, run_dir: Path) -> None:
    """Save `ds` + `card` + `PUBLISH_MARKER` beside `out`, then rename into place (replacing only what
    `check_publish_target` allows; it is checked again just before the swap)."""
    check_publish_target(out, what)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        ds.save_to_disk(str(tmp))
        atomic_write_text(tmp / "README.md", card)
        atomic_write_json(tmp / PUBLISH_MARKER, PublishMarker(
            what=what, run_dir=str(run_dir.resolve()), rows=len(ds), files=_entries(tmp),
            published=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            purecover_version=__version__).to_json_dict())
        replace = check_publish_target(out, what)
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}" if replace else None
        if old is not None:
            os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            if old is not None:  # put the earlier output back
                os.rename(old, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def publish(run_dir: str | Path, what: str, *, to_disk: str | Path | None = None, push_to_hub: str | None = None,
            private: bool = False, revision: str | None = None, commit_message: str | None = None
            ) -> PublishedToDisk | PublishedToHub:
    """Publish RUN_DIR's `what` file (module docstring); returns ``{rows, path}`` or the push record + ``rows``."""
    if what not in WHAT:
        raise ValueError(f"--what {what!r}: expected one of {', '.join(WHAT)}")
    if (to_disk is None) == (push_to_hub is None):
        raise ValueError("give exactly one of --to-disk DIR and --push-to-hub REPO")
    run_dir = Path(run_dir)
    if to_disk is not None:
        check_publish_target(Path(to_disk), what)  # before any work: a refused DIR is never touched
    ds = build_dataset(run_dir / FILES[what])
    card = dataset_card(run_dir, what, ds)
    if to_disk is not None:
        out = Path(to_disk)
        _save_to_disk(ds, card, out, what, run_dir)
        return PublishedToDisk(rows=len(ds), path=str(out))
    with tempfile.TemporaryDirectory(prefix=f"purecover-publish-{what}-") as tmp_dir:
        folder = Path(tmp_dir)
        (folder / "data").mkdir()
        ds.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
        atomic_write_text(folder / "README.md", card)
        result = push_folder(folder, str(push_to_hub), record=run_dir / f"publish.{what}.push.json",
                             repo_type="dataset", private=private, revision=revision,
                             commit_message=commit_message or f"Upload purecover {what} of {run_dir.name}",
                             fingerprint=folder_fingerprint(folder))
    return PublishedToHub(**result, rows=len(ds))
