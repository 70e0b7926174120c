"""FAISS inner-product indexes built from embedding shards, loaded memory-mapped, tuned by a parameter string.

On-disk layout: the index file written by ``faiss.write_index`` (e.g.
``dense-<key>/faiss-<hash of factory>.index``) and, beside it, ``<index file>.json`` with the factory
string, metric, ``ntotal``, ``dim``, the shard manifest key it was built from, the training sample
size and seed. Both are written through a temporary file and a rename (the index first), so a
killed build leaves no index that looks complete.

Building (`build_faiss_index`): ``faiss.index_factory(dim, factory, METRIC_INNER_PRODUCT)`` (any
factory: ``Flat``, ``IVF4096,PQ96``, ``HNSW32``, ``IVF1024,Flat``, ...); an index that needs training
is trained on at most `train_size` rows evenly spaced over the corpus (float32), then the shards are
added one at a time. Memory: the training sample (train_size × dim × 4 bytes: 1.6 GB for the
default at 768 dims), one shard as float32, and the index itself (a Flat index over 21M e5-base
passages is 64 GB; IVF-PQ with 96 bytes per code is 2 GB). With a GPU FAISS build
(``faiss.get_num_gpus() > 0``) an IVF index's coarse k-means and the assignment of the added vectors
to their lists run on GPU 0 (the costly parts: ~2·n·nlist·dim flops); the index stays in host memory,
so it may be larger than the GPU's memory. Flat and HNSW indexes are built on the CPU (a flat add is
a copy; HNSW has no GPU version).

Loading (`load_faiss_index`): with ``mmap=True`` the file is read with ``IO_FLAG_MMAP_IFC``, which in
FAISS 1.15 maps the stored codes of flat-code indexes (Flat, PQ, SQ, HNSW's storage) and IVF inverted
lists instead of copying them (measured: a 200 MB Flat, IVF-Flat or HNSW index adds 0–12 MB of anonymous
memory instead of 200 MB); when that flag is refused, ``IO_FLAG_MMAP`` (IVF lists on disk) and then a
plain read are tried. A log line says which was used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ...records import FaissIndexMeta, RecordError, load_json_record
from ...utils.built_files import record_built_files, write_stamp
from ...utils.io import atomic_write_json, disk_full_is_explained
from .embedding_shards import read_manifest, read_shards, remove_stale_temps, temp_name

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TRAIN_SIZE", "INDEX_FORMAT_VERSION", "apply_search_params", "build_faiss_index", "build_index",
           "describe_index", "factory_digest", "import_faiss", "is_exact_flat", "load_faiss_index", "metadata_path",
           "read_index_metadata", "stamp_path", "training_positions"]

DEFAULT_TRAIN_SIZE = 1 << 19  # 524,288 rows: 128 per centroid for IVF4096, plenty for PQ codebooks
INDEX_FORMAT_VERSION = 1

Blocks = Callable[[], Iterable[tuple[int, np.ndarray]]]  # a fresh iterator over (start, (rows, dim) embeddings)


def import_faiss() -> Any:
    """The faiss module; ImportError naming the extra to install when it is missing."""
    try:
        import faiss
    except ImportError as exc:
        raise ImportError("faiss is not installed (pip install -e '.[dense]', or faiss-gpu for GPUs)") from exc
    return faiss


def factory_digest(factory: str) -> str:
    """12 hex digits of SHA-256 of a factory string (names the index file)."""
    return hashlib.sha256(factory.encode()).hexdigest()[:12]


def metadata_path(index_path: str | Path) -> Path:
    """The metadata JSON beside an index file: ``<index file>.json``."""
    index_path = Path(index_path)
    return index_path.with_name(index_path.name + ".json")


def stamp_path(index_path: str | Path) -> Path:
    """``<index file>.verified.json``: when the index file last matched its build checksum
    (`purecover.utils.built_files`)."""
    index_path = Path(index_path)
    return index_path.with_name(index_path.name + ".verified.json")


def read_index_metadata(index_path: str | Path) -> FaissIndexMeta | None:
    """The metadata written beside `index_path` by `build_faiss_index`, or None when absent, unreadable or not
    a `FaissIndexMeta` (the index is then built again)."""
    try:
        return load_json_record(metadata_path(index_path), FaissIndexMeta)
    except (OSError, RecordError):
        return None


def describe_index(index: Any) -> str:
    """``IndexIVFPQ, 1000 vectors of 32 dims`` for log lines and errors."""
    faiss = import_faiss()
    return f"{type(faiss.downcast_index(index)).__name__}, {index.ntotal} vectors of {index.d} dims"


def is_exact_flat(index: Any) -> bool:
    """Whether `index` is a flat (exhaustive, exact) inner-product index."""
    faiss = import_faiss()
    return isinstance(faiss.downcast_index(index), faiss.IndexFlat) and index.metric_type == faiss.METRIC_INNER_PRODUCT


ROWS_PER_LIST = 40  # training rows per IVF list: FAISS's k-means warns below 39


def training_positions(n: int, train_size: int) -> np.ndarray:
    """At most `train_size` corpus positions evenly spaced over ``0..n-1`` (all of them when n ≤ train_size)."""
    if n <= train_size:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, train_size).round().astype(np.int64))


def _sample(blocks: Blocks, positions: np.ndarray, dim: int) -> np.ndarray:
    out = np.empty((positions.size, dim), dtype=np.float32)
    for start, emb in blocks():
        lo, hi = np.searchsorted(positions, [start, start + emb.shape[0]])
        out[lo:hi] = emb[positions[lo:hi] - start]
    return out


def _seed(faiss: Any, index: Any, seed: int) -> None:
    """Seed the k-means of an index's coarse quantizer and product quantizer."""
    ivf = faiss.try_extract_index_ivf(index)
    for part in (index, ivf):
        if part is None:
            continue
        part = faiss.downcast_index(part)
        if hasattr(part, "cp"):
            part.cp.seed = seed
        if hasattr(part, "pq"):
            part.pq.cp.seed = seed


def _num_gpus(faiss: Any) -> int:
    get = getattr(faiss, "get_num_gpus", None)
    try:
        return int(get()) if callable(get) else 0
    except RuntimeError:
        return 0


def _to_gpu(faiss: Any, index: Any) -> Any | None:
    """`index` cloned to GPU 0, or None when its type has no GPU version."""
    try:
        return faiss.index_cpu_to_all_gpus(index, ngpu=1)
    except (RuntimeError, AttributeError, TypeError) as exc:
        log.info("no GPU version of this FAISS index (%s): CPU", str(exc).strip().splitlines()[-1] if str(exc) else exc)
        return None


def build_index(blocks: Blocks, n: int, dim: int, factory: str, *, train_size: int = DEFAULT_TRAIN_SIZE,
                seed: int = 0, show_progress: bool = False, use_gpu: bool | None = None) -> Any:
    """An inner-product index of `factory` over the `n` rows of `blocks`, in corpus order (a CPU index).

    `blocks()` is called once to sample the training rows when the index needs training, once to add.
    `use_gpu`: None = when FAISS sees a GPU. On a GPU run only an IVF index's coarse k-means and the
    assignment of each added vector to its list (the costly parts); the index itself stays in host
    memory, so its size is not bounded by the GPU's.
    """
    return _build(blocks, n, dim, factory, train_size=train_size, seed=seed, show_progress=show_progress,
                  use_gpu=use_gpu)[0]


def _build(blocks: Blocks, n: int, dim: int, factory: str, *, train_size: int, seed: int, show_progress: bool,
           use_gpu: bool | None) -> tuple[Any, int]:
    """`build_index` and the number of training rows used (0: the index needed no training)."""
    faiss = import_faiss()
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
        raise ValueError(f"FAISS index factory {factory!r} is not valid for {dim} dims: {last}") from None
    _seed(faiss, index, seed)
    gpus = _num_gpus(faiss) if use_gpu is None or use_gpu else 0
    if use_gpu and gpus == 0:
        raise RuntimeError("use_gpu=True but this FAISS build sees no GPU (install faiss-gpu)")
    ivf = faiss.try_extract_index_ivf(index) if gpus else None
    clustering = None
    if ivf is not None and not ivf.is_trained:  # the coarse k-means on the GPU
        clustering = _to_gpu(faiss, faiss.IndexFlat(ivf.d, ivf.metric_type))
        if clustering is not None:
            ivf.clustering_index = clustering
    began = time.perf_counter()
    trained = 0
    if not index.is_trained:
        coarse = faiss.try_extract_index_ivf(index)
        if coarse is not None and train_size < ROWS_PER_LIST * coarse.nlist:  # k-means wants ~40 rows a list
            log.info("training sample raised from %d to %d rows (%d per IVF list)", train_size,
                     ROWS_PER_LIST * coarse.nlist, ROWS_PER_LIST)
            train_size = ROWS_PER_LIST * coarse.nlist
        positions = training_positions(n, train_size)
        sample = _sample(blocks, positions, dim)
        log.info("training FAISS %s on %d of %d rows%s", factory, len(sample), n,
                 " (k-means on the GPU)" if clustering is not None else "")
        index.train(sample)
        trained = len(sample)
        del sample
    if clustering is not None:
        ivf.clustering_index = None
    # Vectors are assigned to their lists by a GPU copy of the coarse quantizer when the index is an IVF
    # itself (not behind a transform); the codes are computed and stored on the CPU.
    direct = faiss.downcast_index(index)
    assigner = _to_gpu(faiss, direct.quantizer) if gpus and isinstance(direct, faiss.IndexIVF) else None
    from ...utils.progress import tqdm

    with tqdm(total=n, unit="passage", unit_scale=True, desc=f"FAISS {factory}", disable=not show_progress,
              dynamic_ncols=True) as bar:
        for _start, emb in blocks():
            x = np.ascontiguousarray(emb, dtype=np.float32)
            if assigner is not None:
                _, lists = assigner.search(x, 1)
                lists = np.ascontiguousarray(lists[:, 0], dtype=np.int64)
                direct.add_core(len(x), faiss.swig_ptr(x), None, faiss.swig_ptr(lists))
            else:
                index.add(x)
            bar.update(x.shape[0])
    if index.ntotal != n:
        raise RuntimeError(f"FAISS index holds {index.ntotal} vectors after adding {n}")
    log.info("built FAISS %s (%s) in %.1f s%s", factory, describe_index(index), time.perf_counter() - began,
             " (list assignment on the GPU)" if assigner is not None else "")
    return index, trained


def build_faiss_index(shard_dir: str | Path, factory: str, out_path: str | Path, *,
                      train_size: int = DEFAULT_TRAIN_SIZE, seed: int = 0, show_progress: bool = False,
                      use_gpu: bool | None = None) -> Path:
    """Build an inner-product `factory` index over the shards of `shard_dir`, write it to `out_path`.

    Every shard must be complete (FileNotFoundError otherwise). Writes `out_path` atomically and
    then ``<out_path>.json`` (`read_index_metadata`); returns `out_path`.
    """
    faiss = import_faiss()
    shard_dir, out_path = Path(shard_dir), Path(out_path)
    manifest = read_manifest(shard_dir)
    dim = manifest.dim
    if dim is None:
        _, first = next(iter(read_shards(shard_dir)))
        dim = int(first.shape[1])
    index, trained = _build(lambda: read_shards(shard_dir), manifest.n, dim, factory, train_size=train_size,
                            seed=seed, show_progress=show_progress, use_gpu=use_gpu)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out_path.parent, f".{out_path.name}.*.tmp")
    tmp = temp_name(out_path)
    with disk_full_is_explained(out_path, "the embedding shards are kept; the index is built again on the next run"):
        try:
            faiss.write_index(index, str(tmp))
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, out_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        meta = FaissIndexMeta(format_version=INDEX_FORMAT_VERSION, factory=factory, metric="inner_product",
                              ntotal=int(index.ntotal), dim=int(index.d), shards_key=manifest.key,
                              trained_on=trained, seed=seed, faiss_version=getattr(faiss, "__version__", "unknown"),
                              files=record_built_files(out_path.parent, [out_path.name]))
        atomic_write_json(metadata_path(out_path), meta.to_json_dict())
        write_stamp(out_path.parent, [out_path.name], metadata_path(out_path).name, stamp_path(out_path).name)
    log.info("wrote FAISS index %s (%s)", out_path, describe_index(index))
    return out_path


def load_faiss_index(path: str | Path, mmap: bool = True) -> Any:
    """Read a FAISS index file; with `mmap`, its codes are memory-mapped where FAISS can (see the module doc)."""
    faiss = import_faiss()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"FAISS index {path} does not exist")
    attempts = [("memory-mapped codes (IO_FLAG_MMAP_IFC)", "IO_FLAG_MMAP_IFC"),
                ("memory-mapped inverted lists (IO_FLAG_MMAP)", "IO_FLAG_MMAP")] if mmap else []
    for how, flag in attempts:
        value = getattr(faiss, flag, None)
        if value is None:
            continue
        try:
            index = faiss.read_index(str(path), value)
        except RuntimeError as exc:
            log.debug("FAISS cannot read %s with %s: %s", path, flag, exc)
            continue
        log.info("loaded FAISS index %s (%s), %s", path, describe_index(index), how)
        return index
    index = faiss.read_index(str(path))
    log.info("loaded FAISS index %s (%s), read into memory%s", path, describe_index(index),
             " (no memory mapping for this index type)" if mmap else "")
    return index


def apply_search_params(index: Any, params: str | None) -> None:
    """Set search parameters given as ``"nprobe=32,efSearch=64"`` (``faiss.ParameterSpace`` names).

    An empty string or None does nothing. A malformed item or a parameter the index does not have
    raises ValueError naming it.
    """
    if not params or not params.strip():
        return
    faiss = import_faiss()
    space = faiss.ParameterSpace()
    for item in params.split(","):
        name, sep, raw = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise ValueError(f"FAISS search parameter {item.strip()!r} in {params!r} is not name=value")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"FAISS search parameter {name}={raw!r} in {params!r} is not a number") from None
        try:
            space.set_index_parameter(index, name, value)
        except RuntimeError:
            raise ValueError(f"FAISS search parameter {name!r} (in {params!r}) does not apply to this index "
                             f"({describe_index(index)}); e.g. nprobe is for IVF indexes, efSearch for HNSW") from None
