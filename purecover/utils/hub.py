"""Sharing on the Hugging Face Hub: push a folder (create the repo, upload, record the push), licences, Hub ids.

Used by ``purecover export --push-to-hub`` (the selector) and ``purecover publish`` (labels, selections,
candidates as a dataset). Everything goes through `huggingface_hub.HfApi` (``create_repo``,
``create_branch``, ``upload_folder``); the endpoint is ``HF_ENDPOINT`` (read when the push runs) and
the token is huggingface_hub's own (``HF_TOKEN`` or ``hf auth login``): it is never logged or recorded.

A push is recorded in a small JSON file (e.g. ``run_dir/export.push.json``): repo, revision, commit,
URL and the fingerprint of what was pushed (sha256 over the relative paths and bytes of every file).
Pushing the same content to the same repo and revision again is recognised from that record and does
nothing.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TypedDict

from pydantic import JsonValue

from ..records import PushRecord, RecordError, load_json_record
from .io import atomic_write_json

log = logging.getLogger(__name__)

__all__ = ["DATASET_LICENSES", "PushResult", "folder_fingerprint", "hub_dataset_id", "model_license", "push_folder",
           "read_card_metadata"]

# Licences of the source datasets (their official releases); FlashRAG's files mix sources: unknown.
DATASET_LICENSES = {"hotpotqa": "cc-by-sa-4.0", "2wiki": "apache-2.0", "musique": "cc-by-4.0", "strategyqa": "mit"}


def hub_dataset_id(path: str | None) -> str | None:
    """`path` when it names a Hub dataset (``org/name``, not a local path, no file suffix), else None.

    The same rule as the data loaders: "demo", an existing path, ``./``, ``/``, ``~`` or a suffix mean a file.
    """
    if not path or path == "demo" or Path(path).exists():
        return None
    if "/" not in path or path.startswith((".", "/", "~")) or Path(path).suffix:
        return None
    return path


def read_card_metadata(readme: str | Path) -> dict[str, JsonValue]:
    """The YAML front matter of a model/dataset card (``---`` ... ``---``) as parsed; {} when absent or unreadable."""
    import yaml

    path = Path(readme)
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    try:
        meta = yaml.safe_load(text[4:end])
    except yaml.YAMLError as exc:
        log.warning("%s: unreadable YAML front matter (%s)", path, exc)
        return {}
    return meta if isinstance(meta, dict) else {}


def model_license(model: str) -> dict[str, str] | None:
    """The licence of `model` (a local directory or a Hub id), from its card's front matter, without network.

    Local directory: its README.md (then config.json's ``license``, rarely present); Hub id: the README.md in
    the local Hugging Face cache, if it was downloaded. Returns ``{"license": ..., ["license_name",
    "license_link"]}`` or None when not determinable here.
    """
    readme: Path | None = None
    config: Path | None = None
    if Path(model).is_dir():
        readme, config = Path(model) / "README.md", Path(model) / "config.json"
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "README.md")
            readme = Path(cached) if isinstance(cached, str) else None
        except Exception as exc:  # an invalid repo id: simply unknown
            log.debug("no cached card for %s: %s", model, exc)
    meta = read_card_metadata(readme) if readme else {}
    if not meta.get("license") and config is not None and config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("license")
        except (json.JSONDecodeError, AttributeError):
            value = None
        meta = {"license": value} if isinstance(value, str) else {}
    lic = meta.get("license")
    if not isinstance(lic, str) or not lic:
        return None
    out = {"license": lic}
    for key in ("license_name", "license_link"):
        if isinstance(meta.get(key), str):
            out[key] = meta[key]
    return out


def folder_fingerprint(folder: str | Path) -> str:
    """sha256 over the sorted relative paths and the bytes of every file under `folder` (hex, 16 chars)."""
    root = Path(folder)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()[:16]


class PushResult(TypedDict):
    """What `push_folder` returns: the push record (`purecover.records.PushRecord`, the file's keys) and whether
    the push was recognised as already made (nothing sent)."""

    endpoint: str
    repo_id: str
    repo_type: str
    revision: str
    url: str
    commit: str
    commit_url: str
    fingerprint: str
    private: bool
    files: list[str]
    pushed_at: str
    already_pushed: bool


def _result(record: PushRecord, already_pushed: bool) -> PushResult:
    return PushResult(endpoint=record.endpoint, repo_id=record.repo_id, repo_type=record.repo_type,
                      revision=record.revision, url=record.url, commit=record.commit, commit_url=record.commit_url,
                      fingerprint=record.fingerprint, private=record.private, files=list(record.files),
                      pushed_at=record.pushed_at, already_pushed=already_pushed)


def _endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def push_folder(folder: str | Path, repo_id: str, *, record: str | Path, repo_type: str = "model",
                private: bool = False, revision: str | None = None, commit_message: str | None = None,
                fingerprint: str | None = None) -> PushResult:
    """Upload `folder` to `repo_id` so the repo holds exactly its files; record the push in `record`.

    Creates the repo (exist_ok) and the branch `revision` (from main, exist_ok), then ``upload_folder``
    with ``delete_patterns="*"`` (remote files not in `folder` are removed; ``.gitattributes`` stays).
    When `record` says the same fingerprint was already pushed to the same endpoint, repo, type and
    revision, nothing is sent and the result has ``already_pushed: true``.
    """
    from huggingface_hub import HfApi

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} does not exist: nothing to push")
    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"--push-to-hub {repo_id!r}: expected a repo id 'owner/name'")
    endpoint = _endpoint()
    fp = fingerprint or folder_fingerprint(folder)
    target = (endpoint, repo_id, repo_type, revision or "main")
    record = Path(record)
    previous: PushRecord | None = None
    if record.is_file():
        try:
            previous = load_json_record(record, PushRecord)
        except RecordError as exc:
            log.warning("%s; pushing again", exc)
    if previous is not None and previous.fingerprint == fp \
            and (previous.endpoint, previous.repo_id, previous.repo_type, previous.revision) == target:
        log.info("%s is already pushed to %s (commit %s)", folder, previous.url, previous.commit)
        return _result(previous, already_pushed=True)
    api = HfApi(endpoint=endpoint)
    repo_url = api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    if revision and revision != "main":
        api.create_branch(repo_id, branch=revision, repo_type=repo_type, exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type=repo_type, revision=revision,
                             commit_message=commit_message or f"Upload {folder.name} with purecover",
                             delete_patterns="*")
    url = str(repo_url) if not revision or revision == "main" else f"{str(repo_url).rstrip('/')}/tree/{revision}"
    result = PushRecord(endpoint=endpoint, repo_id=repo_id, repo_type=repo_type, revision=revision or "main", url=url,
                        commit=info.oid, commit_url=info.commit_url, fingerprint=fp, private=bool(private),
                        files=sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()),
                        pushed_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    atomic_write_json(record, result.to_json_dict())
    log.info("pushed %s to %s (commit %s)", folder, url, info.oid)
    return _result(result, already_pushed=False)
