"""Storing a BM25 index: ``.npy`` files written front to back (no memory map), the vocabulary files, and the
sorted runs of the build's pass 1 (in memory or as raw files in the build directory).

The index format is described in `purecover.data.retrieval.bm25_index`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .bm25_search import _encode, hash_terms

_RUN_FIELDS = ("terms", "counts", "docs", "tf")


# --- writing .npy files sequentially ------------------------------------------------------------------------

class _NpyWriter:
    """A 1-D ``.npy`` file of known `length` written front to back: header first, then appended blocks.

    Plain file writes (no memory map, whose dirty pages would count as this process's memory), through
    Python's file object so a full disk raises OSError with its errno.
    """

    def __init__(self, path: Path, dtype: np.dtype | type, length: int) -> None:
        self.path, self.dtype, self.left = path, np.dtype(dtype), int(length)
        self.file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()/__exit__
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.left,)}
        try:
            np.lib.format.write_array_header_1_0(self.file, header)
        except BaseException:
            self.file.close()
            raise

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if len(values) > self.left:
            raise ValueError(f"{self.path}: {len(values)} more values than the {self.left} left")
        self.file.write(memoryview(values).cast("B"))
        self.left -= len(values)

    def close(self) -> None:
        self.file.close()
        if self.left:
            raise RuntimeError(f"{self.path}: {self.left} values missing")

    def __enter__(self) -> _NpyWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.file.close()


def _save_npy(path: Path, values: np.ndarray) -> None:
    with _NpyWriter(path, values.dtype, len(values)) as w:
        w.append(values)


def write_vocab(out_dir: Path, word_to_id: dict[str, int], block: int = 1 << 20) -> None:
    """Write the vocabulary files (hashes sorted with their columns; UTF-8 in column order) to `out_dir`.

    `word_to_id` maps each term to its column 0..V-1 (a bm25s tokenizer's dict, whose insertion order is
    the id order); works in blocks of `block` terms.
    """
    n = len(word_to_id)
    encoded_len = sum(len(_encode(w)) for w in word_to_id)
    hashes = np.empty(n, dtype=np.uint64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    words, ids = iter(word_to_id), iter(word_to_id.values())
    with _NpyWriter(out_dir / "vocab_utf8.npy", np.uint8, encoded_len) as utf8:
        for start in range(0, n, block):
            stop = min(start + block, n)
            got = np.fromiter(itertools.islice(ids, stop - start), dtype=np.int64, count=stop - start)
            if not np.array_equal(got, np.arange(start, stop)):
                raise RuntimeError("the tokenizer's vocabulary is not in id order")  # bm25s without a stemmer is
            encoded = [_encode(w) for w in itertools.islice(words, stop - start)]
            hashes[start:stop] = hash_terms(encoded)
            offsets[start + 1:stop + 1] = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
            offsets[start + 1:stop + 1] += offsets[start]
            utf8.append(np.frombuffer(b"".join(encoded), dtype=np.uint8))
    _save_npy(out_dir / "vocab_offsets.npy", offsets)
    del offsets
    order = np.argsort(hashes, kind="stable")  # equal hashes (collisions) keep column order
    hashes.sort()
    _save_npy(out_dir / "vocab_hash.npy", hashes)
    del hashes
    _save_npy(out_dir / "vocab_col.npy", order.astype(np.int32))


# --- the sorted runs of pass 1 (purecover.data.retrieval.bm25_build) ----------------------------------------

class _Runs:
    """Sorted runs of pass 1, in memory or as raw files in a directory.

    Run r holds its distinct terms ascending (``terms`` int32), postings per term (``counts`` int32), and
    per posting, grouped by term with passages ascending, the passage (``docs`` int32) and the term
    frequency (``tf`` uint16, or uint32 when a count does not fit).
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.dtypes: list[dict[str, np.dtype]] = []
        self.n_terms: list[int] = []
        self._memory: list[dict[str, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self.dtypes)

    def _path(self, r: int, field: str) -> Path:
        assert self.directory is not None
        return self.directory / f"run-{r:05d}.{field}"

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        r = len(self.dtypes)
        if self.directory is None:
            self._memory.append(arrays)
        else:
            for field in _RUN_FIELDS:
                with open(self._path(r, field), "wb") as f:
                    f.write(memoryview(np.ascontiguousarray(arrays[field])).cast("B"))
        self.dtypes.append({f: arrays[f].dtype for f in _RUN_FIELDS})
        self.n_terms.append(len(arrays["terms"]))

    def read(self, r: int, field: str, start: int, stop: int) -> np.ndarray:
        if self.directory is None:
            return self._memory[r][field][start:stop]
        dtype = self.dtypes[r][field]
        return np.fromfile(self._path(r, field), dtype=dtype, count=stop - start, offset=start * dtype.itemsize)

    def remove(self) -> None:
        self._memory.clear()
        if self.directory is not None:
            for r in range(len(self.dtypes)):
                for field in _RUN_FIELDS:
                    self._path(r, field).unlink(missing_ok=True)

