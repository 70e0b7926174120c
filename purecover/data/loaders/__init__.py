"""Dataset loaders: official files, FlashRAG JSONL, the bundled demo set and Hub datasets.

`ExampleSource` is the single entry point: it streams `Example`s from a file, a list of files (read in list
order as one source: ``data.path: [a.json, b.json]``), a Hub name or a local dataset repository folder, checks
each record, and either stops at the first malformed one
(the error names file, line/index and field) or, with ``skip_invalid=True``, skips it and records it
in `invalid`. Hub names are resolved first (`hub.resolve_hub_dataset`: default configuration, split
aliases, data-files fallback); the result is in `resolved`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataFormatError, DuplicateQuestionError, InvalidRecord
from ..example import Example
from ..paths import data_path_entries, is_path_list, list_entry_problem, not_a_file, show_data_path
from ..readers import check_lone_surrogates, iter_records
from .coverage import parse_coverage
from .flashrag import parse_flashrag
from .hotpotqa import load_2wiki_aliases, parse_2wiki, parse_hotpotqa
from .hub import ResolvedHub, is_hub_name, iter_hub_rows, resolve_hub_dataset
from .musique import parse_musique
from .strategyqa import parse_strategyqa

__all__ = ["DATASETS", "ExampleSource", "load_examples", "parse_record"]

DATASETS = ("hotpotqa", "2wiki", "musique", "strategyqa", "flashrag", "coverage")

Parser = Callable[..., Example]
_PARSERS: dict[str, Parser] = {
    "hotpotqa": parse_hotpotqa,
    "2wiki": parse_2wiki,
    "musique": parse_musique,
    "strategyqa": parse_strategyqa,
    "coverage": parse_coverage,
}


def demo_path() -> Path:
    """The bundled demo set (HotpotQA format, our own text)."""
    return Path(__file__).resolve().parent.parent / "demo" / "demo_hotpot.json"


def parse_record(dataset: str, record: Any, source: str, location: str, *, require_paragraphs: bool = True,
                 aliases: dict[str, list[str]] | None = None) -> Example:
    """Parse one raw record of `dataset`; FlashRAG-shaped records (``golden_answers``) are detected."""
    if dataset == "flashrag" or (isinstance(record, dict) and "golden_answers" in record):
        example = parse_flashrag(record, source, location, dataset=dataset, require_paragraphs=require_paragraphs)
        if dataset == "2wiki" and aliases and example.meta.get("answer_id"):
            example.answers += [a for a in aliases.get(example.meta["answer_id"], []) if a not in example.answers]
        return example
    if dataset == "2wiki":
        return parse_2wiki(record, source, location, require_paragraphs=require_paragraphs, aliases=aliases)
    if dataset not in _PARSERS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")
    return _PARSERS[dataset](record, source, location, require_paragraphs=require_paragraphs)


class ExampleSource:
    """Iterable of `Example`s from `path` (a file, ``"demo"``, a Hub dataset name or a local folder laid
    out like a Hub dataset repository), or from a list of local files of one format, read in list order as one
    source (`limit` counts the union; a list of one is that file).

    After (or during) iteration, `invalid` lists the skipped records, `n_read` counts the raw
    records seen and `resolved` holds the Hub configuration/split actually read (None for files).
    Duplicate qids are malformed input too; a qid found in two files of a list is a `DuplicateQuestionError`
    naming both (never skipped: the list overlaps). A list entry that is missing, a folder, ``demo`` or a Hub
    name is refused here, before any file is read. `split_key` is the recipe key named in split errors.
    """

    def __init__(self, dataset: str, path: str | Path | Sequence[str | Path] | None, *, split: str = "dev",
                 limit: int | None = None,
                 skip_invalid: bool = False, aliases_path: str | Path | None = None,
                 require_paragraphs: bool = True, hub_config: str | None = None,
                 split_key: str = "data.split") -> None:
        if dataset not in DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")
        if path is None:
            raise ValueError("data.path is not set: give a dataset file, 'demo', or a Hub dataset name")
        if is_path_list(path) and not path:
            raise ValueError("data.path is an empty list: give a dataset file, or a list of files")
        entries = data_path_entries(path)
        listed: dict[str, str] = {}  # entry -> the key of its first listing (linear in the list's length)
        for key, entry in entries if len(entries) > 1 else ():
            if entry in listed:
                raise ValueError(f"{key} {entry!r} is listed twice in data.path (first as {listed[entry]})")
            listed[entry] = key
        for key, entry in entries if len(entries) > 1 else ():  # a list: every file is there before one is read
            problem = list_entry_problem(entry)
            if problem is not None:
                raise ValueError(f"{key} {entry!r} {problem}")
            if not Path(entry).expanduser().is_file():
                raise FileNotFoundError(f"{key} {entry!r} {not_a_file(Path(entry).expanduser())} (data.path lists "
                                        f"{len(entries)} files, each read in list order)")
        self._keys = {entry: key for key, entry in entries}
        self.dataset = dataset
        self.files: list[str] = [entry for _, entry in entries]  # several: a list of local files
        self.path = show_data_path(self.files) if len(self.files) > 1 else self.files[0]
        self.split = split
        self.limit = limit
        self.skip_invalid = skip_invalid
        self.require_paragraphs = require_paragraphs
        self.hub_config = hub_config
        self.split_key = split_key
        self.resolved: ResolvedHub | None = None
        self.aliases = load_2wiki_aliases(aliases_path) if aliases_path else None
        self.invalid: list[InvalidRecord] = []
        self.n_read = 0
        if self.path == "demo" and dataset != "hotpotqa":
            raise ValueError("the bundled demo set is in HotpotQA format: use data.dataset=hotpotqa with data.path=demo")

    @property
    def is_hub(self) -> bool:
        """Read through `datasets`: a Hub name (no such local path) or a local dataset repository folder."""
        return len(self.files) == 1 and self.path != "demo" and (not Path(self.path).exists() or
                                                                   Path(self.path).is_dir())

    def resolve(self) -> ResolvedHub:
        """Resolve the Hub name's configuration and split (see `hub.resolve_hub_dataset`); cached."""
        if self.resolved is None:
            if not Path(self.path).exists() and not is_hub_name(self.path):
                raise FileNotFoundError(f"data.path {self.path!r} does not exist (and is not a Hub dataset name)")
            self.resolved = resolve_hub_dataset(self.path, self.dataset, self.hub_config, self.split,
                                                split_key=self.split_key)
        return self.resolved

    def _raw(self) -> Iterator[tuple[str, str, Any]]:
        if self.path == "demo":
            file = demo_path()
            for loc, rec in iter_records(file, check_text=False):
                yield str(file), loc, rec
        elif not self.is_hub:
            for file in self.files:  # one file, or each file of a list in list order
                for loc, rec in iter_records(Path(file).expanduser() if len(self.files) > 1 else file,
                                             check_text=False):
                    yield file, loc, rec
                if len(self.files) > 1:
                    yield file, None, None  # the end of one file of a list (`__iter__` checks it gave questions)
        else:
            resolved = self.resolve()
            for loc, rec in iter_hub_rows(resolved, self.split_key):
                yield f"hub:{self.path}", loc, rec

    def __iter__(self) -> Iterator[Example]:
        seen: dict[str, tuple[str, str]] = {}  # qid -> (file, location) of its first record
        produced = 0
        file_start, file_invalid = 0, 0  # questions produced before the current file of a list, invalid in it
        for source, location, record in self._raw():
            if self.limit is not None and produced >= self.limit:
                return
            if location is None:  # a file of a list ended: it must have given a question, as a file alone must
                if produced == file_start:
                    raise ValueError(f"{self._keys[source]} {source!r} holds no valid question "
                                     f"({len(self.invalid) - file_invalid} invalid): an empty file in a data.path "
                                     "list is refused, as it is alone; remove it from the list")
                file_start, file_invalid = produced, len(self.invalid)
                continue
            self.n_read += 1
            try:
                check_lone_surrogates(record, source, location)  # here, so skip_invalid can skip it
                example = parse_record(self.dataset, record, source, location,
                                       require_paragraphs=self.require_paragraphs, aliases=self.aliases)
                first = seen.get(example.qid)
                if first is not None and first[0] == source:
                    raise DataFormatError(source, location, "id",
                                          f"duplicate question id {example.qid!r} (first at {first[1]})")
            except DataFormatError as err:
                if not self.skip_invalid:
                    raise
                self.invalid.append(err.invalid_record())
                continue
            if first is not None:  # in two files of a list: they overlap, whatever skip_invalid says
                raise DuplicateQuestionError(example.qid, first, (source, location))
            seen[example.qid] = (source, location)
            produced += 1
            yield example


def load_examples(dataset: str, path: str | Path | Sequence[str | Path] | None, **kwargs: Any) -> list[Example]:
    """All examples of a source as a list (see `ExampleSource` for the keyword arguments)."""
    return list(ExampleSource(dataset, path, **kwargs))
