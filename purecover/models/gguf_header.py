"""A bounded check of a GGUF file's structure, before the ``gguf`` reader or transformers sees it.

The ``gguf`` package's reader trusts every count in the file: an array that declares 2^40 items in a
98-byte file makes it loop on reads past the end without advancing (memory grows without end), a
4 MB metadata array costs it minutes and gigabytes (it builds one numpy view per item), and a header
that declares 4,000 layers of width 8,192 and holds no tensors makes transformers build that model
before anything notices. `check_gguf_header` walks the header with plain reads and refuses, in one
line naming the file and the field, a file that:

* is not GGUF (magic) or has a version other than 2 or 3;
* declares a count or a length that runs past the end of the file (each checked against the bytes
  left before anything is read);
* exceeds a size limit: `MAX_KEYS` keys, `MAX_KEY_BYTES` per key, `MAX_STRING_BYTES` per string
  value, `MAX_ARRAY_ITEMS` items in one array and `MAX_METADATA_ITEMS` in all arrays together,
  `MAX_TENSORS` tensors of 1 to 4 dimensions, arrays nested at most `MAX_ARRAY_DEPTH` deep;
* has a tensor of an unknown type, with zero elements or a row length that is not a whole number of
  blocks, or whose data lies (in part) outside the file; two tensors of one name;
* declares ``<arch>.block_count`` layers but holds ``blk.<i>.`` tensors for other layers, or an
  ``<arch>.embedding_length`` that is not the width of ``token_embd.weight``.

The limits are far above every model the catalogue knows (the largest array: Gemma-3's 262,144-token
vocabulary) and keep the ``gguf`` reader under a few seconds and a few hundred MB. The check reads only
the header (plus the file size): about a second for a real model's 150,000 tokenizer items, far less
for a hostile file. What a parameter count implied by the configuration would take is checked at
conversion (`purecover.models.gguf_convert`), against the tensors found here.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["MAX_ARRAY_DEPTH", "MAX_ARRAY_ITEMS", "MAX_KEYS", "MAX_KEY_BYTES", "MAX_METADATA_ITEMS",
           "MAX_STRING_BYTES", "MAX_TENSORS", "GgufHeader", "GgufHeaderError", "check_gguf_header"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEYS = 65_536
MAX_KEY_BYTES = 1_024
MAX_STRING_BYTES = 1 << 20  # 1 MiB: a chat template is tens of KB
MAX_ARRAY_ITEMS = 1 << 19  # 524,288 items in one array
MAX_METADATA_ITEMS = 1 << 21  # 2,097,152 array items in all
MAX_ARRAY_DEPTH = 2
MAX_TENSORS = 65_536
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32

# GGUF value types: id -> (struct format, bytes) for the scalars; 8 = string, 9 = array.
SCALARS: dict[int, tuple[str, int]] = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4),
                                       5: ("i", 4), 6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8),
                                       12: ("d", 8)}
STRING, ARRAY = 8, 9
_BLOCK = re.compile(r"^blk\.(\d+)\.")


class GgufHeaderError(ValueError):
    """The GGUF file is malformed or over a limit; the message names the file and the field."""


@dataclass
class GgufHeader:
    """What the check read: ``metadata`` (key -> scalar or string; arrays as their item count), the tensors
    (name -> (GGUF dims, element count, bytes)) and the byte offset where tensor data starts."""

    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, tuple[tuple[int, ...], int, int]] = field(default_factory=dict)
    data_offset: int = 0

    @property
    def n_elements(self) -> int:
        """Elements in all tensors together."""
        return sum(n for _, n, _ in self.tensors.values())


class _Reader:
    """Sequential little-endian reads of `fh` that never go past `size` bytes."""

    def __init__(self, fh: BinaryIO, size: int, path: str) -> None:
        self.fh, self.size, self.path, self.pos = fh, size, path, 0

    def fail(self, where: str, why: str) -> GgufHeaderError:
        return GgufHeaderError(f"{self.path}: GGUF {where}: {why}")

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, where: str) -> None:
        if n > self.left():
            raise self.fail(where, f"needs {n:,} bytes at offset {self.pos:,} but the file ends after "
                                   f"{self.left():,} more (truncated or a false count)")

    def take(self, n: int, where: str) -> bytes:
        self.need(n, where)
        data = self.fh.read(n)
        if len(data) != n:
            raise self.fail(where, "the file is shorter than its size says")
        self.pos += n
        return data

    def skip(self, n: int, where: str) -> None:
        self.need(n, where)
        self.fh.seek(n, 1)
        self.pos += n

    def scalar(self, fmt: str, size: int, where: str) -> Any:
        return struct.unpack("<" + fmt, self.take(size, where))[0]

    def string(self, where: str, limit: int) -> str:
        """A GGUF string (uint64 length, UTF-8 bytes); an error when it is over `limit` bytes."""
        n = self.scalar("Q", 8, where)
        if n > limit:
            raise self.fail(where, f"a string of {n:,} bytes (limit {limit:,})")
        raw = self.take(n, where)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(where, f"a string that is not UTF-8 ({exc.reason} at byte {exc.start})") from None


class _Budget:
    items = 0


def _value(r: _Reader, vtype: int, where: str, budget: _Budget, depth: int = 0) -> Any:
    """Read one value of GGUF type `vtype`: scalars and strings as Python values, arrays as their length."""
    if vtype in SCALARS:
        fmt, size = SCALARS[vtype]
        return r.scalar(fmt, size, where)
    if vtype == STRING:
        return r.string(where, MAX_STRING_BYTES)
    if vtype != ARRAY:
        raise r.fail(where, f"unknown value type {vtype}")
    if depth >= MAX_ARRAY_DEPTH:
        raise r.fail(where, f"arrays nested more than {MAX_ARRAY_DEPTH} deep")
    itype = r.scalar("I", 4, where)
    count = r.scalar("Q", 8, where)
    if count > MAX_ARRAY_ITEMS:
        raise r.fail(where, f"an array of {count:,} items (limit {MAX_ARRAY_ITEMS:,})")
    budget.items += count
    if budget.items > MAX_METADATA_ITEMS:
        raise r.fail(where, f"more than {MAX_METADATA_ITEMS:,} array items in the metadata")
    if itype in SCALARS:
        r.skip(count * SCALARS[itype][1], where)  # bounded by the bytes left before anything is read
        return count
    if itype == STRING:
        r.need(count * 8, where)  # every string takes at least its 8-byte length
        for _ in range(count):
            r.string(where, MAX_STRING_BYTES)
        return count
    if itype == ARRAY:
        r.need(count * 12, where)
        for _ in range(count):
            _value(r, ARRAY, where, budget, depth + 1)
        return count
    raise r.fail(where, f"an array of unknown value type {itype}")


def _quant_sizes() -> dict[int, tuple[int, int, str]]:
    """GGML tensor type id -> (block size in elements, bytes per block, name), from the ``gguf`` package."""
    from gguf import GGML_QUANT_SIZES

    return {int(t): (block, size, t.name) for t, (block, size) in GGML_QUANT_SIZES.items()}


def _tensors(r: _Reader, count: int, header: GgufHeader) -> list[tuple[str, int, int]]:
    """Read `count` tensor infos into `header.tensors`; returns (name, relative offset, bytes) for each."""
    sizes = _quant_sizes()
    r.need(count * 24, "tensor infos")  # name length, one dimension, type and offset at the least
    spans = []
    for i in range(count):
        where = f"tensor info {i}"
        name = r.string(where, MAX_KEY_BYTES)
        where = f"tensor {name!r}"
        if name in header.tensors:
            raise r.fail(where, "a second tensor of this name")
        n_dims = r.scalar("I", 4, where)
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(where, f"{n_dims} dimensions (1 to {MAX_DIMS})")
        dims = tuple(r.scalar("Q", 8, where) for _ in range(n_dims))
        ttype = r.scalar("I", 4, where)
        offset = r.scalar("Q", 8, where)
        if ttype not in sizes:
            raise r.fail(where, f"unknown tensor type {ttype}")
        block, per_block, type_name = sizes[ttype]
        n = 1
        for d in dims:
            n *= d
        if n == 0:
            raise r.fail(where, f"dimensions {list(dims)} hold no elements")
        if dims[0] % block:
            raise r.fail(where, f"a row of {dims[0]} elements is not a whole number of {type_name} blocks "
                                f"of {block}")
        nbytes = n // block * per_block
        if nbytes > r.size:
            raise r.fail(where, f"dimensions {list(dims)} need {nbytes:,} bytes, more than the whole file")
        header.tensors[name] = (dims, n, nbytes)
        spans.append((name, offset, nbytes))
    return spans


def _layers(header: GgufHeader, fail: Any) -> None:
    """The layers and width the metadata declares against the tensors present."""
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str):
        return
    blocks = header.metadata.get(f"{arch}.block_count")
    present = {int(m.group(1)) for name in header.tensors if (m := _BLOCK.match(name))}
    if blocks is not None:
        if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 0:
            raise fail(f"{arch}.block_count", f"{blocks!r} is not a layer count")
        if present != set(range(blocks)):
            missing = sorted(set(range(blocks)) - present)
            extra = sorted(present - set(range(blocks)))
            what = (f"no tensors for {len(missing):,} of them (e.g. blk.{missing[0]})" if missing
                    else f"tensors for layer blk.{extra[0]} beyond them")
            raise fail(f"{arch}.block_count", f"declares {blocks:,} layers but the file holds {what}")
    width = header.metadata.get(f"{arch}.embedding_length")
    embed = header.tensors.get("token_embd.weight")
    if width is not None and embed is not None and embed[0][0] != width:
        raise fail(f"{arch}.embedding_length", f"{width!r} but token_embd.weight is {embed[0][0]} wide")


def check_gguf_header(path: str | Path) -> GgufHeader:
    """Walk GGUF file `path`'s header within the limits of the module docstring; `GgufHeaderError` naming the
    file and the field on the first problem. Reads the header only (bounded time and memory)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        r = _Reader(fh, size, str(path))
        if r.left() < 4 or r.take(4, "magic") != MAGIC:
            raise r.fail("magic", "not a readable GGUF file (it does not start with 'GGUF')")
        version = r.scalar("I", 4, "version")
        if version not in VERSIONS:
            raise r.fail("version", f"{version} (this reader knows versions 2 and 3)")
        header = GgufHeader(version=version)
        n_tensors = r.scalar("Q", 8, "tensor_count")
        n_keys = r.scalar("Q", 8, "kv_count")
        if n_tensors > MAX_TENSORS:
            raise r.fail("tensor_count", f"{n_tensors:,} tensors (limit {MAX_TENSORS:,})")
        if n_keys > MAX_KEYS:
            raise r.fail("kv_count", f"{n_keys:,} metadata keys (limit {MAX_KEYS:,})")
        r.need(n_keys * 13, "kv_count")  # key length, value type and a 1-byte value at the least
        budget = _Budget()
        for i in range(n_keys):
            key = r.string(f"metadata key {i}", MAX_KEY_BYTES)
            if key in header.metadata:
                raise r.fail(key, "the key appears twice")
            vtype = r.scalar("I", 4, key)
            header.metadata[key] = _value(r, vtype, key, budget)
        spans = _tensors(r, n_tensors, header)
        alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise r.fail("general.alignment", f"{alignment!r} is not a power of two")
        header.data_offset = -(-r.pos // alignment) * alignment
        data_bytes = size - header.data_offset
        for name, offset, nbytes in spans:
            if offset % alignment or offset + nbytes > data_bytes:
                raise r.fail(f"tensor {name!r}", f"its data ({nbytes:,} bytes at offset {offset:,}) lies outside "
                                                 f"the {max(data_bytes, 0):,} bytes of tensor data in the file "
                                                 "(truncated?)" if offset + nbytes > data_bytes
                             else f"offset {offset} is not a multiple of the alignment {alignment}")
    _layers(header, r.fail)
    return header
