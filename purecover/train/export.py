"""The export stage: a trained checkpoint → a self-contained selector directory (DESIGN §1, §4).

    purecover export RECIPE [--set ...]        # run_dir/checkpoints/final → run_dir/selector/

The selector directory holds:

- the model: with ``export.merge: true`` (default) the LoRA adapter merged into the base model
  (``PeftModel.from_pretrained(base, ckpt).merge_and_unload()``), or the fully trained model, as
  safetensors shards that load with plain ``AutoModelForCausalLM.from_pretrained`` (no peft);
  with ``export.merge: false`` the adapter itself (``adapter_config.json`` +
  ``adapter_model.safetensors``) and ``"adapter": true`` in selector_config.json: it must be
  loaded on ``base_model``;
- the tokenizer (with its chat template);
- ``selector_config.json``: base_model, identifiers, prompt_template, k1, tau3, k_max,
  min_select, purecover_version, max_passage_tokens (+ ``adapter`` for an unmerged export);
- ``README.md``: a model card (base model, data, teacher, losses, held-out subset F1, τ3, usage).

Everything is written to a temporary directory beside the target and renamed into place; an
existing export is renamed away first and deleted only after the new one is in place, so the
target path always holds one complete export (or, for an instant between two renames, none).
Nothing is pickled: weights are safetensors only and training_args.bin is not copied.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from .. import __version__
from ..config import Recipe
from ..models.identifiers import IdentifierScheme
from ..models.selector import SELECTOR_CONFIG
from ..rundir import FILES, RunDir
from ..stages import StageRun
from ..stages import config_hash as stage_config_hash
from ..utils.io import atomic_write_json, atomic_write_text
from ..utils.rundir_lock import locked_stage

log = logging.getLogger(__name__)

__all__ = ["SELECTOR_DIR", "export_selector", "run_export_stage"]

SELECTOR_DIR = FILES["selector"]
STUDENT_META = "purecover_student.json"  # written by train/run.py into checkpoints/final/
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
_DTYPES = ("float32", "bfloat16", "float16")


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        log.warning("%s is not valid JSON; ignored for the model card", path)
        return None
    return value if isinstance(value, dict) else None


def _read_meta(ckpt: Path) -> dict[str, Any]:
    meta_path = ckpt / STUDENT_META
    if not ckpt.is_dir():
        raise FileNotFoundError(f"checkpoint {ckpt} does not exist: run `purecover train RECIPE` first")
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} does not exist: {ckpt} is not a finished purecover student checkpoint "
                                "(train writes it into checkpoints/final/ at the end)")
    meta = _read_json(meta_path)
    if meta is None:
        raise ValueError(f"{meta_path}: not a JSON object")
    for key in ("base_model", "identifiers", "k1", "tau3", "k_max", "min_select", "max_passage_tokens",
                "prompt_template"):
        if key not in meta:
            raise ValueError(f"{meta_path}: missing field {key!r}")
    # tau3_logprob (τ3 on the identifier log-softmax, for vLLM log-prob modes): optional, absent before it existed.
    lp = meta.get("tau3_logprob")
    if lp is not None and (isinstance(lp, bool) or not isinstance(lp, (int, float))):
        raise ValueError(f"{meta_path}: field 'tau3_logprob' must be a number, got {lp!r}")
    return meta


def _base_dtype(base_model: str, trust_remote_code: bool) -> str:
    """The dtype the base model is stored in (config.json), float32 when unknown."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(base_model, trust_remote_code=trust_remote_code)
    except Exception as exc:
        log.warning("cannot read the config of %s (%s); exporting in float32", base_model, exc)
        return "float32"
    dt = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    name = str(dt).replace("torch.", "") if dt is not None else "float32"
    return name if name in _DTYPES else "float32"


def _save_model(model: Any, out: Path, max_shard_size: str | int) -> None:
    import inspect

    kwargs: dict[str, Any] = {"max_shard_size": max_shard_size}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:  # transformers < 5
        kwargs["safe_serialization"] = True
    model.save_pretrained(str(out), **kwargs)


def _check_no_pickle(directory: Path) -> None:
    bad = sorted(p.name for p in directory.rglob("*") if p.is_file() and p.name.endswith(_PICKLE_SUFFIXES))
    if bad:
        raise RuntimeError(f"export would contain pickle-based files ({', '.join(bad)}); refusing (safetensors only)")


def _fmt(x: Any, digits: int = 4) -> str:
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return "n/a" if x is None else str(x)


_TRAIN_LOG_KEYS = ("loss", "l_cl", "l_lm")
_EVAL_LOG_KEYS = ("eval_loss", "eval_l_cl", "eval_l_lm", "eval_subset_f1@0", "eval_subset_f1@size")


def _last_logged(log_history: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """The last Trainer log record holding any of `keys`: ``{"step": N, key: value, ...}`` (empty when none)."""
    for entry in reversed(log_history or []):
        found = {k: entry[k] for k in keys if k in entry}
        if found:
            return {"step": entry.get("step"), **found}
    return {}


def _training_log_lines(log_history: list[dict[str, Any]], tsum: dict[str, Any]) -> list[str]:
    """The card's training figures, each saying what it covers.

    ``train_loss`` is the summary's whole-run mean (resumes included), not the Trainer's ``train_loss`` of
    the last ``train()`` call; the ``eval_*`` records are on the calibration split (early stopping), which
    is also where τ3 is chosen, so they are labelled as such and are not the test figure.
    """
    lines = []
    if tsum.get("train_loss") is not None:
        resumes = tsum.get("resumes") or []
        steps = tsum.get("train_loss_steps")
        cover = f"mean over {steps} steps" if steps is not None else "mean over the run"
        cover += f", resumed at step {', '.join(str(r) for r in resumes)}" if resumes else ""
        lines.append(f"- Training loss: {_fmt(tsum['train_loss'])} ({cover})")
    last = _last_logged(log_history, _TRAIN_LOG_KEYS)
    if last:
        step = last.pop("step")
        lines.append(f"- Last logged training step {step}: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in last.items()))
    last = _last_logged(log_history, _EVAL_LOG_KEYS)
    if last:
        step = last.pop("step")
        n = tsum.get("calib_questions")
        lines.append(f"- Last evaluation (step {step}) on the {'' if n is None else f'{n} '}calibration questions "
                     "(early stopping; τ3 is chosen there too): " + ", ".join(f"{k} = {_fmt(v)}" for k, v in last.items()))
    return lines


_TEMPLATES = "templates"  # package data: purecover/train/templates/*.md
_BLOCK_LINE = re.compile(r"^\$(\w+)\n", re.MULTILINE)


def _render_template(name: str, values: dict[str, Any]) -> str:
    """Fill ``templates/<name>``: ``$field`` placeholders (string.Template).

    A placeholder alone on its line stands for a block of lines; when its value is empty the line is left out.
    """
    text = resources.files(__package__).joinpath(_TEMPLATES, name).read_text(encoding="utf-8")
    text = _BLOCK_LINE.sub(lambda m: "" if values.get(m.group(1)) == "" else m.group(0), text)
    return Template(text).substitute(values)


_TEACHER_KEYS = ("model", "backend", "steps", "estimator", "layers", "calibrate", "cot_weighting", "normalize", "tau1",
                 "tau2", "lam", "budget", "tau_stop", "min_select", "selection", "lancer")
_CARD_TAGS = ["purecover", "reranking", "rag", "retrieval-augmented-generation", "document-selection"]


def _project_url() -> str | None:
    """The package's Project-URL (or Home-page) from its installed metadata; None when it has none."""
    from importlib import metadata

    try:
        md = metadata.metadata("purecover")
    except metadata.PackageNotFoundError:
        return None
    for entry in md.get_all("Project-URL") or []:
        url = entry.split(",", 1)[-1].strip()
        if url.startswith(("https://", "http://")):
            return url
    home = md.get("Home-page")
    return home if home and home.startswith(("https://", "http://")) else None


def _card_license(license: str | None, base: str) -> tuple[dict[str, str], str]:
    """(front-matter licence keys, the card's sentence about them): the recipe's, else the base model's, else other."""
    from ..utils.hub import model_license

    if license:
        return {"license": license}, f"{license} (set by the recipe, export.license)"
    found = model_license(base)
    if found:
        return found, f"{found['license']} (the base model's licence, read from its model card)"
    return {"license": "other"}, ("not determined: export.license is not set and the base model's licence could not "
                                  "be read here; check the base model's licence before using or sharing this model")


def _threshold_split(tsum: dict[str, Any]) -> str:
    """Where τ3 was chosen, in words (``threshold_split`` of the train summary)."""
    split = tsum.get("threshold_split")
    if split == "calib":
        n = tsum.get("calib_questions")
        return f"the {'' if n is None else f'{n} '}calibration questions"
    return str(split) if split else "held-out labels"


def _metrics_lines(meta: dict[str, Any], tsum: dict[str, Any], run_dir: Path | None) -> list[str]:
    """The card's measured metrics, each with what it was measured on."""
    stored = {**(meta.get("summary") or {}), **tsum}
    n_train, n_calib, n_test = (stored.get(f"{s}_questions") for s in ("train", "calib", "test"))
    if meta.get("test_subset_f1") is not None:
        lines = [f"- Subset F1 against the teacher's labels: {_fmt(meta['test_subset_f1'])}, on the {n_test} "
                 f"test questions (used for neither training nor τ3; τ3 chosen on the {n_calib} calibration "
                 "questions)"]
    else:
        lines = ["- Subset F1 against the teacher's labels: not measured (no test split; "
                 f"{_fmt(meta.get('calib_subset_f1'))} on the questions τ3 was chosen on)"]
    lines.append(f"- Questions: {n_train} train, {n_calib} calibration, {n_test} test")
    metrics = _read_json(run_dir / "eval" / "metrics.json") if run_dir else None
    if metrics and isinstance(metrics.get("results"), dict) and metrics.get("budgets"):
        budgets = [str(b) for b in metrics["budgets"]]
        k = str(metrics.get("table_budget", budgets[-1]))
        k = k if k in budgets else budgets[-1]
        lines += ["", f"End-to-end QA (run_dir/eval/metrics.json) at budget K = {k}: {metrics.get('questions')} "
                  f"questions from {metrics.get('question_source')}, answered by `{metrics.get('generator')}` "
                  f"(greedy); scores in %, |D| = passages given to the generator.", "",
                  "| method | EM | F1 | Acc | mean \\|D\\| |", "|---|---|---|---|---|"]
        for name, per_k in metrics["results"].items():
            r = per_k.get(k) or {}
            cells = ["—" if r.get(m) is None else f"{100 * r[m]:.2f}" for m in ("em", "f1", "acc")]
            lines.append(f"| {name} | {' | '.join(cells)} | {_fmt(r.get('mean_k'))} |")
    else:
        lines.append("- End-to-end QA: not measured when this card was written (no run_dir/eval/metrics.json)")
    return lines


def _model_card(selector_config: dict[str, Any], meta: dict[str, Any], run_dir: Path | None, merged: bool,
                license: str | None = None) -> str:
    """The selector's README.md: templates/model_card.md filled from the config, the student meta, the run's
    data/label/train manifests and eval/metrics.json (when `run_dir` has them) and the licence (`license`:
    export.license; None = the base model's when its card says, else ``other``)."""
    import yaml

    base = selector_config["base_model"]
    data_run = _read_json(run_dir / "data.run.json") if run_dir else None
    label_run = _read_json(run_dir / "label.run.json") if run_dir else None
    train_run = _read_json(run_dir / "train.run.json") if run_dir else None
    is_adapter = bool(selector_config.get("adapter"))
    if is_adapter:
        weights = "LoRA adapter, **not merged**: load it on the base model (see below)"
    else:
        weights = ("LoRA adapter merged into the base model" if merged else "fully fine-tuned model") + " (safetensors)"
    lora_lines = []
    if meta.get("lora"):
        lora = meta["lora"]
        lora_lines.append(f"- LoRA: r = {lora.get('r')}, alpha = {lora.get('alpha')}, "
                          f"dropout = {lora.get('dropout')}, target modules = {lora.get('target_modules')}")
    data_lines = []
    d: dict[str, Any] = {}
    if data_run:
        d = data_run.get("recipe", {}).get("data", {})
        s = data_run.get("summary", {})
        data_lines += [
            f"- Dataset: {d.get('dataset')} (`{d.get('path')}`, split {d.get('split')}, limit {d.get('limit')})",
            f"- Candidates: top-{d.get('k1')} by {d.get('retriever')} over the {d.get('corpus')} corpus; "
            f"{s.get('questions')} questions",
        ]
        recall = next((v for k, v in s.items() if k.startswith("supporting_recall@")), None)
        if recall is not None:
            data_lines.append(f"- Supporting-paragraph recall of the candidates: {_fmt(recall)}")
    else:
        data_lines.append("- (no data.run.json found next to the checkpoint)")
    t: dict[str, Any] = {}
    if label_run:
        t = label_run.get("recipe", {}).get("teacher", {})
        s = label_run.get("summary", {})
        teacher_lines = [
            f"- Teacher: `{t.get('model')}`, steps = {t.get('steps')}, estimator = {t.get('estimator')}, "
            f"calibration = {t.get('calibrate')}, λ = {t.get('lam')}, budget K = {t.get('budget')}",
            f"- Labels: {s.get('ok')} ok, {s.get('fallback')} fallback, {s.get('error')} error",
        ]
    else:
        teacher_lines = ["- (no label.run.json found next to the checkpoint)"]
    losses = meta.get("losses") or {}
    tsum = {**(meta.get("summary") or {}), **((train_run or {}).get("summary") or {})}
    training_log = _training_log_lines(meta.get("log_history") or [], tsum)
    ids = selector_config["identifiers"]
    usage = "model_card_usage_adapter.md" if is_adapter else "model_card_usage_transformers.md"

    from ..utils.hub import hub_dataset_id

    lic, license_line = _card_license(license, base)
    front: dict[str, Any] = {"base_model": base, "library_name": "peft" if is_adapter else "transformers", **lic}
    hub_data = hub_dataset_id(d.get("path"))
    if hub_data:
        front["datasets"] = [hub_data]
    front["tags"] = _CARD_TAGS + ([str(d["dataset"])] if d.get("dataset") else [])
    front["pipeline_tag"] = "text-generation"
    recipe_part: dict[str, Any] = {}
    student = (train_run or {}).get("recipe", {}).get("student")
    if student:
        recipe_part["student"] = student
    if t:
        recipe_part["teacher"] = {k: t[k] for k in _TEACHER_KEYS if k in t}
    recipe_yaml = (yaml.safe_dump(recipe_part, sort_keys=False, allow_unicode=True).rstrip("\n") if recipe_part
                   else "{}  # no train.run.json / label.run.json found next to the checkpoint")
    url = _project_url()
    if url:
        link = f"[purecover]({url})"
        install = f"With purecover (not on PyPI: install it from its source, `pip install \"git+{url}\"`):"
    else:
        link = "purecover"
        install = ("With purecover (not on PyPI: install it from its source, `pip install .` in a checkout of "
                   f"purecover {selector_config['purecover_version']}):")
    return _render_template("model_card.md", {
        "front_matter": yaml.safe_dump(front, sort_keys=False, allow_unicode=True).rstrip("\n"),
        "purecover_link": link,
        "purecover_version": selector_config["purecover_version"],
        "k1": selector_config["k1"],
        "base_model": base,
        "weights": weights,
        "lora": "\n".join(lora_lines),
        "id_scheme": ids["name"],
        "id_labels": ", ".join(ids["labels"][: min(5, selector_config["k1"])]),
        "id_separator": repr(ids["separator"]),
        "prompt_layout": selector_config["prompt_template"].get("layout"),
        "prompt_hash": selector_config["prompt_template"].get("hash"),
        "max_passage_tokens": selector_config["max_passage_tokens"],
        "license_line": license_line,
        "data_lines": "\n".join(data_lines),
        "teacher_lines": "\n".join(teacher_lines),
        "recipe_yaml": recipe_yaml,
        "lm_weight": losses.get("lm_weight"),
        "lm_reduction": {"token_mean": "the mean token NLL of the reply",
                         "sequence_sum": "the total NLL of the reply, −log p"}.get(
            losses.get("lm_reduction", "token_mean"), losses.get("lm_reduction")),
        "m_exact": losses.get("m_exact"),
        "training_log": "\n".join(training_log),
        "tau3": f"{selector_config['tau3']:.6g}",
        "threshold_split": _threshold_split(tsum),
        "calib_subset_f1": _fmt(meta.get("calib_subset_f1")),
        "k_max": selector_config["k_max"],
        "min_select": selector_config["min_select"],
        "metrics_lines": "\n".join(_metrics_lines(meta, tsum, run_dir)),
        "install_line": install,
        "plain_usage": _render_template(usage, {"base_model": base}).rstrip("\n"),
    })


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
    meta = _read_meta(ckpt)
    base_model = str(meta["base_model"])
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
    k1 = int(meta["k1"])
    scheme = IdentifierScheme.from_dict(meta["identifiers"]).check(tokenizer, k1)  # fail now, not at inference

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
        # Built through the record that selector_config.json is read back into (models/selector.py).
        from ..records import SelectorConfig, validate_record

        config: dict[str, Any] = validate_record(SelectorConfig, {
            "base_model": base_model,
            "identifiers": scheme.to_dict(),
            "prompt_template": meta["prompt_template"],
            "k1": k1,
            "tau3": float(meta["tau3"]),
            **({"tau3_logprob": float(meta["tau3_logprob"])} if meta.get("tau3_logprob") is not None else {}),
            "k_max": meta["k_max"],
            "min_select": int(meta["min_select"]),
            "purecover_version": __version__,
            "max_passage_tokens": int(meta["max_passage_tokens"]),
            "adapter": bool(is_adapter and not merge),
        }, str(ckpt / STUDENT_META), hint="retrain, or correct the value in the checkpoint's metadata").to_json_dict()
        atomic_write_json(tmp / SELECTOR_CONFIG, config)
        atomic_write_text(tmp / "README.md", _model_card(config, meta, Path(run_dir) if run_dir else None, merged,
                                                                license=license))
        _check_no_pickle(tmp)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("exported %s → %s (%s)", ckpt, out, "adapter" if is_adapter and not merge else dtype)
    return out


def run_export_stage(recipe: Recipe) -> dict[str, Any]:
    """Export run_dir/checkpoints/final to run_dir/selector (the export stage); returns its summary.

    Merges the adapter when ``export.merge`` is true; the export dtype is ``student.dtype``, with
    ``auto`` meaning the dtype the base model is stored in. Writes ``export.run.json``. To export another
    checkpoint elsewhere, call `export_selector`.
    """
    from ..stages import run_stage

    return run_stage("export", recipe)


def write_selector(run: StageRun) -> dict[str, Any]:
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
    config = json.loads((out / SELECTOR_CONFIG).read_text(encoding="utf-8"))
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    summary = {
        "status": "complete",
        "checkpoint": str(ckpt),
        "selector": str(out),
        "format": "adapter" if config.get("adapter") else ("merged" if is_adapter else "full"),
        "base_model": config["base_model"],
        "k1": config["k1"],
        "tau3": config["tau3"],
        "tau3_logprob": config.get("tau3_logprob"),
        "files": files,
        "size_bytes": sum((out / f).stat().st_size for f in files),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    return summary


PUSH_RECORD = "export.push.json"  # run_dir/export.push.json: the last push of run_dir/selector (utils.hub)


def refresh_model_card(recipe: Recipe) -> bool:
    """Re-render run_dir/selector/README.md from the same inputs as at export time, so that metrics written
    since (run_dir/eval/metrics.json) appear; returns True when the card changed. Only README.md is rewritten
    (the weights and selector_config.json, hence the select stage's fingerprint, are untouched)."""
    rd = RunDir(recipe.run_path)
    out, ckpt = rd.path_of("selector"), rd.path_of("final")
    config = _read_json(out / SELECTOR_CONFIG)
    meta = _read_json(ckpt / STUDENT_META)
    if config is None or meta is None:
        log.warning("cannot refresh the model card of %s (no %s or %s); pushing it as it is", out,
                    out / SELECTOR_CONFIG, ckpt / STUDENT_META)
        return False
    merged = not config.get("adapter") and (ckpt / "adapter_config.json").is_file()
    card = _model_card(config, meta, recipe.run_path, merged, license=recipe.export.license)
    readme = out / "README.md"
    if readme.is_file() and readme.read_text(encoding="utf-8") == card:
        return False
    atomic_write_text(readme, card)
    rd.record_outputs("export")  # the card is part of the export: its manifest records the new size
    log.info("refreshed the model card %s", readme)
    return True


@locked_stage("export")
def push_export(recipe: Recipe, repo_id: str, *, private: bool = False, revision: str | None = None,
                commit_message: str | None = None) -> dict[str, Any]:
    """Push the complete export run_dir/selector/ to the Hub repo `repo_id` (``purecover export --push-to-hub``).

    The card is refreshed first (`refresh_model_card`); the push is recorded in run_dir/export.push.json and a
    second push of the same files to the same repo and revision does nothing (`purecover.utils.hub.push_folder`).
    """
    from ..utils.hub import push_folder
    from ..utils.rundir_lock import run_dir_lock

    rd = RunDir(recipe.run_path)
    with run_dir_lock(recipe.run_path, "export"):  # the card is rewritten: no other writer meanwhile
        if rd.completed("export", stage_config_hash(recipe, "export")) is None:
            raise RuntimeError(f"{rd.path_of('selector')} is not a complete export for this recipe: run "
                               "`purecover export RECIPE` first")
        refresh_model_card(recipe)
        return push_folder(rd.path_of("selector"), repo_id, record=recipe.run_path / PUSH_RECORD, repo_type="model",
                           private=private, revision=revision,
                           commit_message=commit_message or f"Upload the purecover selector of {recipe.run_path.name}")
