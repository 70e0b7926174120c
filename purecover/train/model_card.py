"""The exported selector's model card: README.md of run_dir/selector, rendered from templates/model_card.md.

`render_model_card` fills the template (package data, purecover/train/templates/*.md) from the selector's
config, the student checkpoint's metadata, and the run directory's data/label/train manifests and
eval/metrics.json where they exist; every figure says what it was measured on. The export stage writes the
card (`purecover.train.export_stage`); a push re-renders it first so that metrics written since appear
(`purecover.train.push`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from pydantic import JsonValue

from ..models.readouts import get_readout
from ..records import (
    GgufSource,
    MetricsFile,
    ModelCardFront,
    RecordError,
    SelectorConfig,
    StudentLosses,
    StudentMeta,
    TrainSummary,
    load_json_record,
    validate_record,
)

log = logging.getLogger(__name__)

__all__ = ["ModelCardValues", "read_json", "render_model_card"]


def read_json(path: Path) -> dict[str, JsonValue] | None:
    """The JSON object in `path` (a stage manifest, read as it is); None when the file is missing, not valid JSON
    (warned) or not an object."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        log.warning("%s is not valid JSON; ignored for the model card", path)
        return None
    return value if isinstance(value, dict) else None


def _obj(value: JsonValue, *keys: str) -> dict[str, JsonValue]:
    """``value[keys[0]][keys[1]]...`` when each step is a JSON object, else ``{}``."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _fmt(x: Any, digits: int = 4) -> str:
    """`x` as the card prints it: floats to `digits` significant digits, None as ``n/a``."""
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return "n/a" if x is None else str(x)


_TRAIN_LOG_KEYS = ("loss", "l_cl", "l_lm")
_EVAL_LOG_KEYS = ("eval_loss", "eval_l_cl", "eval_l_lm", "eval_subset_f1@0", "eval_subset_f1@size")


@dataclasses.dataclass(frozen=True)
class LoggedStep:
    """Figures of one Trainer log record (`_last_logged`): its ``step`` and the values asked for, in order."""

    step: JsonValue
    figures: dict[str, JsonValue]


def _last_logged(log_history: Sequence[Mapping[str, JsonValue]], keys: Sequence[str]) -> LoggedStep | None:
    """The last Trainer log record holding any of `keys` (None when none does)."""
    for entry in reversed(log_history):
        found = {k: entry[k] for k in keys if k in entry}
        if found:
            return LoggedStep(step=entry.get("step"), figures=found)
    return None


def _training_log_lines(log_history: Sequence[Mapping[str, JsonValue]], tsum: TrainSummary | None) -> list[str]:
    """The card's training figures, each saying what it covers.

    ``train_loss`` is the summary's whole-run mean (resumes included), not the Trainer's ``train_loss`` of
    the last ``train()`` call; the ``eval_*`` records are on the calibration split (early stopping), which
    is also where τ3 is chosen, so they are labelled as such and are not the test figure.
    """
    lines = []
    if tsum is not None:
        cover = f"mean over {tsum.train_loss_steps} steps"
        cover += f", resumed at step {', '.join(str(r) for r in tsum.resumes)}" if tsum.resumes else ""
        lines.append(f"- Training loss: {_fmt(tsum.train_loss)} ({cover})")
    last = _last_logged(log_history, _TRAIN_LOG_KEYS)
    if last:
        lines.append(f"- Last logged training step {last.step}: "
                     + ", ".join(f"{k} = {_fmt(v)}" for k, v in last.figures.items()))
    last = _last_logged(log_history, _EVAL_LOG_KEYS)
    if last:
        n = None if tsum is None else tsum.calib_questions
        lines.append(f"- Last evaluation (step {last.step}) on the {'' if n is None else f'{n} '}calibration questions "
                     "(early stopping; τ3 is chosen there too): "
                     + ", ".join(f"{k} = {_fmt(v)}" for k, v in last.figures.items()))
    return lines


_TEMPLATES = "templates"  # package data: purecover/train/templates/*.md
_BLOCK_LINE = re.compile(r"^\$(\w+)\n", re.MULTILINE)


def _render_template(name: str, values: dict[str, str]) -> str:
    """Fill ``templates/<name>``: ``$field`` placeholders (string.Template).

    A placeholder alone on its line stands for a block of lines; when its value is empty the line is left out.
    """
    text = resources.files(__package__).joinpath(_TEMPLATES, name).read_text(encoding="utf-8")
    text = _BLOCK_LINE.sub(lambda m: "" if values.get(m.group(1)) == "" else m.group(0), text)
    return Template(text).substitute(values)


@dataclasses.dataclass(frozen=True)
class ModelCardValues:
    """What fills templates/model_card.md: one text per ``$field`` (a block field holds lines, '' for none)."""

    front_matter: str
    purecover_link: str
    purecover_version: str
    k1: str
    base_model: str
    weights: str
    lora: str
    id_scheme: str
    readout_sentence: str
    id_labels: str
    id_separator: str
    prompt_layout: str
    prompt_hash: str
    max_passage_tokens: str
    license_line: str
    data_lines: str
    teacher_lines: str
    recipe_yaml: str
    lm_weight: str
    lm_reduction: str
    loss_form: str
    m_exact: str
    training_log: str
    tau3: str
    threshold_split: str
    calib_subset_f1: str
    k_max: str
    min_select: str
    metrics_lines: str
    install_line: str
    plain_usage: str


_TEACHER_KEYS = ("model", "backend", "steps", "estimator", "layers", "calibrate", "cot_weighting", "normalize", "tau1",
                 "tau2", "lam", "budget", "tau_stop", "min_select", "selection", "lancer")
_CARD_TAGS = ["purecover", "reranking", "rag", "retrieval-augmented-generation", "document-selection"]
_LM_REDUCTIONS = {"token_mean": "the mean token NLL of the reply", "sequence_sum": "the total NLL of the reply, −log p"}


def _loss_form(losses: StudentLosses | None) -> str:
    """The released-code switches a student was trained with, as a clause of the loss line ('' for the paper's)."""
    if losses is None:
        return ""
    parts = []
    if losses.reply_order == "target":
        parts.append("the reply is the target in its own order (no minimum over orderings)")
    if losses.negatives == "sampled":
        parts.append(f"L_CL pairs each target passage with {losses.negative_sample} negatives drawn each step from "
                     f"the last {losses.negative_pool} candidates")
    return "; released-code form: " + ", ".join(parts) if parts else ""


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


def _card_license(license: str | None, base: str, source: GgufSource | None = None) -> tuple[dict[str, str], str]:
    """(front-matter licence keys, the card's sentence about them): the recipe's, else the base model's (for a
    model converted from GGUF: the licence its catalogue entry or file states), else other."""
    from ..utils.hub import model_license

    if license:
        return {"license": license}, f"{license} (set by the recipe, export.license)"
    if source is not None and source.license:
        return {"license": source.license}, (f"{source.license} (the base model's licence, as recorded when its GGUF "
                                             "file was converted)")
    found = model_license(base)
    if found:
        return found, f"{found['license']} (the base model's licence, read from its model card)"
    return {"license": "other"}, ("not determined: export.license is not set and the base model's licence could not "
                                  "be read here; check the base model's licence before using or sharing this model")


def _threshold_split(tsum: TrainSummary | None) -> str:
    """Where τ3 was chosen, in words (``threshold_split`` of the train summary)."""
    if tsum is None:
        return "held-out labels"
    if tsum.threshold_split == "calib":
        return f"the {tsum.calib_questions} calibration questions"
    return tsum.threshold_split or "held-out labels"


def _train_summary(meta: StudentMeta, train_run: dict[str, JsonValue] | None) -> TrainSummary | None:
    """The train stage's summary: train.run.json's when it reads as one, else the one in the student metadata."""
    stored = _obj(train_run, "summary")
    if stored:
        try:
            return validate_record(TrainSummary, stored, "train.run.json: summary")
        except RecordError as exc:
            log.warning("%s; the model card uses the summary in the student metadata", exc)
    return meta.summary if isinstance(meta.summary, TrainSummary) else None


def _read_metrics(run_dir: Path | None) -> MetricsFile | None:
    """run_dir/eval/metrics.json when there is one that reads as a `MetricsFile` (else None, warned)."""
    path = run_dir / "eval" / "metrics.json" if run_dir else None
    if path is None or not path.is_file():
        return None
    try:
        return load_json_record(path, MetricsFile)
    except RecordError as exc:
        log.warning("%s; the model card leaves out the end-to-end figures", exc)
        return None


def _metrics_lines(meta: StudentMeta, tsum: TrainSummary | None, run_dir: Path | None) -> list[str]:
    """The card's measured metrics, each with what it was measured on."""
    n_train, n_calib, n_test = ((None, None, None) if tsum is None
                                else (tsum.train_questions, tsum.calib_questions, tsum.test_questions))
    if meta.test_subset_f1 is not None:
        lines = [f"- Subset F1 against the teacher's labels: {_fmt(meta.test_subset_f1)}, on the {n_test} "
                 f"test questions (used for neither training nor τ3; τ3 chosen on the {n_calib} calibration "
                 "questions)"]
    else:
        lines = ["- Subset F1 against the teacher's labels: not measured (no test split; "
                 f"{_fmt(meta.calib_subset_f1)} on the questions τ3 was chosen on)"]
    lines.append(f"- Questions: {n_train} train, {n_calib} calibration, {n_test} test")
    shuffles = None if tsum is None else tsum.candidate_shuffles
    if shuffles is not None:  # null: a summary written before the setting (retrieval order)
        lines.append("- Candidate order in training: " + (
            "retrieval order" if shuffles == 0 else
            f"{shuffles} seeded random order{'s' if shuffles > 1 else ''} per question, labels moved with their "
            "passages") + "; calibration and test questions in retrieval order")
    metrics = _read_metrics(run_dir)
    if metrics is not None:
        budgets = [str(b) for b in metrics.budgets]
        k = str(metrics.table_budget)
        k = k if k in budgets else budgets[-1]
        lines += ["", f"End-to-end QA (run_dir/eval/metrics.json) at budget K = {k}: {metrics.questions} "
                  f"questions from {metrics.question_source}, answered by `{metrics.generator}` "
                  f"(greedy); scores in %, |D| = passages given to the generator.", "",
                  "| method | EM | F1 | Acc | mean \\|D\\| |", "|---|---|---|---|---|"]
        for name, per_k in metrics.results.items():
            r = per_k.get(k)
            scores = (None, None, None) if r is None else (r.em, r.f1, r.acc)
            cells = ["—" if v is None else f"{100 * v:.2f}" for v in scores]
            lines.append(f"| {name} | {' | '.join(cells)} | {_fmt(None if r is None else r.mean_k)} |")
    else:
        lines.append("- End-to-end QA: not measured when this card was written (no run_dir/eval/metrics.json)")
    return lines


def render_model_card(selector_config: SelectorConfig, meta: StudentMeta, run_dir: Path | None, merged: bool,
                      license: str | None = None) -> str:
    """The selector's README.md text: templates/model_card.md filled from the config, the student meta, the run's
    data/label/train manifests and eval/metrics.json (when `run_dir` has them) and the licence (`license`:
    export.license; None = the base model's when its card says, else ``other``)."""
    import yaml

    from ..models.loading import model_source

    source = model_source(selector_config.base_model)  # a GGUF file or catalogue model: name the upstream model
    base = selector_config.base_model if source is None else (source.upstream or source.info.name or source.file_name)
    base_line = f"`{base}`" if source is None else (
        f"`{base}`, quantised: the weights are `{source.file_name}` ({source.info.quantization}, sha256 "
        f"`{source.sha256[:16]}…`) dequantised to float32 by purecover, not the upstream release's own weights")
    data_run = read_json(run_dir / "data.run.json") if run_dir else None
    label_run = read_json(run_dir / "label.run.json") if run_dir else None
    train_run = read_json(run_dir / "train.run.json") if run_dir else None
    is_adapter = selector_config.adapter
    if is_adapter:
        weights = "LoRA adapter, **not merged**: load it on the base model (see below)"
    else:
        weights = ("LoRA adapter merged into the base model" if merged else "fully fine-tuned model") + " (safetensors)"
    lora_lines = []
    if meta.lora:
        lora = meta.lora
        lora_lines.append(f"- LoRA: r = {lora.r}, alpha = {lora.alpha}, "
                          f"dropout = {lora.dropout}, target modules = {lora.target_modules}")
    data_lines = []
    d = _obj(data_run, "recipe", "data")
    if data_run:
        s = _obj(data_run, "summary")
        path = d.get("path")  # one source, or a list of files read as one
        data_lines += [
            f"- Dataset: {d.get('dataset')} (`{' + '.join(map(str, path)) if isinstance(path, list) else path}`, "
            f"split {d.get('split')}, limit {d.get('limit')})",
            f"- Candidates: top-{d.get('k1')} by {d.get('retriever')} over the {d.get('corpus')} corpus; "
            f"{s.get('questions')} questions",
        ]
        recall = next((v for k, v in s.items() if k.startswith("supporting_recall@")), None)
        if recall is not None:
            data_lines.append(f"- Supporting-paragraph recall of the candidates: {_fmt(recall)}")
    else:
        data_lines.append("- (no data.run.json found next to the checkpoint)")
    t = _obj(label_run, "recipe", "teacher")
    if label_run:
        s = _obj(label_run, "summary")
        # The values the label stage applied (its summary's `estimation`): the recipe's null λ is the signal's
        # default, and position-bias calibration applies only to attention; older runs: the recipe's values.
        est = _obj(label_run, "summary", "estimation")
        applied = {key: est.get(key, t.get(key)) for key in ("calibrate", "lam", "budget")}
        teacher_lines = [
            f"- Teacher: `{t.get('model')}`, steps = {t.get('steps')}, estimator = {t.get('estimator')}, "
            f"calibration = {applied['calibrate']}, λ = {applied['lam']}, budget K = {applied['budget']}",
            f"- Labels: {s.get('ok')} ok, {s.get('fallback')} fallback, {s.get('error')} error",
        ]
    else:
        teacher_lines = ["- (no label.run.json found next to the checkpoint)"]
    losses = meta.losses
    tsum = _train_summary(meta, train_run)
    training_log = _training_log_lines(meta.log_history, tsum)
    ids = selector_config.identifiers
    reader = get_readout(selector_config.readout, selector_config.passage_score)
    usage = "model_card_usage_adapter.md" if is_adapter else reader.usage_template

    from ..utils.hub import hub_dataset_id

    lic, license_line = _card_license(license, base, source)
    data_path = d.get("path")
    hub_data = hub_dataset_id(data_path if isinstance(data_path, str) else None)
    front = ModelCardFront(base_model=base, library_name="peft" if is_adapter else "transformers", **lic,
                           **({"datasets": [hub_data]} if hub_data else {}),
                           tags=_CARD_TAGS + ([str(d["dataset"])] if d.get("dataset") else []),
                           pipeline_tag="text-generation")
    recipe_part: dict[str, JsonValue] = {}
    student = _obj(train_run, "recipe", "student")
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
                   f"purecover {selector_config.purecover_version}):")
    reduction = "token_mean" if losses is None else losses.lm_reduction
    values = ModelCardValues(
        front_matter=yaml.safe_dump(front.to_json_dict(), sort_keys=False, allow_unicode=True).rstrip("\n"),
        purecover_link=link,
        purecover_version=str(selector_config.purecover_version),
        k1=str(selector_config.k1),
        base_model=base_line,
        weights=weights,
        lora="\n".join(lora_lines),
        id_scheme=ids.name,
        readout_sentence=reader.card_sentence,
        id_labels=", ".join(ids.labels[: min(5, selector_config.k1)]),
        id_separator=repr(ids.separator),
        prompt_layout=str(selector_config.prompt_template.get("layout")),
        prompt_hash=str(selector_config.prompt_template.get("hash")),
        max_passage_tokens=str(selector_config.max_passage_tokens),
        license_line=license_line,
        data_lines="\n".join(data_lines),
        teacher_lines="\n".join(teacher_lines),
        recipe_yaml=recipe_yaml,
        lm_weight=str(None if losses is None else losses.lm_weight),
        lm_reduction=_LM_REDUCTIONS.get(reduction, reduction),
        loss_form=_loss_form(losses),
        m_exact=str(None if losses is None else losses.m_exact),
        training_log="\n".join(training_log),
        tau3=f"{selector_config.tau3:.6g}",
        threshold_split=_threshold_split(tsum),
        calib_subset_f1=_fmt(meta.calib_subset_f1),
        k_max=str(selector_config.k_max),
        min_select=str(selector_config.min_select),
        metrics_lines="\n".join(_metrics_lines(meta, tsum, run_dir)),
        install_line=install,
        plain_usage=_render_template(usage, {"base_model": base}).rstrip("\n"),
    )
    return _render_template("model_card.md", dataclasses.asdict(values))
