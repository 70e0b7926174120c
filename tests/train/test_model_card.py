"""The exported selector's model card (README.md), rendered from train/templates/model_card.md: every value
lands on its line, optional lines come and go with their inputs, and the templates ship with the package."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from purecover.records import SelectorConfig, StudentMeta
from purecover.train import model_card as card_mod
from purecover.train.model_card import render_model_card as _render

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = Path(card_mod.__file__).parent / "templates"

IDS = {"name": "letters", "labels": [chr(65 + i) for i in range(26)], "separator": ": "}
LORA = {"enabled": True, "r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
META = {"base_model": "org/base-0.5B", "lora": LORA, "identifiers": IDS, "k1": 6, "tau3": 1.23456789,
        "calib_subset_f1": 0.812345, "test_subset_f1": 0.6875, "k_max": 4, "min_select": 1, "max_passage_tokens": 256,
        "prompt_template": {"layout": "question_first", "hash": "abc123", "system": "S", "instructions": "I"},
        "losses": {"lm_weight": 0.5, "cl_weight": 1.0, "m_exact": 4, "lm_reduction": "token_mean"},
        "log_history": [{"loss": 1.5, "step": 10}, {"loss": 0.75, "l_cl": 0.5, "l_lm": 0.25, "step": 20},
                        {"eval_loss": 0.9, "eval_subset_f1@size": 0.7, "step": 20}, {"train_loss": 1.0, "step": 20},
                        {"test_subset_f1": 0.6875, "step": 20}]}
DATA_RUN = {"recipe": {"data": {"dataset": "hotpotqa", "path": "demo", "split": "validation", "limit": 8, "k1": 6,
                                "retriever": "bm25", "corpus": "distractor"}},
            "summary": {"questions": 8, "supporting_recall@6": 0.9375}}
LABEL_RUN = {"recipe": {"teacher": {"model": "org/teacher", "steps": "oracle", "estimator": "embedding",
                                    "calibrate": True, "lam": None, "budget": 3}},
             # what the stage applied: no calibration for an embedding estimator, the signal's default λ
             "summary": {"ok": 7, "fallback": 1, "error": 0,
                         "estimation": {"e_source": "embedding", "w_source": "embedding", "lam": 0.1,
                                        "calibrate": False, "budget": 3}}}
TRAIN_RUN = {"summary": {"status": "complete", "train_questions": 6, "calib_questions": 2, "test_questions": 2,
                         "labels": 10, "used": 10, "skipped_error": 0, "global_step": 20, "lm_reduction": "token_mean",
                         "train_loss": 1.125, "train_loss_steps": 20, "train_loss_this_run": 1.0, "resumes": [10],
                         "resumed_from": "checkpoint-10", "tau3": 1.234568, "tau3_logprob": -1.5,
                         "calib_subset_f1": 0.8123, "calib_subset_f1_logprob": 0.8, "test_subset_f1": 0.6875,
                         "test_subset_f1_logprob": 0.6, "threshold_split": "calib", "final": "checkpoints/final"}}
HEADINGS = ["# purecover selector", "## Model", "## Training data", "## Training recipe", "## Training and calibration",
            "## Evaluation", "## Usage"]


def _config(adapter: bool = False, k1: int = 6) -> dict:
    config = {"base_model": "org/base-0.5B", "identifiers": IDS,
              "prompt_template": {"layout": "question_first", "hash": "abc123", "system": "S", "instructions": "I"},
              "k1": k1, "tau3": 1.23456789, "k_max": 4, "min_select": 1, "purecover_version": "0.1.0",
              "max_passage_tokens": 256}
    if adapter:
        config["adapter"] = True
    return config


def render_model_card(config: dict, meta: dict, run_dir, merged, license=None) -> str:
    """The card of a selector_config.json and a student metadata file with these contents."""
    return _render(SelectorConfig.model_validate(config), StudentMeta.model_validate(meta), run_dir, merged,
                   license=license)


def _budget(em: float, f1: float, acc: float, mean_k: float) -> dict:
    """One method at one budget, as metrics.json holds it."""
    cp = {"coverage": None, "purity": None, "n_coverage": 0, "n_purity": 0}
    return {"n": 2, "em": em, "f1": f1, "acc": acc, "mean_k": mean_k, "answer": cp,
            "supporting": cp, "prompt_tokens": 100.0, "completion_tokens": 3.0}


def _metrics(**results) -> dict:
    """An eval/metrics.json at budgets 1 and 3 (table budget 3) with `results`."""
    return {"dataset": "hotpotqa", "run_dir": "run", "questions": 2, "question_source": "the held-out split",
            "generator": "org/gen", "backend": "hf", "max_new_tokens": 32, "budgets": [1, 3], "table_budget": 3,
            "methods": {name: name for name in results}, "fallbacks": {}, "results": results,
            "versions": {"python": "3"}, "recipe": {}}


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


def _front(card: str) -> dict:
    import yaml

    assert card.startswith("---\n")
    return yaml.safe_load(card[4:card.index("\n---\n", 4)])


def test_card_with_every_input(tmp_path):
    config = _config()
    data_run = {**DATA_RUN, "recipe": {"data": {**DATA_RUN["recipe"]["data"], "path": "hotpotqa/hotpot_qa"}}}
    train_run = {**TRAIN_RUN, "recipe": {"student": {"model": "org/base-0.5B", "lm_weight": 0.5}}}
    run = _run_dir(tmp_path, data=data_run, label=LABEL_RUN, train=train_run)
    (run / "eval").mkdir()
    (run / "eval" / "metrics.json").write_text(json.dumps(_metrics(
        student={"3": _budget(0.5, 0.625, 1.0, 2.0)}, retrieval={"3": _budget(0.0, 0.25, 0.5, 3.0)})))
    card = render_model_card(config, META, run, True, license="apache-2.0")
    _check_shape(card)
    front = _front(card)
    assert front["base_model"] == config["base_model"] and front["library_name"] == "transformers"
    assert front["license"] == "apache-2.0" and front["datasets"] == ["hotpotqa/hotpot_qa"]
    assert {"purecover", "reranking", "rag", "hotpotqa"} <= set(front["tags"])
    assert front["pipeline_tag"] == "text-generation"
    assert "https://github.com/)" not in card and "pip install purecover" not in card  # no placeholder, no PyPI
    assert "not on PyPI: install it from its source" in card
    assert _section(card, "## Model")[0] == f"- Base model: `{config['base_model']}`"
    assert "- License: apache-2.0 (set by the recipe, export.license)" in _section(card, "## Model")
    d, s = data_run["recipe"]["data"], DATA_RUN["summary"]
    t, ls = LABEL_RUN["recipe"]["teacher"], LABEL_RUN["summary"]
    assert _section(card, "## Training data") == [
        f"- Dataset: {d['dataset']} (`{d['path']}`, split {d['split']}, limit {d['limit']})",
        f"- Candidates: top-{d['k1']} by {d['retriever']} over the {d['corpus']} corpus; {s['questions']} questions",
        f"- Supporting-paragraph recall of the candidates: {s['supporting_recall@6']}",
        f"- Teacher: `{t['model']}`, steps = {t['steps']}, estimator = {t['estimator']}, calibration = "
        "False, λ = 0.1, budget K = 3",
        f"- Labels: {ls['ok']} ok, {ls['fallback']} fallback, {ls['error']} error",
    ]
    import yaml

    recipe = yaml.safe_load(card.split("## Training recipe", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0])
    assert recipe == {"student": train_run["recipe"]["student"], "teacher": t}
    ts = TRAIN_RUN["summary"]
    assert _section(card, "## Training and calibration") == [
        f"- Loss: L = L_CL + {META['losses']['lm_weight']} · L_LM (permutation-invariant LM loss, exact over "
        f"orderings for |S| ≤ {META['losses']['m_exact']}; L_LM per question: the mean token NLL of the reply)",
        # the whole-run loss of the summary (not the Trainer's train_loss = 1 of the resumed call), then the last
        # training record, then the last evaluation, named as the calibration split's
        "- Training loss: 1.125 (mean over 20 steps, resumed at step 10)",
        "- Last logged training step 20: loss = 0.75, l_cl = 0.5, l_lm = 0.25",
        "- Last evaluation (step 20) on the 2 calibration questions (early stopping; τ3 is chosen there too): "
        "eval_loss = 0.9, eval_subset_f1@size = 0.7",
        f"- Threshold τ3 = {config['tau3']:.6g}, calibrated on the {ts['calib_questions']} calibration questions: "
        "subset F1 against the "
        f"teacher there = {META['calib_subset_f1']:.4g} (in-sample; the test figure is under Evaluation)",
        f"- Inference rule: keep {{k : s_k > τ3}}, best first, at most k_max = {config['k_max']}, "
        f"at least min_select = {config['min_select']}",
    ]
    evaluation = _section(card, "## Evaluation")
    assert evaluation[0] == (f"- Subset F1 against the teacher's labels: {META['test_subset_f1']:.4g}, on the 2 test "
                             "questions (used for neither training nor τ3; τ3 chosen on the 2 calibration questions)")
    assert evaluation[1] == "- Questions: 6 train, 2 calibration, 2 test"
    assert "End-to-end QA (run_dir/eval/metrics.json) at budget K = 3: 2 questions" in evaluation[3]
    assert "| student | 50.00 | 62.50 | 100.00 | 2 |" in evaluation
    assert "| retrieval | 0.00 | 25.00 | 50.00 | 3 |" in evaluation
    purecover_code, plain_code = _code_blocks(card)
    assert purecover_code.startswith("from purecover.models.selector import Selector\n")
    assert "def passage(doc):" in plain_code and "peft" not in card


def test_licence_falls_back_to_the_base_model_then_other(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: other\nlicense_name: qwen\nlicense_link: https://x/LICENSE\n---\n"
                                    "# base\n")
    config = {**_config(), "base_model": str(base)}
    front = _front(render_model_card(config, META, None, True))
    assert (front["license"], front["license_name"], front["license_link"]) == ("other", "qwen", "https://x/LICENSE")
    card = render_model_card(_config(), META, None, True)  # org/base-0.5B: no local card, not cached
    assert _front(card)["license"] == "other" and "datasets" not in _front(card)
    assert "- License: not determined: export.license is not set" in card


def test_adapter_card_without_run_dir():
    config = _config(adapter=True)
    card = render_model_card(config, META, None, False)
    _check_shape(card)
    assert _front(card)["library_name"] == "peft"
    model = _section(card, "## Model")
    assert model[1] == "- Weights: LoRA adapter, **not merged**: load it on the base model (see below)"
    assert model[2].startswith("- LoRA: r = 8,")
    assert _section(card, "## Training data") == ["- (no data.run.json found next to the checkpoint)",
                                                  "- (no label.run.json found next to the checkpoint)"]
    assert "- End-to-end QA: not measured when this card was written (no run_dir/eval/metrics.json)" in \
        _section(card, "## Evaluation")
    assert card.endswith(
        "With plain transformers + peft (the adapter must be loaded on the base model):\n\n```python\n"
        "from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'base = AutoModelForCausalLM.from_pretrained("{config["base_model"]}")\n'
        'model = PeftModel.from_pretrained(base, "path/to/this/directory").merge_and_unload()\n'
        'tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")\n```\n')
    assert len(_code_blocks(card)) == 2


@pytest.mark.parametrize("readout", ["identifier", "passage", "passage+head"])
def test_card_snippet_reproduces_selector_exactly(tmp_path, sample_dir, readout):
    """The card's plain-transformers code, run on a tiny selector, gives Selector.select's logits (1e-6) and
    selection, for titled, title-less and over-long passages (cut to max_passage_tokens), for either readout and
    for the passage readout scored by a head (score_head.safetensors)."""
    import numpy as np

    from purecover.demo.tiny import build_tiny_model
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector import Selector
    from purecover.models.selector_prompt import prompt_template

    tok_dir = sample_dir / "qwen2_tokenizer"
    if not tok_dir.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {tok_dir}")
    sel = build_tiny_model(tmp_path / "sel", tok_dir, "qwen2", seed=3)
    scheme = IdentifierScheme.from_dict({**IDS, "separator": "\n"})
    head = readout == "passage+head"
    readout = "passage" if head else readout
    config = {"base_model": "org/base", "identifiers": scheme.to_dict(),
              "prompt_template": prompt_template(readout=readout), "k1": 6, "tau3": -1e9, "k_max": 2, "min_select": 1,
              "purecover_version": "0.1.0", "max_passage_tokens": 12, "readout": readout,
              **({"passage_score": "head"} if head else {})}
    if head:
        import torch

        from purecover.models.score_head import ScoreHead

        torch.manual_seed(5)
        ScoreHead(json.loads((sel / "config.json").read_text())["hidden_size"]).save(sel)
    (sel / "selector_config.json").write_text(json.dumps(config))
    card = render_model_card(config, META, None, True)
    assert ("marker after each candidate" in card) == (readout == "passage")
    assert ("score_head.safetensors" in card) == head
    code = _code_blocks(card)[1].replace('"path/to/this/directory"', repr(str(sel)))
    question = "  Which river flows through the town where Ada Brill was born? "
    cases = [
        [{"title": "Ada Brill", "text": "Ada Brill was born in Tollbridge."},
         {"title": "Tollbridge", "text": "The river Mirren flows through Tollbridge."}],
        [{"title": "", "text": "Ada Brill was born in Tollbridge."}, {"text": " The river Mirren. "},
         {"title": None, "text": "Corven is a fishing village on a long and windy coast far in the north."}],
    ]
    for tau3 in (-1e9, 1e9):  # everything above τ3 (k_max cuts), nothing above (min_select keeps one)
        config["tau3"] = tau3
        (sel / "selector_config.json").write_text(json.dumps(config))
        selector = Selector.from_pretrained(sel, device="cpu", dtype="float32")
        for docs in cases:
            scope = {"question": question, "docs": docs}
            exec(compile(code, "model-card", "exec"), scope)
            result = selector.select(question, docs)
            np.testing.assert_allclose(scope["s"].tolist(), result.logits, atol=1e-6, rtol=0)
            assert scope["keep"] == result.indices and len(result.indices) == (2 if tau3 < 0 else 1)


def test_render_template_fills_every_field():
    text = card_mod._render_template("model_card_usage_adapter.md", {"base_model": "a/b"})
    assert 'from_pretrained("a/b")' in text and "$" not in text
    with pytest.raises(KeyError):
        card_mod._render_template("model_card_usage_adapter.md", {})


def test_templates_ship_as_package_data():
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"]["purecover"]
    package = TEMPLATES.parents[1]  # purecover/
    templates = sorted(TEMPLATES.glob("*.md"))
    assert {p.name for p in templates} >= {"model_card.md", "model_card_usage_adapter.md",
                                           "model_card_usage_passage.md", "model_card_usage_passage_head.md",
                                           "model_card_usage_transformers.md"}
    for path in templates:
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in patterns), f"{rel} is not package data"


def test_unreadable_train_summary_and_metrics_are_passed_over(tmp_path, caplog):
    """A train.run.json summary that is not a train summary gives way to the one in the student metadata; a
    metrics.json that is not one leaves the end-to-end figures out (both warned)."""
    run = _run_dir(tmp_path, train={"summary": {"status": "complete", "train_questions": "six"}})
    (run / "eval").mkdir()
    (run / "eval" / "metrics.json").write_text(json.dumps({"budgets": [3], "results": {}}))
    meta = {**META, "summary": {**TRAIN_RUN["summary"], "train_questions": 5}}
    with caplog.at_level("WARNING", logger="purecover.train.model_card"):
        card = render_model_card(_config(), meta, run, True, license="mit")
    _check_shape(card)
    assert "- Questions: 5 train, 2 calibration, 2 test" in _section(card, "## Evaluation")
    assert "- End-to-end QA: not measured when this card was written" in card
    assert "field train_questions: must be an integer" in caplog.text and "metrics.json" in caplog.text
