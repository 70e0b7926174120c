"""Passage embeddings encoded in fixed shards that survive kills and split across processes.

On-disk layout of a shard directory::

    shard_dir/
      manifest.json             what the shards hold (written atomically before any shard; same for every rank)
      shard-000000.safetensors  rows [0, shard_size)
      shard-000001.safetensors  rows [shard_size, 2 * shard_size)
      ...                       the last shard holds the remaining n % shard_size rows

Shard i covers corpus positions ``[i * shard_size, min((i + 1) * shard_size, n))``. Each shard file
holds one tensor ``embeddings`` of shape (rows, dim) in the manifest's dtype (float32 or float16),
each row L2-normalised (in float32, before the cast; a zero vector stays zero), and the metadata
``start``, ``rows`` and ``key`` (the manifest key). A shard counts as done when its file exists and
that metadata and the tensor's shape and dtype match the manifest. Files are written to a temporary
name in the same directory, fsync'ed and renamed, so a killed process loses at most the shard in
flight and a rerun encodes only what is missing.

Determinism: a shard's texts go to the encoder in one ``model.encode`` call with a fixed batch size
(sentence-transformers sorts the texts of a call by length, so the batches depend on the call's
texts only): a shard's bytes do not depend on which process encoded it or how many there were
(on the same device and thread count).

Memory: encoding holds one shard's texts and embeddings at a time (about shard_size × (passage
length + 4 × dim) bytes: ~0.3 GB for 65,536 passages of e5-base), whatever the corpus size; reading
yields one shard at a time.

Multi-process encoding: each of `world_size` processes (`launch_rank` reads torchrun's or
``accelerate launch``'s RANK / WORLD_SIZE) encodes shards ``rank, rank + world_size, ...``; no
collective communication is needed, and whoever reads the shards afterwards can encode any shard
still missing itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...records import RecordError, ShardManifest, load_json_record
from ...utils.io import disk_full_is_explained
from ..corpus import CONTENTS_BATCH, CorpusLike

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SHARD_SIZE", "EMBEDDING_DTYPES", "FORMAT_VERSION", "MANIFEST_NAME", "ShardManifestError",
           "embedding_dimension", "encode_passage_texts", "encode_shards", "iter_encoded_shards", "launch_rank", "make_manifest",
           "manifest_key", "missing_shards", "read_manifest", "read_rows", "read_shards", "remove_stale_temps", "shard_count",
           "shard_path", "shard_range", "temp_name", "write_manifest"]

FORMAT_VERSION = 1
DEFAULT_SHARD_SIZE = 65_536
MANIFEST_NAME = "manifest.json"
EMBEDDING_DTYPES = ("float32", "float16")
_TENSOR = "embeddings"
_SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16"}
_KEPT = "the shards completed before are kept and a rerun encodes only the missing ones"


class ShardManifestError(ValueError):
    """A shard directory holds embeddings of other settings than those asked for."""


def shard_count(n: int, shard_size: int) -> int:
    """Number of shards of a corpus of `n` passages."""
    return -(-n // shard_size)


def shard_range(index: int, n: int, shard_size: int) -> tuple[int, int]:
    """(start, stop) corpus positions of shard `index`."""
    start = index * shard_size
    return start, min(start + shard_size, n)


def shard_path(shard_dir: str | Path, index: int) -> Path:
    """The file of shard `index`: ``shard_dir/shard-<6 digits>.safetensors``."""
    return Path(shard_dir) / f"shard-{index:06d}.safetensors"


def embedding_dimension(model: Any) -> int | None:
    """The model's output dimension when it says (sentence-transformers), else None."""
    for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        method = getattr(model, name, None)
        if callable(method):
            dim = method()
            return int(dim) if dim is not None else None
    return None


def make_manifest(corpus: CorpusLike, *, model_name: str, passage_prefix: str, dtype: str, shard_size: int,
                  dim: int | None) -> ShardManifest:
    """The manifest of a shard directory: what was encoded, how, and its `key` (a hash of the rest)."""
    if dtype not in EMBEDDING_DTYPES:
        raise ValueError(f"embedding dtype {dtype!r} is not supported; use one of {', '.join(EMBEDDING_DTYPES)}")
    if shard_size <= 0:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    manifest = ShardManifest(
        format_version=FORMAT_VERSION, corpus=corpus.fingerprint, corpus_source=corpus.source, n=len(corpus),
        shard_size=shard_size, model=model_name, passage_prefix=passage_prefix, dtype=dtype, dim=dim, normalize=True,
        key="",
    )
    return manifest.model_copy(update={"key": manifest_key(manifest)})


_NOT_HASHED = ("key", "corpus_source")  # the corpus's source may differ (the same passages read from another file)


def manifest_key(manifest: ShardManifest) -> str:
    """16 hex digits of SHA-256 over the manifest's content (its ``key`` and ``corpus_source`` left out)."""
    content = {k: v for k, v in manifest.to_json_dict().items() if k not in _NOT_HASHED}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def read_manifest(shard_dir: str | Path) -> ShardManifest:
    """The manifest of `shard_dir`; FileNotFoundError when there is none, `ShardManifestError` when it is not a
    valid manifest of this format (or was edited: its key does not match its content)."""
    path = Path(shard_dir) / MANIFEST_NAME
    try:
        manifest = load_json_record(path, ShardManifest)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist: {shard_dir} holds no encoded shards") from None
    except RecordError as exc:
        raise ShardManifestError(f"{exc} (not a format-{FORMAT_VERSION} shard manifest)") from None
    if manifest.format_version != FORMAT_VERSION or manifest.key != manifest_key(manifest):
        raise ShardManifestError(f"{path} is not a format-{FORMAT_VERSION} shard manifest (or was edited)")
    return manifest


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsync'ed
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temp_name(path: Path) -> Path:
    """A temporary sibling of `path` named after this host and process (see `remove_stale_temps`)."""
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")


def write_manifest(shard_dir: str | Path, manifest: ShardManifest) -> None:
    """Create ``shard_dir/manifest.json`` if absent (atomically, never replacing one); else check it is equal.

    A manifest with other content raises `ShardManifestError` naming the fields that differ.
    """
    shard_dir = Path(shard_dir)
    path = shard_dir / MANIFEST_NAME
    shard_dir.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = temp_name(path)
        with disk_full_is_explained(path, "no shard was written"):
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(json.dumps(manifest.to_json_dict(), indent=2, sort_keys=True) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, path)  # atomic create-if-absent
                except FileExistsError:  # another rank was first: compared below
                    pass
                except OSError:  # a file system without hard links: rename (the content is the same)
                    os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        _fsync_dir(shard_dir)
    there, asked = read_manifest(shard_dir).to_json_dict(), manifest.to_json_dict()
    fields = sorted(k for k in set(there) | set(asked) if k not in _NOT_HASHED and there.get(k) != asked.get(k))
    if fields:
        diffs = "; ".join(f"{k}: {there.get(k)!r} there, {asked.get(k)!r} asked" for k in fields)
        raise ShardManifestError(f"shard directory {shard_dir} holds embeddings of other settings ({diffs}): "
                                 "use another directory")


def _shard_ok(path: Path, start: int, rows: int, manifest: ShardManifest) -> bool:
    """Whether `path` is a complete shard of `manifest` starting at `start` with `rows` rows."""
    if not path.is_file():
        return False
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            tensor = f.get_slice(_TENSOR)
            shape, dtype = list(tensor.get_shape()), tensor.get_dtype()
    except Exception as exc:  # a foreign or damaged file: encoded again
        log.warning("shard %s is unreadable (%s): it will be encoded again", path, exc)
        return False
    dim = manifest.dim
    return (meta.get("start") == str(start) and meta.get("rows") == str(rows) and meta.get("key") == manifest.key
            and len(shape) == 2 and shape[0] == rows and (dim is None or shape[1] == dim)
            and dtype == _SAFETENSORS_DTYPE[manifest.dtype])


def _missing(shard_dir: Path, manifest: ShardManifest, indices: Sequence[int]) -> list[int]:
    n, size = manifest.n, manifest.shard_size
    out = []
    for i in indices:
        start, stop = shard_range(i, n, size)
        if not _shard_ok(shard_path(shard_dir, i), start, stop - start, manifest):
            out.append(i)
    return out


def missing_shards(shard_dir: str | Path) -> list[int]:
    """Indices of the shards of ``shard_dir``'s manifest that are not complete (reads file headers only)."""
    manifest = read_manifest(shard_dir)
    return _missing(Path(shard_dir), manifest, range(shard_count(manifest.n, manifest.shard_size)))


def encode_passage_texts(model: Any, texts: list[str], *, batch_size: int, dtype: str = "float32") -> np.ndarray:
    """Embeddings (len(texts), dim) of `texts` from one ``model.encode`` call, L2-normalised, cast to `dtype`.

    The normalisation is redone in float32 numpy (zero vectors stay zero) so that the rows are unit
    length before the cast whatever the encoder returned.
    """
    emb = np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"embedding model returned shape {emb.shape} for {len(texts)} passages")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    emb = emb / np.where(norms > 0, norms, np.float32(1.0))
    return np.ascontiguousarray(emb.astype(dtype, copy=False))


def _safetensors_bytes_header(emb: np.ndarray, metadata: dict[str, str]) -> bytes:
    """The safetensors header (length prefix + JSON, space-padded to 8 bytes) of one tensor, keys sorted.

    Written here rather than by ``safetensors.numpy.save_file``, whose metadata order varies from one
    process to the next: the shards must be byte-identical whoever encodes them.
    """
    dtype = {np.dtype("float32"): "F32", np.dtype("float16"): "F16"}[emb.dtype]
    header = {"__metadata__": dict(sorted(metadata.items())),
              _TENSOR: {"dtype": dtype, "shape": list(emb.shape), "data_offsets": [0, emb.nbytes]}}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _write_shard(path: Path, emb: np.ndarray, metadata: dict[str, str]) -> None:
    """Write a shard (safetensors) through a temporary sibling, fsync it, rename it into place."""
    emb = np.ascontiguousarray(emb, dtype=emb.dtype.newbyteorder("<"))
    tmp = temp_name(path)
    with disk_full_is_explained(path, _KEPT):
        try:
            with open(tmp, "wb") as f:
                f.write(_safetensors_bytes_header(emb, metadata))
                f.write(memoryview(emb).cast("B"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    _fsync_dir(path.parent)


def remove_stale_temps(directory: Path, pattern: str) -> None:
    """Remove temporaries matching `pattern` (``.<name>.<host>.<pid>.tmp``) left by killed processes of this host.

    Only files named by `temp_name` with this host's name and the id of a process that no longer
    runs are removed (a shard in flight of a live process, or of another host, is left alone).
    """
    host = socket.gethostname()
    for tmp in directory.glob(pattern):
        stem, _, pid = tmp.name[: -len(".tmp")].rpartition(".")
        if not pid.isdigit() or not stem.endswith("." + host):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
            log.info("removed %s, left by a killed process", tmp)
        except PermissionError:  # a live process of another user
            pass


class _BatchProgress:
    """Advances a tqdm bar by each encoder forward pass's rows (a sentence-transformers forward hook)."""

    def __init__(self, model: Any, bar: Any) -> None:
        self.bar, self.left, self.handle = bar, 0, None
        if not bar.disable and callable(getattr(model, "register_forward_hook", None)):
            self.handle = model.register_forward_hook(self._hook)

    def _hook(self, _module: Any, _args: Any, output: Any) -> None:
        try:  # a dict-like of features (a BatchEncoding in sentence-transformers 6)
            rows = int(output["sentence_embedding"].shape[0])
        except (KeyError, TypeError, IndexError, AttributeError):
            rows = 0
        rows = min(rows, self.left)
        self.left -= rows
        self.bar.update(rows)

    def start(self, rows: int) -> None:
        self.left = rows

    def finish(self) -> None:
        self.bar.update(self.left)  # what the hook did not see
        self.left = 0

    def close(self) -> None:
        if self.handle is not None:
            self.handle.remove()


def iter_encoded_shards(corpus: CorpusLike, model: Any, indices: Sequence[int], *, passage_prefix: str = "",
                        batch_size: int = 64, dtype: str = "float32", shard_size: int = DEFAULT_SHARD_SIZE,
                        show_progress: bool = False, label: str = "encoding") -> Iterator[tuple[int, int, np.ndarray]]:
    """(shard index, start position, embeddings (rows, dim) `dtype`) of shards `indices`, encoded one at a time.

    A shard is ``corpus.iter_contents`` of its range with `passage_prefix` in front, encoded with
    `encode_passage_texts` (one ``model.encode`` call). `show_progress`: a tqdm bar over the
    passages of `indices` (throughput, ETA), advanced after each encoder batch.
    """
    from ...utils.progress import tqdm

    n = len(corpus)
    total = sum(min(i * shard_size + shard_size, n) - i * shard_size for i in indices)
    with tqdm(total=total, unit="passage", unit_scale=True, desc=label, disable=not show_progress,
              dynamic_ncols=True) as bar:
        progress = _BatchProgress(model, bar)
        try:
            for i in indices:
                start, stop = shard_range(i, n, shard_size)
                texts = [passage_prefix + t for chunk in corpus.iter_contents(start, stop, CONTENTS_BATCH)
                         for t in chunk]
                if len(texts) != stop - start:
                    raise ValueError(f"corpus {corpus.source!r} gave {len(texts)} passages for positions "
                                     f"{start}..{stop - 1}, expected {stop - start}")
                progress.start(len(texts))
                emb = encode_passage_texts(model, texts, batch_size=batch_size, dtype=dtype)
                del texts
                progress.finish()
                yield i, start, emb
        finally:
            progress.close()


def encode_shards(corpus: CorpusLike, model: Any, shard_dir: str | Path, *, passage_prefix: str = "",
                  batch_size: int = 64, dtype: str = "float32", shard_size: int = DEFAULT_SHARD_SIZE, rank: int = 0,
                  world_size: int = 1, show_progress: bool = False, model_name: str | None = None) -> list[int]:
    """Encode this rank's missing shards of `corpus` into `shard_dir`; returns the shard indices encoded.

    Rank `rank` of `world_size` takes shards ``rank, rank + world_size, ...``. Each shard is
    ``corpus.iter_contents`` of its range with `passage_prefix` in front, encoded in one
    ``model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)`` call,
    and written atomically as (rows, dim) `dtype`. `model_name` is recorded in the manifest (default:
    the model's class name); a manifest of other settings raises `ShardManifestError`.
    `show_progress`: a tqdm bar over this rank's passages (throughput, ETA).
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if len(corpus) == 0:
        raise ValueError(f"corpus {corpus.source!r} is empty: nothing to encode")
    shard_dir = Path(shard_dir)
    name = model_name if model_name is not None else type(model).__name__
    manifest = make_manifest(corpus, model_name=name, passage_prefix=passage_prefix, dtype=dtype,
                             shard_size=shard_size, dim=embedding_dimension(model))
    write_manifest(shard_dir, manifest)
    remove_stale_temps(shard_dir, ".shard-*.safetensors.*.tmp")
    n = len(corpus)
    todo = _missing(shard_dir, manifest, range(rank, shard_count(n, shard_size), world_size))
    if not todo:
        return []
    total = sum(shard_range(i, n, shard_size)[1] - i * shard_size for i in todo)
    label = f"encoding {shard_dir.name}" + (f" (rank {rank}/{world_size})" if world_size > 1 else "")
    log.info("%s: %d shards (%d passages) to encode", label, len(todo), total)
    began = time.perf_counter()
    for i, start, emb in iter_encoded_shards(corpus, model, todo, passage_prefix=passage_prefix,
                                             batch_size=batch_size, dtype=dtype, shard_size=shard_size,
                                             show_progress=show_progress, label=label):
        if manifest.dim is not None and emb.shape[1] != manifest.dim:
            raise ValueError(f"embedding model returned {emb.shape[1]} dimensions, it declares {manifest.dim}")
        _write_shard(shard_path(shard_dir, i), emb,
                     {"start": str(start), "rows": str(emb.shape[0]), "key": manifest.key})
    seconds = time.perf_counter() - began
    log.info("%s: encoded %d passages in %.1f s (%.0f passages/s)", label, total, seconds, total / max(seconds, 1e-9))
    return todo


def read_shards(shard_dir: str | Path) -> Iterator[tuple[int, np.ndarray]]:
    """(start position, embeddings (rows, dim) in the stored dtype) of each shard, in corpus order.

    One shard in memory at a time. A missing or incomplete shard raises FileNotFoundError.
    """
    from safetensors import safe_open

    shard_dir = Path(shard_dir)
    manifest = read_manifest(shard_dir)
    n, size = manifest.n, manifest.shard_size
    for i in range(shard_count(n, size)):
        start, stop = shard_range(i, n, size)
        path = shard_path(shard_dir, i)
        if not _shard_ok(path, start, stop - start, manifest):
            raise FileNotFoundError(f"shard {path} (positions {start}..{stop - 1}) is missing or incomplete: "
                                    "encode the missing shards first")
        with safe_open(str(path), framework="numpy") as f:
            yield start, f.get_tensor(_TENSOR)


def read_rows(shard_dir: str | Path, positions: Sequence[int] | np.ndarray) -> np.ndarray:
    """Embeddings (len(positions), dim), stored dtype, of the passages at `positions` (reads only those rows)."""
    from safetensors import safe_open

    shard_dir = Path(shard_dir)
    manifest = read_manifest(shard_dir)
    n, size = manifest.n, manifest.shard_size
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise IndexError(f"positions must be in [0, {n}); got {int(pos.min())}..{int(pos.max())}")
    out: np.ndarray | None = None
    for i in np.unique(pos // size):
        start, stop = shard_range(int(i), n, size)
        path = shard_path(shard_dir, int(i))
        if not _shard_ok(path, start, stop - start, manifest):
            raise FileNotFoundError(f"shard {path} (positions {start}..{stop - 1}) is missing or incomplete")
        where = np.flatnonzero(pos // size == i)
        with safe_open(str(path), framework="numpy") as f:
            rows = f.get_slice(_TENSOR)
            block = np.stack([rows[int(p) - start : int(p) - start + 1][0] for p in pos[where]])
        if out is None:
            out = np.empty((pos.size, block.shape[1]), dtype=block.dtype)
        out[where] = block
    if out is None:
        dim = manifest.dim or 0
        return np.zeros((0, dim), dtype=manifest.dtype)
    return out


def launch_rank() -> tuple[int, int]:
    """(rank, world size) from the RANK / WORLD_SIZE environment (torchrun, ``accelerate launch``); (0, 1) without."""
    raw_rank, raw_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if raw_rank is None and raw_world is None:
        return 0, 1
    try:
        rank = int(raw_rank if raw_rank is not None else "0")
        world = int(raw_world if raw_world is not None else "1")
    except ValueError:
        raise ValueError(f"RANK={raw_rank!r} and WORLD_SIZE={raw_world!r} must be integers") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world
