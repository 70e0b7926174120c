"""Hub datasets by name (or a local copy of a dataset repository), through `datasets`.

`resolve_hub_dataset` turns the recipe's (name, ``data.hub_config``, ``data.split``) into what
exists: the configuration (HotpotQA's Hub repositories default to ``distractor``, FlashRAG's to the
dataset's own name), the split (``dev`` ↔ ``validation``/``val``/``valid`` when the requested one
does not exist), or, when a configuration is not declared on the dataset card but the repository
has ``<config>/<split>.jsonl`` files (FlashRAG's StrategyQA), those files read with
``datasets.load_dataset("json", data_files=...)``. What does not exist is a `HubDatasetError`
listing the configurations and splits that do, with a "did you mean" and the recipe key to set.

A local directory laid out like a Hub dataset repository (a README.md whose YAML front matter
declares ``configs:``, or ``<config>/<split>.jsonl`` files) resolves exactly like a Hub id; the
only Hub-specific parts are the reachability probe and listing the repository's files.

Offline (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set) a Hub id is not resolved: only the local
`datasets` cache is tried. Online, the Hub endpoint is probed with a short timeout first, so a
machine without network fails at once with a clear message instead of retrying for minutes.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from pydantic import JsonValue

from ...records import HubSummary
from ..errors import HubDatasetError, HubUnavailableError

__all__ = ["FLASHRAG_HUB", "HOTPOTQA_HUB", "SPLIT_ALIASES", "ResolvedHub", "default_hub_config", "dry_run_status",
           "hub_offline", "is_hub_name", "iter_hub_rows", "probe_hub", "resolve_hub_dataset", "resolve_hub_file"]

log = logging.getLogger(__name__)

FLASHRAG_HUB = "RUC-NLPIR/FlashRAG_datasets"
_FLASHRAG_CONFIGS = {"hotpotqa": "hotpotqa", "2wiki": "2wikimultihopqa", "musique": "musique",
                     "strategyqa": "strategyqa"}
HOTPOTQA_HUB = ("hotpotqa/hotpot_qa", "hotpot_qa")  # the canonical id and its legacy (redirected) name
_HOTPOTQA_DEFAULT = "distractor"  # the dev distractor setting: the loader reads its 10 paragraphs per question
# Requested split -> the names to try, in order, when it does not exist.
SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "dev": ("validation", "val", "valid"),
    "validation": ("dev", "val", "valid"),
    "val": ("validation", "dev", "valid"),
    "valid": ("validation", "dev", "val"),
    "test": ("testing",),
    "train": ("training",),
}
_DATA_EXTENSIONS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
_ADVICE = ("download the dataset file and set data.path to it, or run where the Hub is reachable "
           "(the Hub name is resolved with `datasets.load_dataset`)")


def default_hub_config(name: str, dataset: str) -> str | None:
    """The configuration used when ``data.hub_config`` is null: FlashRAG's per-dataset name, HotpotQA's
    ``distractor``; None for repositories with a single (default) configuration."""
    if name == FLASHRAG_HUB:
        return _FLASHRAG_CONFIGS.get(dataset)
    if name in HOTPOTQA_HUB:
        return _HOTPOTQA_DEFAULT
    return None


def is_hub_name(path: str) -> bool:
    """`path` reads as a Hub dataset id (``owner/name`` or a known legacy name), not as a local file."""
    if path in HOTPOTQA_HUB:
        return True
    return "/" in path and not path.startswith((".", "/", "~")) and not Path(path).suffix and path.count("/") == 1


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set to a true value."""
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))



def probe_hub(timeout: float = 5.0) -> None:
    """Open one TCP connection to the Hub endpoint (``HF_ENDPOINT``); `HubUnavailableError` if it fails."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise HubUnavailableError(f"cannot reach the Hugging Face Hub at {endpoint} ({exc}); {_ADVICE}") from None



@dataclass
class ResolvedHub:
    """What a (name, config, split) request resolved to.

    `config` and `split` are what is read; `data_files` (split -> files, local paths or ``hf://``
    URLs) is set when the configuration is read from the repository's files (`builder` names the
    `datasets` packaged loader, e.g. ``json``). `checked` is False when nothing could be verified
    (offline: only the local cache will be tried). `notes` say what differs from the request.
    """

    name: str
    requested_config: str | None
    requested_split: str
    config: str | None
    split: str
    local: bool = False
    checked: bool = True
    data_files: dict[str, list[str]] | None = None
    builder: str | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line: ``config 'distractor', split 'validation' (...notes)``."""
        where = "data files of folder " + repr(self.config) if self.data_files is not None else (
            f"config {self.config!r}" if self.config else "default config")
        text = f"{where}, split {self.split!r}"
        return text + (f" ({'; '.join(self.notes)})" if self.notes else "")

    def to_summary(self) -> HubSummary:
        """What the data stage records in data.run.json (``hub`` of its summary)."""
        return HubSummary(name=self.name, config=self.config, split=self.split, requested_config=self.requested_config,
                          requested_split=self.requested_split, data_files=self.data_files, checked=self.checked,
                          notes=list(self.notes))

    def _note(self, text: str) -> None:
        self.notes.append(text)
        log.info("%s: %s", self.name, text)


def _did_you_mean(wanted: str | None, options: list[str]) -> str:
    if not wanted or not options:
        return ""
    low = {o.lower(): o for o in options}
    close = difflib.get_close_matches(wanted.lower(), list(low), n=1, cutoff=0.6)
    if not close:
        close = [o for o in low if wanted.lower() in o or o in wanted.lower()][:1]
    return f" (did you mean {low[close[0]]!r}?)" if close else ""


def _repo_files(name: str, local: bool) -> list[str]:
    """The repository's file paths (POSIX, relative to its root); hidden folders are left out."""
    if local:
        root = Path(name)
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    from huggingface_hub import HfApi

    return sorted(HfApi().list_repo_files(name, repo_type="dataset"))


def _config_files(files: list[str], config: str) -> dict[str, list[str]]:
    """``<config>/<split>[-NNNNN-of-NNNNN].<ext>`` files, grouped by split (one file type only)."""
    out: dict[str, list[str]] = {}
    for ext in _DATA_EXTENSIONS:  # the first extension that has files wins
        for f in files:
            folder, _, base = f.rpartition("/")
            if folder == config and base.endswith(ext):
                split = _SHARD.sub("", base[: -len(ext)])
                if re.fullmatch(r"\w+(\.\w+)*", split):
                    out.setdefault(split, []).append(f)
        if out:
            return out
    return out


def _folders(files: list[str]) -> list[str]:
    """Top-level folders holding data files (the candidate configurations of a data-files repository)."""
    return sorted({f.split("/", 1)[0] for f in files if "/" in f and Path(f).suffix in _DATA_EXTENSIONS})


def _pick_split(resolved: ResolvedHub, splits: list[str], split_key: str, where: str) -> None:
    if resolved.requested_split in splits:
        resolved.split = resolved.requested_split
        return
    for alias in SPLIT_ALIASES.get(resolved.requested_split, ()):
        if alias in splits:
            resolved.split = alias
            resolved._note(f"split {resolved.requested_split!r} does not exist: using {alias!r} ({split_key})")
            return
    raise HubDatasetError(
        f"{where} has no split {resolved.requested_split!r}{_did_you_mean(resolved.requested_split, splits)}; "
        f"its splits: {', '.join(splits) or 'none'}. Set {split_key} to one of them")


def resolve_hub_dataset(name: str, dataset: str, config: str | None, split: str, *,
                        split_key: str = "data.split", config_key: str = "data.hub_config",
                        probe: bool = True) -> ResolvedHub:
    """Resolve a Hub dataset id (or a local dataset repository folder) to an existing config and split.

    Raises `HubDatasetError` when the configuration or split does not exist (the message lists what
    does and names `config_key` / `split_key`), `HubUnavailableError` when the Hub cannot be reached.
    Offline, a Hub id comes back unchecked (``checked=False``) with the default configuration.
    `probe=False` skips the reachability probe (the caller has just made one).
    """
    local = Path(name).expanduser().is_dir()
    repo = str(Path(name).expanduser()) if local else name
    resolved = ResolvedHub(name=name, requested_config=config, requested_split=split, config=config, split=split,
                           local=local)
    if config is None:
        default = default_hub_config(name, dataset)
        if default is not None:
            resolved.config = default
            why = ("HotpotQA's dev distractor setting, whose paragraphs the loader reads" if name in HOTPOTQA_HUB
                   else f"FlashRAG's configuration for {dataset}")
            resolved._note(f"{config_key} is null: using {default!r} ({why})")
    if not local and hub_offline():
        resolved.checked = False
        return resolved
    if not local and probe:
        probe_hub()
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    kind = "local dataset repository" if local else "Hub dataset"
    try:
        configs = list(datasets.get_dataset_config_names(repo))
    except DatasetNotFoundError as exc:
        raise HubDatasetError(f"{kind} {name!r} not found ({exc}); check data.path (a private or gated "
                              "dataset needs `hf auth login`)") from None
    except Exception as exc:
        if local:
            raise HubDatasetError(f"folder {name!r} is not a readable dataset repository (a README.md declaring "
                                  f"`configs:` or data files such as <config>/<split>.jsonl): {exc}") from exc
        raise HubUnavailableError(f"cannot list the configurations of {kind} {name!r}: {exc}; {_ADVICE}") from exc
    config_now = resolved.config
    if config_now is None and len(configs) > 1 and "default" not in configs:
        raise HubDatasetError(f"{kind} {name!r} has several configurations: {', '.join(configs)}; "
                              f"set {config_key} to one of them")
    if config_now is not None and config_now not in configs:
        try:
            files = _repo_files(repo, local)
        except Exception as exc:
            raise HubUnavailableError(f"cannot list the files of {kind} {name!r}: {exc}; {_ADVICE}") from exc
        by_split = _config_files(files, config_now)
        if not by_split:
            folders = [f for f in _folders(files) if f not in configs]
            extra = f"; folders with data files: {', '.join(folders)}" if folders else ""
            raise HubDatasetError(
                f"{kind} {name!r} has no configuration {config_now!r}"
                f"{_did_you_mean(config_now, configs + folders)}; its configurations: {', '.join(configs)}{extra}. "
                f"Set {config_key} to one of them")
        _pick_split(resolved, sorted(by_split), split_key, f"folder {config_now!r} of {kind} {name!r}")
        prefix = f"{repo}/" if local else f"hf://datasets/{name}/"
        resolved.data_files = {resolved.split: [prefix + f for f in by_split[resolved.split]]}
        first = by_split[resolved.split][0]
        resolved.builder = next(b for e, b in _DATA_EXTENSIONS.items() if first.endswith(e))
        resolved._note(f"configuration {config_now!r} is not declared on the dataset card: reading the "
                       f"repository's files {', '.join(by_split[resolved.split])}")
        return resolved
    try:
        splits = list(datasets.get_dataset_split_names(repo, config_now))
    except Exception as exc:
        error = HubDatasetError if local else HubUnavailableError
        raise error(f"cannot list the splits of {kind} {name!r}: {exc}" + ("" if local else f"; {_ADVICE}")) from exc
    where = f"{kind} {name!r}" + (f" (config {config_now!r})" if config_now else "")
    _pick_split(resolved, splits, split_key, where)
    return resolved


def iter_hub_rows(resolved: ResolvedHub,
                  split_key: str = "data.split") -> Iterator[tuple[str, dict[str, JsonValue]]]:
    """Yield (``"row I"``, row as `datasets` gives it, checked by the loader) of a resolved dataset: streamed; offline (unchecked), from the local
    `datasets` cache, where the split is resolved (aliases included) among the cached splits."""
    import datasets

    kind = "local dataset repository" if resolved.local else "Hub dataset"
    repo = str(Path(resolved.name).expanduser()) if resolved.local else resolved.name
    try:
        if resolved.data_files is not None:
            rows = datasets.load_dataset(resolved.builder or "json", data_files=resolved.data_files,
                                         split=resolved.split, streaming=True)
        elif resolved.checked:
            rows = datasets.load_dataset(repo, resolved.config, split=resolved.split, streaming=True)
        else:
            cached = datasets.load_dataset(repo, resolved.config)
            _pick_split(resolved, list(cached), split_key, f"the cached copy of {kind} {resolved.name!r}")
            rows = cached[resolved.split]
        iterator = iter(rows)
    except HubDatasetError:
        raise
    except Exception as exc:
        what = f"{kind} {resolved.name!r}, {resolved.describe()}"
        reason = "offline mode is on and it is not in the local cache" if not resolved.checked else str(exc)
        raise HubUnavailableError(f"cannot load {what}: {reason}; {_ADVICE}") from exc
    for i, row in enumerate(iterator):
        yield f"row {i}", dict(row)


def dry_run_status(path: str, dataset: str, config: str | None, split: str, *,
                   split_key: str = "data.split") -> tuple[str, str] | None:
    """``(status, note)`` of a dataset path for ``purecover pipeline --dry-run``, or None when `path` is
    neither a Hub id nor a local folder (a file: the caller classifies it).

    status: ``found`` (config and split resolved; the note says which), ``missing`` (the note is the
    `HubDatasetError` message), ``hub`` (not checked: offline, or the Hub is unreachable). Never hangs:
    a Hub id is only resolved after the short reachability probe.
    """
    p = Path(path).expanduser()
    if p.is_file() or (not p.is_dir() and not is_hub_name(path)):
        return None
    kind = "local dataset repository" if p.is_dir() else "Hub dataset"
    try:
        resolved = resolve_hub_dataset(path, dataset, config, split, split_key=split_key)
    except HubDatasetError as exc:
        return "missing", str(exc)
    except HubUnavailableError as exc:
        return "hub", f"{kind}, not checked: the Hub is unreachable ({str(exc).split(';')[0]})"
    if not resolved.checked:
        return "hub", f"{kind}, not checked: offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); would read {resolved.describe()}"
    return "found", f"{kind}: {resolved.describe()}"


HUB_FILE_PREFIX = "hf://datasets/"


def resolve_hub_file(spec: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A local path as it is, or ``hf://datasets/OWNER/NAME/PATH`` (a file of a Hub dataset repository, e.g. a
    coverage collection's qrels) fetched through ``huggingface_hub.hf_hub_download`` into its cache (`cache_dir`:
    another cache; offline, the cached copy). `HubUnavailableError` when it can be neither fetched nor found."""
    text = str(spec)
    if not text.startswith(HUB_FILE_PREFIX):
        return Path(text)
    parts = text[len(HUB_FILE_PREFIX):].split("/", 2)
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"{text!r}: a Hub dataset file is written hf://datasets/OWNER/NAME/PATH")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(f"{parts[0]}/{parts[1]}", parts[2], repo_type="dataset", cache_dir=cache_dir))
    except Exception as exc:  # offline without a cached copy, no such repository or file, no network
        raise HubUnavailableError(f"cannot fetch {text}: {str(exc).splitlines()[0][:300]}; download the file and "
                                  "give its local path, or run where the Hub is reachable") from None
