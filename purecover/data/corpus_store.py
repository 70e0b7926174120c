"""A corpus file stored once on disk as memory-mapped Arrow: Wikipedia-sized corpora without Python objects.

`open_corpus_store(path, index_dir)` returns a `CorpusStore` for a corpus JSONL (``{id, title, text}``
or FlashRAG's ``{id, contents}`` rows, parsed by `purecover.data.corpus.parse_corpus_row`). The first
call builds the store; every later call (any run, any stage, the test set's data stage) opens it in
milliseconds. Layout of ``<index_dir>/corpus-<key>/`` (key: 16 hex of SHA-256 over the corpus file's
resolved path, so one store per corpus file):

* ``passages.arrow``: Arrow IPC file, columns ``id``, ``title``, ``text`` (UTF-8), record batches of
  `BATCH_ROWS` rows in file order (invalid records and repeated ids left out). Read memory-mapped:
  a row costs one batch lookup, nothing is loaded up front. ``pyarrow.ipc.open_file`` reads it, and
  ``datasets.Dataset(table)`` wraps it for users of HF datasets.
* ``id_hash.npy``/``id_pos.npy``, ``title_hash.npy``/``title_pos.npy``, ``text_hash.npy``/``text_pos.npy``:
  sorted 64-bit BLAKE2b hashes of each passage id, normalised title (`normalize_title`, non-empty
  titles only) and text, with the corpus position of each, loaded with ``mmap_mode="r"``. A lookup is
  a binary search and then a comparison with the stored string, so a hash collision never gives a
  wrong answer. This replaces the dicts over every passage the in-memory `Corpus` keeps.
* ``store.json`` (written last): the file's identity when the store was built (resolved path, size,
  mtime and inode change time in ns, inode), the passage count, the content fingerprint (SHA-256 over ids, titles and texts
  in order, computed once while building: the same value as `Corpus.fingerprint` of the same passages),
  the size and CRC-32 of every file above (``files``), the records skipped as invalid, the build's seconds
  and peak RSS, and the versions that built it.
* ``verified.json``: when each file was last checked against its CRC-32 (`purecover.utils.built_files`).

Opening checks the files against ``store.json`` (`purecover.utils.built_files.check_built_files`: sizes
always, the CRC-32 of a file changed since its last check, or of every file with ``verify="always"``) and that
``passages.arrow`` holds the recorded passage count; a file that differs is named in a warning and the store
is built again.

Opening compares the file's identity with ``store.json`` (a `stat`, no reading): a changed file gets a
new store (the change time catches an edit in place whose mtime was put back, as ``touch -r`` does; it also
moves on a chmod or a rename, which then cost one rebuild), built under the same name, and so a new fingerprint and new retrieval indexes. A store is
built in a temporary sibling directory and renamed into place when complete, under a per-key lock
(``.corpus-<key>.lock``, `fcntl.flock`): a killed build leaves no store, a second process waits for the
first instead of building again, and the partial directory of a killed build (marked by a
``.building`` file we write) is removed by the next build.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import time
from array import array
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..records import CorpusFileIdentity, CorpusStoreMeta, RecordError, load_json_record
from ..utils.built_files import check_built_files, record_built_files, write_stamp
from ..utils.index_lock import building_directory, key_lock
from ..utils.io import atomic_write_json, disk_full_is_explained, ensure_output_dir
from ..utils.memory import peak_rss_mb
from .corpus import CONTENTS_BATCH, Doc, duplicate_id_error, iter_corpus_rows, normalize_title
from .errors import DataFormatError, InvalidRecord
from .passage import passage_text

log = logging.getLogger(__name__)

__all__ = ["BATCH_ROWS", "FILES", "STORE_FORMAT", "VERIFY", "CorpusStore", "hash64", "open_corpus_store", "store_key"]

STORE_FORMAT = 2  # 2: store.json records each file's size and CRC-32 (a store of format 1 is built again)
BATCH_ROWS = 4096  # rows per Arrow record batch: the unit of random access and of sequential reads
_META = "store.json"
_ARROW = "passages.arrow"
_HASHED = ("id", "title", "text")
FILES = (_ARROW, *(f"{name}_{part}.npy" for name in _HASHED for part in ("hash", "pos")))  # what a build writes
VERIFY = ("changed", "always")
_KEPT = ("the store is built in a temporary directory, so nothing partial is left at its path, and it is "
         "rebuilt on the next run")


def hash64(text: str) -> int:
    """64-bit BLAKE2b of `text` (UTF-8) as an unsigned int: stable across processes and machines."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def store_key(path: Path) -> str:
    """16 hex of SHA-256 over the resolved path of a corpus file: one store per corpus file."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def _identity(path: Path) -> CorpusFileIdentity:
    st = path.stat()
    return CorpusFileIdentity(path=str(path.resolve()), size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino,
                              ctime_ns=st.st_ctime_ns)


class _SortedHashes:
    """Sorted 64-bit hashes with the corpus position of each: ``(hash, pos)`` pairs, searched by hash."""

    def __init__(self, hashes: np.ndarray, positions: np.ndarray) -> None:
        self.hashes, self.positions = hashes, positions

    def positions_of(self, h: int) -> np.ndarray:
        """Positions whose hash is `h`, ascending (candidates: the caller compares the strings)."""
        key = np.uint64(h)
        lo = int(np.searchsorted(self.hashes, key, side="left"))
        hi = int(np.searchsorted(self.hashes, key, side="right"))
        return np.asarray(self.positions[lo:hi], dtype=np.int64)


def _sorted_pairs(hashes: array, positions: array | None = None) -> tuple[np.ndarray, np.ndarray]:
    h = np.frombuffer(hashes, dtype=np.uint64) if len(hashes) else np.zeros(0, dtype=np.uint64)
    pos = (np.frombuffer(positions, dtype=np.int64) if positions is not None and len(positions)
           else np.arange(len(h), dtype=np.int64))
    order = np.lexsort((pos, h))  # by hash, then position: equal hashes in corpus order
    return h[order], pos[order]


class CorpusStore:
    """A built store (see the module docstring); implements `purecover.data.corpus.CorpusLike`."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.meta = load_json_record(self.directory / _META, CorpusStoreMeta)
        self.source: str = self.meta.source.path
        self._n: int = self.meta.passages
        self._reader: Any = None

    # ------------------------------------------------------------------ interface

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"CorpusStore({str(self.directory)!r}, {self._n} passages)"

    @property
    def fingerprint(self) -> str:
        return self.meta.fingerprint

    @property
    def invalid_records(self) -> list[InvalidRecord]:
        """The records skipped as invalid when the store was built (with ``skip_invalid``)."""
        return list(self.meta.invalid_records)

    def _batch(self, b: int) -> Any:
        if self._reader is None:
            import pyarrow as pa

            self._reader = pa.ipc.open_file(pa.memory_map(str(self.directory / _ARROW), "r"))
        return self._reader.get_batch(b)

    def __getitem__(self, i: int) -> Doc:
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"passage position {i} is outside the corpus of {self._n} passages")
        batch = self._batch(i // BATCH_ROWS)
        r = i % BATCH_ROWS
        return Doc(batch.column(0)[r].as_py(), batch.column(1)[r].as_py(), batch.column(2)[r].as_py())

    def docs_at(self, positions: Sequence[int]) -> list[Doc]:
        return [self[int(i)] for i in positions]

    def iter_docs(self, start: int = 0, stop: int | None = None) -> Iterator[Doc]:
        """The passages of positions ``start..stop-1`` in order, read batch by batch (not memory-mapped)."""
        for ids, titles, texts in self._iter_columns(start, stop):
            yield from (Doc(i, t, x) for i, t, x in zip(ids, titles, texts))

    def iter_contents(self, start: int = 0, stop: int | None = None,
                      batch_size: int = CONTENTS_BATCH) -> Iterator[list[str]]:
        out: list[str] = []
        for _, titles, texts in self._iter_columns(start, stop):
            out.extend(passage_text(t, x) for t, x in zip(titles, texts))
            while len(out) >= batch_size:
                yield out[:batch_size]
                out = out[batch_size:]
        if out:
            yield out

    def _iter_columns(self, start: int, stop: int | None) -> Iterator[tuple[list[str], list[str], list[str]]]:
        """(ids, titles, texts) per record batch over ``start..stop-1``.

        Sequential scans read batches with plain file reads rather than through the memory map, so
        pages of a 14 GB file scanned once do not stay in this process's resident memory.
        """
        import pyarrow as pa

        stop = self._n if stop is None else min(int(stop), self._n)
        start = max(0, int(start))
        if start >= stop:
            return
        with pa.OSFile(str(self.directory / _ARROW), "rb") as fh:
            reader = pa.ipc.open_file(fh)
            for b in range(start // BATCH_ROWS, (stop - 1) // BATCH_ROWS + 1):
                batch = reader.get_batch(b)
                lo = max(start - b * BATCH_ROWS, 0)
                hi = min(stop - b * BATCH_ROWS, batch.num_rows)
                part = batch.slice(lo, hi - lo)
                yield part.column(0).to_pylist(), part.column(1).to_pylist(), part.column(2).to_pylist()

    # ------------------------------------------------------------------ lookups

    def _index(self, name: str) -> _SortedHashes:
        return _SortedHashes(np.load(self.directory / f"{name}_hash.npy", mmap_mode="r", allow_pickle=False),
                             np.load(self.directory / f"{name}_pos.npy", mmap_mode="r", allow_pickle=False))

    @cached_property
    def _ids(self) -> _SortedHashes:
        return self._index("id")

    @cached_property
    def _titles(self) -> _SortedHashes:
        return self._index("title")

    @cached_property
    def _texts(self) -> _SortedHashes:
        return self._index("text")

    def position(self, doc_id: str) -> int | None:
        """The position of passage `doc_id` (None when the corpus has no such id)."""
        for pos in self._ids.positions_of(hash64(doc_id)):
            if self[int(pos)].doc_id == doc_id:
                return int(pos)
        return None

    def ids_with_title(self, title: str) -> list[str]:
        key = normalize_title(title)
        if not key:
            return []
        docs = self.docs_at(self._titles.positions_of(hash64(key)))
        return [d.doc_id for d in docs if normalize_title(d.title) == key]

    def id_of_text(self, text: str) -> str | None:
        key = text.strip()
        for pos in self._texts.positions_of(hash64(key)):
            doc = self[int(pos)]
            if doc.text.strip() == key:
                return doc.doc_id
        return None


# ---------------------------------------------------------------------- building


def _usable(directory: Path, identity: CorpusFileIdentity, verify: str = "changed", warn: bool = True) -> bool:
    """Whether `directory` holds a complete store of this format for a file with this identity, its files as
    built (`check_built_files`; `verify`: ``changed`` or ``always``) and passages.arrow holding the recorded
    passage count. A store.json that does not validate as a `CorpusStoreMeta` is not usable; a damaged file is
    named in a warning. Either way the store is built again."""
    try:
        meta = load_json_record(directory / _META, CorpusStoreMeta)
    except (OSError, RecordError):
        return False
    if not (meta.format == STORE_FORMAT and meta.source == identity and meta.files is not None):
        return False
    check = check_built_files(directory, meta.files, _META, full=verify == "always")
    if check.read:
        log.info("corpus store %s: checked %d files against their build checksums (%.0f MB, %.2f s)", directory,
                 len(check.read), check.bytes_read / 1e6, check.seconds)
    problem = check.problem or _arrow_problem(directory / _ARROW, meta.passages)
    if problem is not None:
        if warn:
            log.warning("corpus store %s does not hold what was built (%s): the store is built again", directory,
                        problem)
        return False
    return True


def _arrow_problem(path: Path, passages: int) -> str | None:
    """Why passages.arrow does not hold `passages` rows in `BATCH_ROWS` batches (its footer and the last batch's
    header are read, memory-mapped: no row data); None when it does."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        batches = reader.num_record_batches
        expected = -(-passages // BATCH_ROWS)
        if batches != expected:
            return (f"{path} holds {batches} record batches, {expected} expected for the {passages} passages "
                    f"{_META} records")
        if batches and reader.get_batch(batches - 1).num_rows != passages - BATCH_ROWS * (batches - 1):
            return f"{path}'s last batch does not end at passage {passages}, the count {_META} records"
    except (OSError, pa.ArrowException) as exc:
        return f"{path}: " + str(exc).splitlines()[0][:200]
    return None


def open_corpus_store(path: str | Path, index_dir: str | Path, *, skip_invalid: bool = False,
                      invalid: list[InvalidRecord] | None = None, show_progress: bool = False,
                      verify: str = "changed") -> CorpusStore:
    """The store of corpus file `path` under `index_dir`, built first when missing, stale or damaged.

    `verify` (``data.index_verify``): ``changed`` reads in full only the files changed since their last check,
    ``always`` every file (see `purecover.utils.built_files`).

    Bad records raise `DataFormatError` (file, line, field) unless `skip_invalid`, which leaves them
    out and appends them to `invalid` (also when the store was built by an earlier run). A store built
    with `skip_invalid` that left records out is refused without it, with the first record's error.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {str(path)!r} does not exist")
    if verify not in VERIFY:
        raise ValueError(f"verify must be one of {', '.join(VERIFY)}, got {verify!r}")
    index_dir = Path(index_dir)
    ensure_output_dir(index_dir)
    key = store_key(path)
    final = index_dir / f"corpus-{key}"
    identity = _identity(path)
    if not _usable(final, identity, verify):
        with key_lock(index_dir / f".corpus-{key}.lock", f"the corpus store of {path}"):
            identity = _identity(path)
            if not _usable(final, identity, verify, warn=False):  # unless another process built it meanwhile
                _build(path, final, identity, skip_invalid, show_progress)
    store = CorpusStore(final)
    skipped = store.invalid_records
    if skipped and not skip_invalid:
        first = skipped[0]
        raise DataFormatError(first.source, first.location, first.field,
                              f"{first.problem} ({len(skipped)} invalid records in all; the store under {final} "
                              "was built with data.skip_invalid: set it to skip them again)")
    if invalid is not None:
        invalid.extend(skipped)
    return store


def _build(path: Path, final: Path, identity: CorpusFileIdentity, skip_invalid: bool, show_progress: bool) -> None:
    """Build the store of `path` in a temporary sibling and rename it to `final` (`building_directory`)."""
    started = time.perf_counter()
    with disk_full_is_explained(final, _KEPT), building_directory(final, _META) as tmp:
        built = _write_store(path, tmp, skip_invalid, {}, show_progress)
        if isinstance(built, dict):  # repeated ids, skipped with skip_invalid: a second pass leaves them out
            built = _write_store(path, tmp, skip_invalid, built, show_progress)
        assert not isinstance(built, dict)
        n, fingerprint, invalid = built
        _write_meta(tmp, identity, n, fingerprint, invalid, started)
    write_stamp(final, FILES, _META)  # after the rename: the build directory's chmod moved the files' ctime
    log.info("corpus store of %s: %d passages in %s (%.1f s)", identity.path, n, final,
             time.perf_counter() - started)


def _write_store(path: Path, tmp: Path, skip_invalid: bool, drop: dict[int, tuple[str, str]],
                 show_progress: bool) -> tuple[int, str, list[InvalidRecord]] | dict[int, tuple[str, str]]:
    """One pass over `path` writing the Arrow file and the sorted hash arrays into `tmp`.

    `drop` maps valid-record ordinals to leave out to (id, location of its first occurrence). Returns
    (passages, fingerprint, invalid records), or, when ids repeat and `skip_invalid` is set, the `drop`
    map for a second pass (a repeated id without `skip_invalid` raises `DataFormatError`).
    """
    import pyarrow as pa

    from ..utils.progress import tqdm

    invalid: list[InvalidRecord] = []
    schema = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
    id_hash, title_hash, title_pos, text_hash = array("Q"), array("Q"), array("q"), array("Q")
    lines = array("q")
    fingerprint = hashlib.sha256()
    cols: tuple[list[str], list[str], list[str]] = ([], [], [])
    bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=f"corpus store {path.name}",
               disable=not show_progress)

    def progress(done: int) -> None:
        bar.update(done - bar.n)

    n = 0
    with pa.OSFile(str(tmp / _ARROW), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for ordinal, (location, doc) in enumerate(iter_corpus_rows(path, skip_invalid, invalid, progress=progress)):
            if ordinal in drop:
                doc_id, first = drop[ordinal]
                invalid.append(duplicate_id_error(str(path), location, doc_id, first).invalid_record())
                continue
            id_hash.append(hash64(doc.doc_id))
            key = normalize_title(doc.title)
            if key:
                title_hash.append(hash64(key))
                title_pos.append(n)
            text_hash.append(hash64(doc.text))
            lines.append(int(location.rsplit(" ", 1)[-1]))
            for col, value in zip(cols, (doc.doc_id, doc.title, doc.text)):
                col.append(value)
            fingerprint.update(b"\x1f".join(v.encode("utf-8") for v in (doc.doc_id, doc.title, doc.text)) + b"\x1e")
            n += 1
            if len(cols[0]) == BATCH_ROWS:
                writer.write_batch(pa.record_batch(list(cols), schema=schema))
                cols = ([], [], [])
        if cols[0]:
            writer.write_batch(pa.record_batch(list(cols), schema=schema))
    bar.close()
    if n == 0:
        raise ValueError(f"corpus file {str(path)!r} has no valid passages")
    ids_sorted, id_pos = _sorted_pairs(id_hash)
    repeated = _repeated_ids(tmp, path, ids_sorted, id_pos, lines, skip_invalid)
    if repeated:
        return repeated
    np.save(tmp / "id_hash.npy", ids_sorted)
    np.save(tmp / "id_pos.npy", id_pos)
    for name, (h, pos) in (("title", _sorted_pairs(title_hash, title_pos)), ("text", _sorted_pairs(text_hash))):
        np.save(tmp / f"{name}_hash.npy", h)
        np.save(tmp / f"{name}_pos.npy", pos)
    return n, fingerprint.hexdigest(), invalid


def _repeated_ids(tmp: Path, path: Path, ids_sorted: np.ndarray, id_pos: np.ndarray, lines: array,
                  skip_invalid: bool) -> dict[int, tuple[str, str]]:
    """Ordinals of records whose id appeared earlier -> (id, first location); an error without `skip_invalid`.

    Candidates are equal hashes; the ids themselves are compared, so a hash collision is not a repeat.
    """
    same = np.flatnonzero(ids_sorted[1:] == ids_sorted[:-1])
    if same.size == 0:
        return {}
    import pyarrow as pa

    reader = pa.ipc.open_file(pa.memory_map(str(tmp / _ARROW), "r"))

    def doc_id(pos: int) -> str:
        return str(reader.get_batch(pos // BATCH_ROWS).column(0)[pos % BATCH_ROWS].as_py())

    repeats: dict[int, tuple[str, str]] = {}
    for h in np.unique(ids_sorted[same]):
        lo, hi = np.searchsorted(ids_sorted, h, side="left"), np.searchsorted(ids_sorted, h, side="right")
        first_of: dict[str, int] = {}
        for pos in sorted(int(p) for p in id_pos[lo:hi]):
            name = doc_id(pos)
            if name in first_of:
                repeats[pos] = (name, f"line {lines[first_of[name]]}")
            else:
                first_of[name] = pos
    if repeats and not skip_invalid:
        pos = min(repeats)
        raise duplicate_id_error(str(path), f"line {lines[pos]}", *repeats[pos])
    return repeats


def _write_meta(tmp: Path, identity: CorpusFileIdentity, n: int, fingerprint: str, invalid: list[InvalidRecord],
                started: float) -> None:
    """``store.json``: written last, it is what makes a store complete."""
    import pyarrow as pa

    from .. import __version__

    meta = CorpusStoreMeta(
        format=STORE_FORMAT,
        source=identity,
        passages=n,
        fingerprint=fingerprint,
        batch_rows=BATCH_ROWS,
        files=record_built_files(tmp, FILES),
        invalid_records=invalid,
        built_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        build_seconds=round(time.perf_counter() - started, 2),
        build_peak_rss_mb=peak_rss_mb(),
        versions={"purecover": __version__, "pyarrow": pa.__version__, "numpy": np.__version__},
    )
    atomic_write_json(tmp / _META, meta.to_json_dict())
