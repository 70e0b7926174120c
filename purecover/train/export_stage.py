"""The export stage: a trained checkpoint → a self-contained selector directory (docs/concepts/stage-contract.md, docs/concepts/file-formats.md).

    purecover export RECIPE [--set ...]        # run_dir/checkpoints/final → run_dir/selector/

The selector directory holds:

- the model: with ``export.merge: true`` (default) the LoRA adapter merged into the base model
  (``PeftModel.from_pretrained(base, ckpt).merge_and_unload()``), or the fully trained model, as
  safetensors shards that load with plain ``AutoModelForCausalLM.from_pretrained`` (no peft);
  with ``export.merge: false`` the adapter itself (``adapter_config.json`` +
  ``adapter_model.safetensors``) and ``"adapter": true`` in selector_config.json: it must be
  loaded on ``base_model``;
- the tokenizer (with its chat template);
- ``score_head.safetensors`` when the student scores passages with a head (``passage_score: head``);
- ``selector_config.json``: base_model, identifiers, prompt_template, k1, tau3, k_max,
  min_select, purecover_version, max_passage_tokens (+ ``adapter`` for an unmerged export, ``readout`` and
  ``passage_score`` when not the paper's);
- ``README.md``: a model card (base model, data, teacher, losses, held-out subset F1, τ3, usage),
  rendered by `purecover.train.model_card`.

Everything is written to a temporary directory beside the target and renamed into place; an
existing export is renamed away first and deleted only after the new one is in place, so the
target path always holds one complete export (or, for an instant between two renames, none).
Nothing is pickled: weights are safetensors only and training_args.bin is not copied.
Uploading the export to the Hub is `purecover.train.push`.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import Recipe
from ..contract import StageRun
from ..models.identifiers import IdentifierScheme
from ..models.readouts import get_readout
from ..models.selector import SELECTOR_CONFIG, read_selector_config
from ..records import (
    ExportSummary,
    SelectorConfig,
    StageSummary,
    StudentMeta,
    load_json_record,
    validate_record,
)
from ..rundir import FILES, RunDir
from ..utils.io import apply_umask, atomic_write_json, atomic_write_text
from .model_card import render_model_card

log = logging.getLogger(__name__)

__all__ = ["SELECTOR_DIR", "export_selector", "read_student_meta", "run_export_stage"]

SELECTOR_DIR = FILES["selector"]
STUDENT_META = Path(FILES["student_meta"]).name  # written by the train stage into checkpoints/final/
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
_DTYPES = ("float32", "bfloat16", "float16")
_META_HINT = "retrain, or correct the value in the checkpoint's metadata"


def read_student_meta(ckpt: Path) -> StudentMeta:
    """The `StudentMeta` of a finished student checkpoint (``checkpoints/final``); a missing checkpoint or file
    is a FileNotFoundError saying what writes it, a bad value a ValueError naming the file and field."""
    meta_path = ckpt / STUDENT_META
    if not ckpt.is_dir():
        raise FileNotFoundError(f"checkpoint {ckpt} does not exist: run `purecover train RECIPE` first")
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} does not exist: {ckpt} is not a finished purecover student checkpoint "
                                "(train writes it into checkpoints/final/ at the end)")
    # tau3_logprob (τ3 on the identifier log-softmax, for vLLM log-prob modes) is absent before it existed.
    return load_json_record(meta_path, StudentMeta, hint=_META_HINT)


def _base_dtype(base_model: str, trust_remote_code: bool) -> str:
    """The dtype the base model is stored in (config.json), float32 when unknown."""
    from transformers import AutoConfig

    try:
        from ..models.loading import check_model_path

        config = AutoConfig.from_pretrained(check_model_path(base_model), trust_remote_code=trust_remote_code)
    except Exception as exc:
        log.warning("cannot read the config of %s (%s); exporting in float32", base_model, exc)
        return "float32"
    dt = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(dt).replace("torch.", "") if dt is not None else "float32"
    return name if name in _DTYPES else "float32"


def _save_model(model: Any, out: Path, max_shard_size: str | int) -> None:
    import inspect

    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:  # transformers < 5
        model.save_pretrained(str(out), max_shard_size=max_shard_size, safe_serialization=True)
    else:
        model.save_pretrained(str(out), max_shard_size=max_shard_size)


def _check_no_pickle(directory: Path) -> None:
    bad = sorted(p.name for p in directory.rglob("*") if p.is_file() and p.name.endswith(_PICKLE_SUFFIXES))
    if bad:
        raise RuntimeError(f"export would contain pickle-based files ({', '.join(bad)}); refusing (safetensors only)")




def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`, replacing an existing `out`: old renamed away, new renamed in, old deleted."""
    old: Path | None = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_selector(checkpoint_dir: str | Path, out_dir: str | Path, *, merge: bool = True, dtype: str = "float32",
                    max_shard_size: str | int = "2GB", trust_remote_code: bool = False,
                    run_dir: str | Path | None = None, license: str | None = None) -> Path:
    """Export a trained student checkpoint (``checkpoints/final``) to a selector directory; returns `out_dir`.

    `dtype`: float32 | bfloat16 | float16 | auto (= the dtype the base model is stored in). `run_dir`
    (default: the checkpoint's run directory when it sits in ``<run_dir>/checkpoints/``) supplies
    the data/teacher/train manifests for the model card; `license` its licence (None: the base model's).
    """
    from ..models.loading import load_causal_lm, load_tokenizer

    ckpt = Path(checkpoint_dir)
    out = Path(out_dir)
    meta = read_student_meta(ckpt)
    base_model = meta.base_model
    if run_dir is None and ckpt.resolve().parent.name == "checkpoints":
        run_dir = ckpt.resolve().parent.parent
    is_adapter = (ckpt / "adapter_config.json").is_file()
    has_full = any(ckpt.glob("*.safetensors")) and (ckpt / "config.json").is_file()
    if is_adapter and not (ckpt / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{ckpt} has adapter_config.json but no adapter_model.safetensors (no pickle weights "
                                "are loaded)")
    if not is_adapter and not has_full:
        raise FileNotFoundError(f"{ckpt} holds neither a LoRA adapter nor a safetensors model")
    if dtype == "auto":
        dtype = _base_dtype(base_model, trust_remote_code)
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected auto, {', '.join(_DTYPES)}")

    tokenizer = load_tokenizer(str(ckpt), trust_remote_code=trust_remote_code, padding_side="left")
    k1 = meta.k1
    scheme = IdentifierScheme.from_record(meta.identifiers).check(tokenizer, k1)  # fail now, not at inference
    reader = get_readout(meta.readout, meta.passage_score)  # as trained (the paper's in files from before it)
    reader.read_token(tokenizer)  # a score token must be one token: fail now, not at inference
    head = reader.load_head(ckpt)  # its checks, when the readout trains a head

    out.parent.mkdir(parents=True, exist_ok=True)
    for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*"):  # ours: left by an export killed mid-way
        for stale in out.parent.glob(pattern):
            if stale.is_dir() and not stale.is_symlink():
                log.warning("removing %s left by an interrupted export", stale)
                shutil.rmtree(stale, ignore_errors=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        merged = False
        if is_adapter and not merge:
            for name in ADAPTER_FILES:
                shutil.copy2(ckpt / name, tmp / name)
        else:
            if is_adapter:
                from peft import PeftModel

                base = load_causal_lm(base_model, dtype=dtype, device="cpu", trust_remote_code=trust_remote_code)
                model = PeftModel.from_pretrained(base, str(ckpt)).merge_and_unload()
                merged = True
            else:
                model = load_causal_lm(str(ckpt), dtype=dtype, device="cpu", trust_remote_code=trust_remote_code)
            _save_model(model, tmp, max_shard_size)
            del model
        tokenizer.save_pretrained(str(tmp))
        if head is not None:
            head.save(tmp)
        # The record that selector_config.json is read back into (models/selector.py), checked against the
        # checkpoint's metadata (its ranges and k_max/min_select rule).
        config = validate_record(SelectorConfig, {
            "base_model": base_model,
            "identifiers": scheme.to_record(),
            "prompt_template": meta.prompt_template,
            "k1": k1,
            "tau3": meta.tau3,
            "tau3_logprob": meta.tau3_logprob,
            "k_max": meta.k_max,
            "min_select": meta.min_select,
            "purecover_version": __version__,
            "max_passage_tokens": meta.max_passage_tokens,
            "adapter": bool(is_adapter and not merge),
            "readout": reader.readout,
            "passage_score": reader.passage_score,
        }, str(ckpt / STUDENT_META), hint=_META_HINT)
        atomic_write_json(tmp / SELECTOR_CONFIG, config.to_json_dict())
        atomic_write_text(tmp / "README.md", render_model_card(config, meta, Path(run_dir) if run_dir else None, merged,
                                                               license=license))
        _check_no_pickle(tmp)
        apply_umask(tmp)  # libraries save through temporary files (0600): the selector is shared as the umask says
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("exported %s → %s (%s)", ckpt, out, "adapter" if is_adapter and not merge else dtype)
    return out


def run_export_stage(recipe: Recipe) -> StageSummary:
    """Export run_dir/checkpoints/final to run_dir/selector (the export stage); returns its summary (an
    `ExportSummary`; a complete stage's stored summary that another version wrote may read as a plain
    `StageSummary`).

    Merges the adapter when ``export.merge`` is true; the export dtype is ``student.dtype``, with
    ``auto`` meaning the dtype the base model is stored in. Writes ``export.run.json``. To export another
    checkpoint elsewhere, call `export_selector`.
    """
    from ..contract import run_stage

    return run_stage("export", recipe)


def write_selector(run: StageRun) -> ExportSummary:
    """The export stage's body: run_dir/checkpoints/final merged and saved as run_dir/selector."""
    recipe = run.recipe
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    ckpt, out = rd.path_of("final"), rd.path_of("selector")
    is_adapter = (ckpt / "adapter_config.json").is_file()
    t0 = time.perf_counter()
    export_selector(ckpt, out, merge=recipe.export.merge, dtype=recipe.student.dtype,
                    trust_remote_code=recipe.student.trust_remote_code,
                    run_dir=run_dir, license=recipe.export.license)
    config = read_selector_config(out)
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    return ExportSummary(
        status="complete",
        checkpoint=str(ckpt),
        selector=str(out),
        format="adapter" if config.adapter else ("merged" if is_adapter else "full"),
        base_model=config.base_model,
        k1=config.k1,
        tau3=config.tau3,
        tau3_logprob=config.tau3_logprob,
        files=files,
        size_bytes=sum((out / f).stat().st_size for f in files),
        seconds=round(time.perf_counter() - t0, 2),
    )
