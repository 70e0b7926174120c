"""The exported selector's model card (README.md), rendered from train/templates/model_card.md: every value
lands on its line, optional lines come and go with their inputs, and the templates ship with the package."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from purecover.train import export as export_mod
from purecover.train.export import _model_card

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = Path(export_mod.__file__).parent / "templates"

IDS = {"name": "letters", "labels": [chr(65 + i) for i in range(26)], "separator": ": "}
LORA = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
META = {"lora": LORA, "losses": {"lm_weight": 0.5, "m_exact": 4}, "heldout_subset_f1": 0.812345,
        "log_history": [{"loss": 1.5, "step": 10}, {"loss": 0.75, "l_cl": 0.5, "l_lm": 0.25, "step": 20},
                        {"eval_loss": 0.9, "eval_subset_f1": 0.7, "step": 20}, {"train_loss": 1.0, "step": 20}]}
DATA_RUN = {"recipe": {"data": {"dataset": "hotpotqa", "path": "demo", "split": "validation", "limit": 8, "k1": 6,
                                "retriever": "bm25", "corpus": "distractor"}},
            "summary": {"questions": 8, "supporting_recall@6": 0.9375}}
LABEL_RUN = {"recipe": {"teacher": {"model": "org/teacher", "steps": "oracle", "estimator": "attention",
                                    "calibrate": False, "lam": 0.1, "budget": 3}},
             "summary": {"ok": 7, "fallback": 1, "error": 0}}
TRAIN_RUN = {"summary": {"train_questions": 6, "heldout_questions": 2, "threshold_split": "train labels"}}
HEADINGS = ["# purecover selector", "## Model", "## Training data", "## Training and calibration", "## Usage"]


def _config(adapter: bool = False, k1: int = 6) -> dict:
    config = {"base_model": "org/base-0.5B", "identifiers": IDS,
              "prompt_template": {"layout": "question_first", "hash": "abc123", "system": "S", "instructions": "I"},
              "k1": k1, "tau3": 1.23456789, "k_max": 4, "min_select": 1, "purecover_version": "0.1.0",
              "max_passage_tokens": 256}
    if adapter:
        config["adapter"] = True
    return config


def _run_dir(root: Path, **manifests) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for stage, obj in manifests.items():
        (root / f"{stage}.run.json").write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return root


def _section(card: str, heading: str) -> list[str]:
    """The lines of a `## heading` section, without the heading and the surrounding blank lines."""
    body = card.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return body.strip("\n").split("\n")


def _code_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, re.S)


def _check_shape(card: str) -> None:
    assert "$" not in card  # every placeholder filled
    assert card.endswith("```\n") and not card.endswith("\n\n")
    assert "\n\n\n" not in card  # an optional line that is left out leaves no blank line behind
    assert [line for line in card.split("\n") if line.startswith("#")] == HEADINGS


def test_card_with_every_input(tmp_path):
    config = _config()
    card = _model_card(config, META, _run_dir(tmp_path, data=DATA_RUN, label=LABEL_RUN, train=TRAIN_RUN), True)
    _check_shape(card)
    assert card.startswith("---\nlibrary_name: transformers\n"
                           "tags: [purecover, retrieval-augmented-generation, document-selection, reranking]\n---\n")
    assert (f"trained with [purecover](https://github.com/) {config['purecover_version']}. Given a question and up "
            f"to K1 = {config['k1']} retrieved candidates") in card
    assert _section(card, "## Model") == [
        f"- Base model: `{config['base_model']}`",
        "- Weights: LoRA adapter merged into the base model (safetensors)",
        f"- LoRA: r = {LORA['r']}, alpha = {LORA['alpha']}, dropout = {LORA['dropout']}, "
        f"target modules = {LORA['target_modules']}",
        f"- Identifiers: scheme `{IDS['name']}` ({', '.join(IDS['labels'][:5])}, ...), separator {IDS['separator']!r}",
        f"- Prompt template: `{config['prompt_template']['layout']}` (hash `{config['prompt_template']['hash']}`)",
        f"- Passages cut to {config['max_passage_tokens']} tokens",
    ]
    d, s = DATA_RUN["recipe"]["data"], DATA_RUN["summary"]
    t, ls = LABEL_RUN["recipe"]["teacher"], LABEL_RUN["summary"]
    assert _section(card, "## Training data") == [
        f"- Dataset: {d['dataset']} (`{d['path']}`, split {d['split']}, limit {d['limit']})",
        f"- Candidates: top-{d['k1']} by {d['retriever']} over the {d['corpus']} corpus; {s['questions']} questions",
        f"- Supporting-paragraph recall of the candidates: {s['supporting_recall@6']}",
        f"- Teacher: `{t['model']}`, steps = {t['steps']}, estimator = {t['estimator']}, calibration = "
        f"{t['calibrate']}, λ = {t['lam']}, budget K = {t['budget']}",
        f"- Labels: {ls['ok']} ok, {ls['fallback']} fallback, {ls['error']} error",
    ]
    ts = TRAIN_RUN["summary"]
    assert _section(card, "## Training and calibration") == [
        f"- Loss: L = L_CL + {META['losses']['lm_weight']} · L_LM (permutation-invariant LM loss, exact over "
        f"orderings for |S| ≤ {META['losses']['m_exact']})",
        # the last value of each loss, in order of first appearance; floats with 4 significant digits
        "- Last logged: loss = 0.75, step = 20, l_cl = 0.5, l_lm = 0.25, eval_loss = 0.9, eval_subset_f1 = 0.7, "
        "train_loss = 1",
        f"- Questions: {ts['train_questions']} train, {ts['heldout_questions']} held out",
        f"- Threshold τ3 = {config['tau3']:.6g}, calibrated on {ts['threshold_split']}: subset F1 against the "
        f"teacher = {META['heldout_subset_f1']:.4g}",
        f"- Inference rule: keep {{k : s_k > τ3}}, best first, at most k_max = {config['k_max']}, "
        f"at least min_select = {config['min_select']}",
    ]
    usage = _section(card, "## Usage")
    assert usage[0] == "With purecover (`pip install purecover`):"
    purecover_code, plain_code = _code_blocks(card)
    assert purecover_code.startswith("from purecover.models.selector import Selector\n")
    assert 'Selector.from_pretrained("path/to/this/directory")' in purecover_code
    assert "\nWith plain transformers (the prompt layout spelled out; `docs` are dicts with title and text, each " \
           "cut to `max_passage_tokens` tokens):\n\n```python\nimport json\n" in card
    # the snippet's code is the template's, character for character (test_export runs it against the Selector)
    assert "passages = \"\\n\".join(f\"{l}: {d['title']}\\n{d['text']}\" for l, d in zip(labels, docs))\n" \
        in plain_code
    assert plain_code.endswith("keep = keep[: cfg[\"k_max\"]] or [int(s.argmax())]    "
                               "# at most k_max, at least min_select (= 1)\n")
    assert "peft" not in card


def test_adapter_card_without_run_dir():
    config = _config(adapter=True)
    card = _model_card(config, META, None, False)
    _check_shape(card)
    assert card.startswith("---\nlibrary_name: peft\n")
    model = _section(card, "## Model")
    assert model[1] == "- Weights: LoRA adapter, **not merged**: load it on the base model (see below)"
    assert model[2].startswith("- LoRA: r = 8,")
    assert _section(card, "## Training data") == ["- (no data.run.json found next to the checkpoint)",
                                                  "- (no label.run.json found next to the checkpoint)"]
    calibration = _section(card, "## Training and calibration")
    assert calibration[1].startswith("- Last logged: ") and not calibration[2].startswith("- Questions")
    assert "calibrated on held-out labels:" in calibration[2]
    assert card.endswith(
        "With plain transformers + peft (the adapter must be loaded on the base model):\n\n```python\n"
        "from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'base = AutoModelForCausalLM.from_pretrained("{config["base_model"]}")\n'
        'model = PeftModel.from_pretrained(base, "path/to/this/directory").merge_and_unload()\n'
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")\n```\n')
    assert len(_code_blocks(card)) == 2


def test_optional_lines_are_left_out(tmp_path):
    """No LoRA, no log history, empty manifests, an unreadable label manifest: those lines go, n/a for no F1."""
    config = _config(k1=3)
    run = _run_dir(tmp_path, data={"recipe": {}, "summary": {}}, label="{not json", train={"summary": {}})
    card = _model_card(config, {"losses": {}}, run, False)
    _check_shape(card)
    model = _section(card, "## Model")
    assert model[1] == "- Weights: fully fine-tuned model (safetensors)"
    assert model[2] == "- Identifiers: scheme `letters` (A, B, C, ...), separator ': '"  # k1 = 3 labels shown
    assert len(model) == 5
    assert _section(card, "## Training data") == [
        "- Dataset: None (`None`, split None, limit None)",
        "- Candidates: top-None by None over the None corpus; None questions",
        "- (no label.run.json found next to the checkpoint)",
    ]
    assert _section(card, "## Training and calibration") == [
        "- Loss: L = L_CL + None · L_LM (permutation-invariant LM loss, exact over orderings for |S| ≤ None)",
        f"- Threshold τ3 = {config['tau3']:.6g}, calibrated on held-out labels: subset F1 against the teacher = n/a",
        "- Inference rule: keep {k : s_k > τ3}, best first, at most k_max = 4, at least min_select = 1",
    ]


def test_render_template_fills_every_field():
    text = export_mod._render_template("model_card_usage_adapter.md", {"base_model": "a/b"})
    assert 'from_pretrained("a/b")' in text and "$" not in text
    with pytest.raises(KeyError):
        export_mod._render_template("model_card_usage_adapter.md", {})


def test_templates_ship_as_package_data():
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["purecover"]
    package = TEMPLATES.parents[1]  # purecover/
    templates = sorted(TEMPLATES.glob("*.md"))
    assert {p.name for p in templates} >= {"model_card.md", "model_card_usage_adapter.md",
                                           "model_card_usage_transformers.md"}
    for path in templates:
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in patterns), f"{rel} is not package data"
