"""A rough time estimate of a recipe's stages, for ``purecover pipeline --dry-run``, before hours start.

The figures are the ones the benchmarks measured on 2 CPU cores with SmolLM2-135M-Instruct and K1 = 10
(`REFERENCE`, each naming its row in ``benchmarks/results``; a test checks they match). A stage's estimate
scales its reference by the questions it will see, the parameters of the model it runs and K1 / 10 (a reference
measured with the recipe's own model, ``<stage variant>@<model>``, is not scaled by size):

    seconds ~ questions x reference s/question x (parameters / 135M) x (K1 / 10)   [x epochs x shuffles: train]

It is a first-order guess (within a factor of about 3 on the machine the figures come from; more cores are
faster, not linearly; busy cores slower). It imports no torch: parameters come from the catalogue, a local
``config.json`` or GGUF header, or a Hub id's size tag (``7B``, ``135M``); questions from the data file's records
(files up to `COUNT_LIMIT_BYTES`) and ``data.limit`` / ``data.sample``. On a machine with a GPU (``nvidia-smi``
present) the CPU figures do not apply and none is given until the GPU check has measured one.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Recipe

__all__ = ["COUNT_LIMIT_BYTES", "REFERENCE", "StageEstimate", "estimate_stages", "model_parameters",
           "question_count", "total_text"]

REFERENCE_PARAMETERS = 134_515_008  # SmolLM2-135M-Instruct's tensors (its GGUF file)
REFERENCE_K1 = 10
COUNT_LIMIT_BYTES = 64 << 20  # larger data files are not read by a dry run to count their questions

# stage variant -> (seconds per question on 2 CPU cores, the benchmark row it comes from)
REFERENCE: dict[str, tuple[float, str]] = {
    "label:model": (42.84, "real_models.json real_models.label_f1.smollm2_own_steps (hotpotqa): 42.84 s/question"),
    # the real_cpu own-steps recipes' teacher, as they set it (reply started on "[Step 1]:", 160 new tokens, all 24
    # layers, 8 replies at a time): measured with this model, so not scaled by size
    "label:model@qwen2.5-coder-0.5b-instruct": (
        37.33, "own_steps.json own_steps.hotpotqa.qwen2.5-coder-0.5b-instruct.dev_usable_rate (variant prefix_batch8): "
               "37.33 s a question, 12 development questions"),
    # the HotpotQA real_cpu recipe's teacher (bfloat16, one question a forward); the float32 recipes (2Wiki, MuSiQue)
    # take about 1.5 times as long (benchmarks/cpu_precision.py)
    "label:attention": (1258 / 635, "real_models.json real_models.headline_minutes (hotpotqa): label 1258 s for 635 "
                                    "questions (the real_cpu recipe: layers 18 and 23, oracle steps)"),
    "label:embedding": (1.27, "real_models.json real_models.label_f1.oracle_proxy (hotpotqa): 1.27 s/question"),
    "train": (2444.8 / 378, "student_readout.json student_readout.hotpotqa.passage.train_seconds (seed 0): "
                            "2444.8 s for 378 questions, one pass"),
    "select": (2.1446, "student_readout.json student_readout.hotpotqa.selection_time_ratio: 2.1446 s/question"),
}
_SIZE_TAG = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.I)
# What an estimate believes: a model of 1 thousand to 100 trillion parameters, config sizes in these ranges, and at
# most 1,000 days of work; anything outside is "unknown" (a typo or a hostile file), never an overflow or a
# negative count.
PLAUSIBLE_PARAMETERS = (1_000, 10**14)
_CONFIG_LIMITS = {"hidden_size": 10**6, "num_hidden_layers": 10**5, "intermediate_size": 10**7,
                  "vocab_size": 10**8, "num_attention_heads": 10**5, "num_key_value_heads": 10**5, "head_dim": 10**5}
MAX_ESTIMATE_SECONDS = 1000 * 86400
_CATALOGUE_SIZES = {"smollm2-135m-instruct": REFERENCE_PARAMETERS}  # measured; other names: their size tag


@dataclass(frozen=True)
class StageEstimate:
    """One stage's estimate: `seconds` (None when it cannot be told) and how it was reached, in words."""

    stage: str
    seconds: float | None
    how: str


def model_parameters(name: str | None) -> int | None:
    """The parameter count of model `name` without loading it: a catalogue name, a local directory's
    ``config.json`` (an estimate from its shapes) or GGUF file (its tensors), or a size tag in the name."""
    if not name:
        return None
    key = name.lower()
    for known, n in _CATALOGUE_SIZES.items():
        if key.startswith(known):
            return n
    path = Path(name).expanduser()
    try:
        if path.is_file() and path.suffix.lower() == ".gguf":
            from .models.gguf_header import check_gguf_header

            return _plausible(check_gguf_header(path).n_elements)
        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if ggufs and not (path / "config.json").is_file():
                from .models.gguf_header import check_gguf_header

                return _plausible(check_gguf_header(ggufs[0]).n_elements)
            if (path / "config.json").is_file() and (path / "config.json").stat().st_size <= COUNT_LIMIT_BYTES:
                return _from_config(json.loads((path / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    tag = _SIZE_TAG.search(Path(name).name)
    if tag and len(tag.group(1)) <= 12:  # a longer number is no size tag (and would overflow a float)
        return _plausible(int(float(tag.group(1)) * (1e9 if tag.group(2).lower() == "b" else 1e6)))
    return None


def _plausible(n: int | None) -> int | None:
    """`n` when it is a parameter count an estimate can use (`PLAUSIBLE_PARAMETERS`), else None."""
    low, high = PLAUSIBLE_PARAMETERS
    return n if isinstance(n, int) and low <= n <= high else None


def _from_config(config: dict[str, Any]) -> int | None:
    """Parameters of a decoder from its config: embeddings plus, per layer, attention and a gated MLP. None when
    a size it needs is missing, not a positive integer, or beyond `_CONFIG_LIMITS`."""
    if not isinstance(config, dict):
        return None
    for key, limit in _CONFIG_LIMITS.items():
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit):
            return None
    hidden = config.get("hidden_size")
    layers = config.get("num_hidden_layers")
    if hidden is None or layers is None:
        return None
    inter = config.get("intermediate_size") or 4 * hidden
    vocab = config.get("vocab_size") or 32_000
    heads = config.get("num_attention_heads") or 1
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or max(1, hidden // heads)
    attention = hidden * head_dim * (2 * heads + 2 * kv)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return _plausible(int(embeddings + layers * (attention + 3 * hidden * inter)))


def question_count(recipe: Recipe) -> int | None:
    """How many questions the data stage will keep: the demo's 36, or the records of the local data file(s)
    (JSON list or JSON lines, files up to `COUNT_LIMIT_BYTES`), cut to data.limit and data.sample."""
    d = recipe.data
    n: int | None
    if d.path == "demo":
        n = _records(Path(__file__).with_name("data") / "demo" / "demo_hotpot.json")
    else:
        paths = d.path if isinstance(d.path, list) else [d.path] if d.path else []
        n = 0
        for p in paths:
            count = _records(Path(p).expanduser())
            if count is None:
                n = None
                break
            n += count
    if n is None:
        return d.limit or d.sample
    for cap in (d.limit, d.sample):
        if cap is not None:
            n = min(n, cap)
    return n


def _records(path: Path) -> int | None:
    if not path.is_file() or path.stat().st_size > COUNT_LIMIT_BYTES:
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        return len(data) if isinstance(data, list) else None
    return sum(1 for line in text.splitlines() if line.strip())


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def estimate_stages(recipe: Recipe, stages: list[str]) -> list[StageEstimate]:
    """An estimate for each of `stages` (those the plan will run), in order (module docstring)."""
    if _has_gpu():
        return [StageEstimate(s, None, "a GPU is present: the CPU figures do not apply (benchmarks/gpu_check.py "
                                       "measures GPU figures)") for s in stages]
    n = question_count(recipe)
    k1 = recipe.data.k1 / REFERENCE_K1
    out = []
    for stage in stages:
        ref_key, model = _reference_of(recipe, stage)
        if ref_key is None:  # data and export take seconds to minutes; calibrate and evaluate are not measured yet
            fast = stage in ("data", "export")
            out.append(StageEstimate(stage, 0.0 if fast else None, "seconds to minutes" if fast else "not estimated"))
            continue
        own = f"{ref_key}@{model}"  # a figure measured with this very model: no scaling by size
        per_q, _ = REFERENCE[own] if own in REFERENCE else REFERENCE[ref_key]
        params = REFERENCE_PARAMETERS if model is None or own in REFERENCE else model_parameters(model)
        questions = _train_examples(recipe, n) if stage == "train" else _selected(recipe, n) if stage == "select" \
            else n
        if questions is None or params is None:
            what = "the question count" if questions is None else f"the size of {model}"
            out.append(StageEstimate(stage, None, f"unknown: {what} cannot be told without reading it"
                                                  if questions is None else
                                                  f"unknown: {what} cannot be told (no catalogue entry, readable "
                                                  "config.json or GGUF, or size tag giving a plausible count)"))
            continue
        seconds = float(questions) * per_q * (params / REFERENCE_PARAMETERS) * k1
        if not math.isfinite(seconds) or seconds > MAX_ESTIMATE_SECONDS:
            out.append(StageEstimate(stage, None, f"unknown: over {MAX_ESTIMATE_SECONDS // 86400:,} days at this "
                                                  f"size ({params:.3g} parameters, {float(questions):.3g} "
                                                  f"{'examples' if stage == 'train' else 'questions'})"))
            continue
        millions = params / 1e6
        size = "" if model is None else f" (measured with {model})" if own in REFERENCE else \
            f" x {millions:,.{0 if millions >= 10 else 2}f}M/135M parameters"
        noun = "examples" if stage == "train" else "questions"
        upper = " (at most: questions with oracle steps take less, teacher.steps auto)" \
            if stage == "label" and recipe.teacher.steps == "auto" and recipe.teacher.estimator != "embedding" else ""
        out.append(StageEstimate(stage, seconds, f"{questions:,.0f} {noun} x {per_q:.3g} s{size}"
                                                 f"{f' x K1 {recipe.data.k1}/10' if k1 != 1 else ''}{upper}"))
    return out


def _train_examples(recipe: Recipe, n: int | None) -> float | None:
    """Examples the train stage goes through: max_steps x batch x accumulation when set, else the training
    split's questions x epochs x candidate shuffles."""
    s = recipe.student
    t = s.training
    batch = float(t.get("per_device_train_batch_size", 1)) * float(t.get("gradient_accumulation_steps", 1))
    max_steps = t.get("max_steps", -1)
    if isinstance(max_steps, int) and max_steps > 0:
        return max_steps * batch
    if n is None:
        return None
    return n * (1 - s.eval_fraction) * float(t.get("num_train_epochs", 1)) * max(1, s.candidate_shuffles)


def _selected(recipe: Recipe, n: int | None) -> float | None:
    """Questions the select stage scores: the student's test split under eval.questions heldout (no eval.path),
    about eval_fraction x (1 - calibration_share) of them, else all `n`."""
    from .select.stage_keys import heldout_split

    split = heldout_split(recipe)
    if n is None or split is None:
        return n
    return n * split[0] * (1 - split[1])


def _reference_of(recipe: Recipe, stage: str) -> tuple[str | None, str | None]:
    """The `REFERENCE` key of `stage` for this recipe and the model its time scales with (None for the
    embedding estimator, whose cost is the embedding model's; the key None: not estimated here)."""
    t = recipe.teacher
    if stage == "label":
        if t.estimator == "embedding":
            return "label:embedding", None
        # auto: at most the teacher's own steps for every question (those with oracle steps are faster)
        return ("label:model" if t.steps in ("model", "auto") else "label:attention"), t.model
    if stage == "train":
        return "train", recipe.student.model
    if stage == "select":
        return "select", recipe.student.model
    return None, None


def total_text(estimates: list[StageEstimate]) -> str:
    """'about 2h10m' over the stages with an estimate, '+ ?' when one has none."""
    from .utils.progress import duration_text

    known = [e.seconds for e in estimates if e.seconds is not None]
    unknown = any(e.seconds is None for e in estimates)
    return f"about {duration_text(math.fsum(known))}" + (" + stages not estimated" if unknown else "")
