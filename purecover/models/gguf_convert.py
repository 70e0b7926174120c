"""GGUF files as a model source: read what a file holds, convert it once into a cached safetensors model directory.

transformers loads a GGUF file (``from_pretrained(dir, gguf_file=name)``, through the ``gguf`` package) by
dequantising every tensor to float32, which takes 30-70 s for a 135M-270M model, and such a model cannot be saved
as it is ("quantized with gguf and is not serializable"). `convert_gguf` does that once per file content: it
rebuilds the model from its configuration without the quantisation settings, copies the dequantised weights into
it and writes a plain directory (``config.json``, ``model.safetensors``, the tokenizer, a model card and
``purecover_source.json``) that later loads take in seconds.

The converted directory lives under ``<models cache>/converted/gguf-<sha256[:16]>``: keyed by the file's
content, so the same file under any path or name is converted once, and a changed file is a new directory. The
build holds a per-key lock (a second process waits, then finds it done) and is atomic (a killed conversion
leaves nothing at the final path; see `purecover.utils.index_lock`).

The weights of the converted model equal the GGUF file's quantised values exactly (float32); they are not the
upstream model's original weights.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..records import GgufInfo, GgufSource
from ..utils.index_lock import building_directory, key_lock
from ..utils.io import apply_umask, atomic_write_json, atomic_write_text
from .chat_template_check import check_chat_template
from .gguf_header import check_gguf_header

log = logging.getLogger(__name__)

__all__ = ["SOURCE_FILE", "UnsupportedGgufError", "check_supported", "convert_gguf", "converted_dir_for", "dequantizable",
           "gguf_sha256", "read_gguf_info", "read_source"]

# transformers' list of GGUF architectures also holds the names of its key groups, which are not architectures.
NOT_ARCHITECTURES = frozenset({"general", "tokenizer"})
# The parameters the configuration implies may exceed the elements the file's tensors hold by this factor (tied
# or derived weights) before the conversion is refused: a small header must not make transformers build a huge
# model.
IMPLIED_PARAMETERS_SLACK = 1.5
SOURCE_FILE = "purecover_source.json"  # in every converted directory: what it was made from
CONVERTER_VERSION = 1  # bump when the conversion's output changes; part of nothing but the record


class UnsupportedGgufError(ValueError):
    """The GGUF file's architecture is not one transformers can load from GGUF."""


def _field(reader: Any, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # a malformed value: treat as absent
        return None


@functools.lru_cache(maxsize=32)
def _info_cached(path: str, size: int, mtime_ns: int) -> GgufInfo:
    import gguf

    check_gguf_header(path)  # bounded: counts, sizes and tensors checked before the reader trusts them
    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # the gguf reader raises ValueError / struct errors on a file that is not GGUF
        raise ValueError(f"{path} is not a readable GGUF file: {exc}") from exc
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ValueError(f"{path} has no general.architecture key: not a GGUF model file")
    file_type = _field(reader, "general.file_type")
    try:
        quant = gguf.LlamaFileType(int(file_type)).name if file_type is not None else "unknown"
    except (ValueError, TypeError, OverflowError):  # not a known type, an array, inf or NaN
        quant = f"file_type {file_type!r}"
    types = Counter(t.tensor_type.name for t in reader.tensors)

    def text(key: str) -> str | None:
        v = _field(reader, key)
        return v if isinstance(v, str) and v else None

    return GgufInfo(architecture=arch, name=text("general.name"), organization=text("general.organization"),
                    basename=text("general.basename"), size_label=text("general.size_label"),
                    finetune=text("general.finetune"), license=text("general.license"), quantization=quant,
                    tensor_types=dict(sorted(types.items())),
                    has_chat_template=text("tokenizer.chat_template") is not None)


def read_gguf_info(path: str | Path) -> GgufInfo:
    """The header of GGUF file `path` (memory-mapped; the tensors are not read). ValueError if not GGUF."""
    p = Path(path)
    st = p.stat()
    return _info_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _sha_cached(path: str, size: int, mtime_ns: int) -> str:
    from .wheel_parts import sha256_of_file

    return sha256_of_file(Path(path))


def gguf_sha256(path: str | Path) -> str:
    """sha256 (hex) of the file's bytes; remembered per (path, size, mtime) within a process."""
    p = Path(path)
    st = p.stat()
    return _sha_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def dequantizable(type_name: str) -> bool:
    """Whether the ``gguf`` package can turn tensors stored as `type_name` (``Q4_K``, ``F64``, ...) into floats, as
    transformers' GGUF loading needs: tried on one all-zero block (microseconds; no private table is read)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    qtype = getattr(GGMLQuantizationType, type_name, None)
    if qtype is None or qtype not in GGML_QUANT_SIZES:
        return False
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros(type_size, np.uint8), qtype)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


def check_supported(info: GgufInfo, path: str | Path) -> None:
    """UnsupportedGgufError (one line, naming what is missing) when transformers cannot load this GGUF file: its
    architecture is not one transformers loads from GGUF, or a tensor is stored in a type the ``gguf`` package cannot
    dequantise (checked on the header alone, before any tensor is read)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch = info.architecture
    if arch in NOT_ARCHITECTURES or (arch not in GGUF_SUPPORTED_ARCHITECTURES and arch.replace("-", "_") not in GGUF_SUPPORTED_ARCHITECTURES):
        supported = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - NOT_ARCHITECTURES)
        raise UnsupportedGgufError(
            f"{path}: GGUF architecture {arch!r} cannot be loaded by transformers (supported: {', '.join(supported)})")
    lacking = {t: n for t, n in info.tensor_types.items() if not dequantizable(t)}
    if lacking:
        what = ", ".join(f"{t} ({n} tensor{'s' if n > 1 else ''})" for t, n in sorted(lacking.items()))
        raise UnsupportedGgufError(
            f"{path}: tensors stored as {what}: the installed gguf package ({_versions().get('gguf', 'version unknown')}) cannot dequantise "
            f"that type, so the file cannot be converted; convert the file to a type it can (llama.cpp's "
            f"llama-quantize, e.g. Q4_K_M or Q8_0) or upgrade gguf")


def converted_dir_for(gguf_path: str | Path, cache_dir: str | Path) -> Path:
    """Where the converted directory of `gguf_path` is (or will be): ``<cache_dir>/converted/gguf-<sha256[:16]>``
    (keyed by content alone: the same bytes under any name or path convert once)."""
    return Path(cache_dir) / "converted" / f"gguf-{gguf_sha256(gguf_path)[:16]}"


def read_source(model_dir: str | Path) -> GgufSource | None:
    """The `GgufSource` of a converted directory, or None for any other directory."""
    f = Path(model_dir) / SOURCE_FILE
    if not f.is_file():
        return None
    return GgufSource.model_validate_json(f.read_text(encoding="utf-8"))


def _versions() -> dict[str, str]:
    import importlib.metadata

    out = {}
    for pkg in ("purecover", "transformers", "gguf"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _model_card(src: GgufSource) -> str:
    upstream = src.upstream or src.info.name or src.info.basename or "unknown"
    lic = src.license or "not stated in the file"
    types = ", ".join(f"{k} x{v}" for k, v in src.info.tensor_types.items())
    front = "---\n" + (f"license: {src.license}\n" if src.license else "") + \
        (f"base_model: {src.upstream}\n" if src.upstream else "") + "library_name: transformers\n---\n\n"
    return (front + f"# {upstream} (from GGUF, {src.info.quantization})\n\n"
            f"- Upstream model: {upstream}\n"
            f"- Licence of the weights: {lic}\n"
            + (f"- Packaged by: {src.packaged_by}\n" if src.packaged_by else "") +
            f"- Source file: `{src.file_name}`, sha256 `{src.sha256}`, {src.size_bytes:,} bytes\n"
            f"- Quantisation: {src.info.quantization} (tensors: {types})\n"
            f"- Architecture: {src.info.architecture} (transformers model type {src.model_type}), "
            f"{src.parameters:,} parameters\n\n"
            "Converted by purecover: the GGUF tensors were dequantised to float32 by transformers and saved as "
            "safetensors. The weights equal the quantised file's values, not the upstream model's original "
            "weights; figures measured with them describe the quantised model.\n")


def _check_implied_size(gguf_path: Path) -> None:
    """ValueError when the model the file's configuration describes has more parameters than its tensors hold
    (times `IMPLIED_PARAMETERS_SLACK`): counted on the meta device, so nothing is allocated."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    present = check_gguf_header(gguf_path).n_elements
    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    implied = sum(p.numel() for p in skeleton.parameters())
    if implied > IMPLIED_PARAMETERS_SLACK * present:
        raise ValueError(f"{gguf_path}: GGUF metadata: its configuration describes a model of {implied:,} parameters "
                         f"but the file's tensors hold {present:,} elements; refusing to build it")


def _convert_into(gguf_path: Path, out: Path, info: GgufInfo, sha: str, *, upstream: str | None,
                  license: str | None, catalogue_name: str | None, packaged_by: str | None) -> GgufSource:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    src_dir, fname = str(gguf_path.parent), gguf_path.name
    _check_implied_size(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname)
    check_chat_template(tokenizer, str(gguf_path))  # before any tensor is read or anything is written
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fname, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    label = upstream or info.name or fname  # never a local path in the saved config
    config._name_or_path = label
    if hasattr(config, "_model_name_or_path"):  # set from general.name by transformers' GGUF mapping
        config._model_name_or_path = label
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"{gguf_path}: converting the GGUF weights left tensors missing {missing[:5]} or "
                         f"unexpected {unexpected[:5]}")
    del loaded
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    src = GgufSource(file_name=fname, sha256=sha, size_bytes=gguf_path.stat().st_size, info=info,
                     model_type=str(config.model_type), parameters=sum(p.numel() for p in model.parameters()),
                     upstream=upstream, license=license or info.license, catalogue_name=catalogue_name,
                     packaged_by=packaged_by, converted_with=_versions())
    atomic_write_text(out / "README.md", _model_card(src))
    atomic_write_json(out / SOURCE_FILE, src.to_json_dict())
    log.info("converted %s (%s, %s) in %.0f s", fname, info.architecture, info.quantization, time.perf_counter() - t0)
    return src


def convert_gguf(gguf_path: str | Path, cache_dir: str | Path, *, upstream: str | None = None,
                 license: str | None = None, catalogue_name: str | None = None,
                 packaged_by: str | None = None) -> Path:
    """The converted model directory of `gguf_path`, converting it first if the cache has none.

    `upstream` / `license` / `catalogue_name` / `packaged_by`: what the catalogue knows about the file (recorded in
    ``purecover_source.json`` and the model card). Raises FileNotFoundError for a missing file, ValueError for a
    file that is not GGUF and `UnsupportedGgufError` for an architecture transformers cannot load from GGUF, all
    before any tensor is read.
    """
    p = Path(gguf_path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"GGUF file {p} does not exist")
    info = read_gguf_info(p)
    check_supported(info, p)
    final = converted_dir_for(p, cache_dir)
    if (final / SOURCE_FILE).is_file():
        return final
    sha = gguf_sha256(p)
    with key_lock(Path(cache_dir) / "locks" / f"{final.name}.lock", f"the conversion of {p.name}"):
        if (final / SOURCE_FILE).is_file():  # another process finished it while we waited
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        log.info("converting %s to a safetensors model directory (once; later loads take seconds): %s",
                    p.name, final)
        with building_directory(final, SOURCE_FILE) as tmp:
            _convert_into(p, tmp, info, sha, upstream=upstream, license=license, catalogue_name=catalogue_name,
                          packaged_by=packaged_by)
            apply_umask(tmp)
    return final
