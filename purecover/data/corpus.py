"""Passage corpora: from the questions' own paragraphs, or from a corpus JSONL file.

Two implementations share one read interface (`CorpusLike`): `Corpus` holds its passages as
Python objects (the questions' own paragraphs, small files, tests) and
`purecover.data.corpus_store.CorpusStore` reads a memory-mapped Arrow copy of a corpus file
(Wikipedia-sized corpora). Retrievers and the gold mapping use only the interface.

Passages built from dataset paragraphs get a content id (``d`` + 16 hex of SHA-1 over title and
text), so the same paragraph has the same id in ``per_question`` and ``shared`` mode and across
runs. A corpus file keeps its own ids; it may hold ``{id, title, text}`` rows or FlashRAG's
``{id, contents}`` rows (``contents`` = title line, newline, text; quotes around the title are
dropped).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

from .errors import DataFormatError, InvalidRecord
from .example import Example
from .loaders._fields import RecordView
from .passage import passage_text
from .readers import check_lone_surrogates, iter_jsonl

__all__ = ["CONTENTS_BATCH", "Corpus", "CorpusLike", "Doc", "content_doc_id", "corpus_from_examples",
           "duplicate_id_error", "iter_corpus_rows", "load_corpus_jsonl", "normalize_title", "parse_corpus_row",
           "question_docs"]

CONTENTS_BATCH = 4096  # passages per list yielded by `iter_contents` (bounded memory for any corpus size)


@dataclass(frozen=True)
class Doc:
    """One passage."""

    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text as one string (what retrievers index): `purecover.data.passage.passage_text`."""
        return passage_text(self.title, self.text)


def content_doc_id(title: str, text: str) -> str:
    """Stable id of a passage from its content: ``d`` + 16 hex digits."""
    return "d" + hashlib.sha1(f"{title}\x1f{text}".encode()).hexdigest()[:16]


def normalize_title(title: str) -> str:
    """Title key for matching across sources: NFC, case-folded, outer quotes and spaces removed."""
    return unicodedata.normalize("NFC", title).strip().strip('"').strip().casefold()


class CorpusLike(Protocol):
    """What retrievers and the gold mapping read from a corpus; position i is the document number."""

    source: str

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Doc: ...

    def docs_at(self, positions: Sequence[int]) -> list[Doc]:
        """The passages at `positions`, in that order."""
        ...

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) over ids, titles and texts in order: equal for equal passage lists."""
        ...

    def iter_contents(self, start: int = 0, stop: int | None = None,
                      batch_size: int = CONTENTS_BATCH) -> Iterator[list[str]]:
        """`passage_text` of positions ``start..stop-1`` in order, in lists of at most `batch_size`."""
        ...

    def ids_with_title(self, title: str) -> list[str]:
        """Ids of the passages whose `normalize_title` equals that of `title`, in corpus order."""
        ...

    def id_of_text(self, text: str) -> str | None:
        """Id of the first passage whose stripped text equals ``text.strip()`` (None when none does)."""
        ...


class Corpus:
    """An ordered list of unique passages held in memory; index i is the retrievers' document number."""

    def __init__(self, docs: Iterable[Doc], source: str) -> None:
        self.source = source
        self.docs: list[Doc] = []
        self._pos: dict[str, int] = {}
        for doc in docs:
            if doc.doc_id in self._pos:
                continue
            self._pos[doc.doc_id] = len(self.docs)
            self.docs.append(doc)

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> Doc:
        return self.docs[i]

    def position(self, doc_id: str) -> int | None:
        return self._pos.get(doc_id)

    def docs_at(self, positions: Sequence[int]) -> list[Doc]:
        return [self.docs[int(i)] for i in positions]

    def iter_contents(self, start: int = 0, stop: int | None = None,
                      batch_size: int = CONTENTS_BATCH) -> Iterator[list[str]]:
        stop = len(self.docs) if stop is None else min(stop, len(self.docs))
        for i in range(start, stop, batch_size):
            yield [d.contents for d in self.docs[i:min(i + batch_size, stop)]]

    def ids_with_title(self, title: str) -> list[str]:
        return list(self.title_index.get(normalize_title(title), []))

    def id_of_text(self, text: str) -> str | None:
        return self.text_index.get(text.strip())

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 over ids, titles and texts in order: changes whenever the corpus does."""
        h = hashlib.sha256()
        for d in self.docs:
            h.update(d.doc_id.encode())
            h.update(b"\x1f")
            h.update(d.title.encode())
            h.update(b"\x1f")
            h.update(d.text.encode())
            h.update(b"\x1e")
        return h.hexdigest()

    @cached_property
    def title_index(self) -> dict[str, list[str]]:
        """Normalised title → doc ids with that title."""
        index: dict[str, list[str]] = {}
        for d in self.docs:
            if d.title:
                index.setdefault(normalize_title(d.title), []).append(d.doc_id)
        return index

    @cached_property
    def text_index(self) -> dict[str, str]:
        """Stripped text → first doc id with that text (for datasets whose passages have no title)."""
        index: dict[str, str] = {}
        for d in self.docs:
            index.setdefault(d.text.strip(), d.doc_id)
        return index


def question_docs(example: Example) -> list[Doc]:
    """The question's own paragraphs as passages (duplicates removed, order kept)."""
    seen: set[str] = set()
    docs = []
    for p in example.paragraphs:
        doc = Doc(content_doc_id(p.title, p.text), p.title, p.text)
        if doc.doc_id not in seen:
            seen.add(doc.doc_id)
            docs.append(doc)
    return docs


def corpus_from_examples(examples: Iterable[Example], source: str = "shared") -> Corpus:
    """Union of the paragraphs of all `examples` (the ``shared`` corpus), in first-seen order."""
    return Corpus((d for ex in examples for d in question_docs(ex)), source)


def parse_corpus_row(obj: object, source: str, location: str) -> Doc:
    """One corpus record as a `Doc` (``{id, title, text}`` or FlashRAG's ``{id, contents}``).

    Bad records raise `DataFormatError` naming `source`, `location` and the field.
    """
    check_lone_surrogates(obj, source, location)
    view = RecordView(obj, source, location)
    doc_id = view.first(("id", "doc_id", "_id"), str, nonempty=True, numbers_as_text=True)
    if view.has("contents"):
        contents = view.get("contents", str)
        head, sep, rest = contents.partition("\n")
        title, text = (head.strip().strip('"'), rest.strip()) if sep else ("", head.strip())
    else:
        title = view.get("title", str, optional=True, default="")
        text = view.get("text", str)
    if not text.strip():
        raise view.fail("text", "is empty")
    return Doc(doc_id, title.strip(), text.strip())


def iter_corpus_rows(path: Path, skip_invalid: bool = False, invalid: list[InvalidRecord] | None = None,
                     progress: Callable[[int], None] | None = None) -> Iterator[tuple[str, Doc]]:
    """(location, `Doc`) for each valid record of a corpus JSONL; duplicates are the caller's to find.

    With `skip_invalid`, malformed records are skipped and appended to `invalid`; else the first raises.
    `progress` receives the bytes read so far (see `iter_jsonl`).
    """
    for location, obj in iter_jsonl(path, check_text=False, progress=progress):  # checked per record: skip_invalid applies
        try:
            doc = parse_corpus_row(obj, str(path), location)
        except DataFormatError as err:
            if not skip_invalid:
                raise
            if invalid is not None:
                invalid.append(err.invalid_record())
            continue
        yield location, doc


def duplicate_id_error(source: str, location: str, doc_id: str, first: str) -> DataFormatError:
    """The error for a passage id seen before (`first`: the earlier record's location)."""
    return DataFormatError(source, location, "id", f"duplicate passage id {doc_id!r} (first at {first})")


def load_corpus_jsonl(path: str | Path, skip_invalid: bool = False,
                      invalid: list[InvalidRecord] | None = None) -> Corpus:
    """Read a corpus JSONL of ``{id, title, text}`` or ``{id, contents}`` rows into memory.

    For corpora of millions of passages use `purecover.data.corpus_store.open_corpus_store`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {str(path)!r} does not exist")

    def rows() -> Iterable[Doc]:
        seen: dict[str, str] = {}
        for location, doc in iter_corpus_rows(path, skip_invalid, invalid):
            if doc.doc_id in seen:
                err = duplicate_id_error(str(path), location, doc.doc_id, seen[doc.doc_id])
                if not skip_invalid:
                    raise err
                if invalid is not None:
                    invalid.append(err.invalid_record())
                continue
            seen[doc.doc_id] = location
            yield doc

    return Corpus(rows(), str(path))
