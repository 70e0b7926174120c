"""Export: merged safetensors that load without peft and reproduce the trained model, the selector config,
the model card, the unmerged-adapter variant and the atomic replacement of an old export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from purecover.train import export_stage as export_mod
from purecover.train.export_stage import export_selector, run_export_stage
from tests.models.conftest import exported_run, trained_run

CONFIG_KEYS = {"base_model", "identifiers", "prompt_template", "k1", "tau3", "k_max", "min_select",
               "purecover_version", "max_passage_tokens", "tau3_logprob"}


@pytest.fixture(scope="module")
def lora_recipe(tmp_path_factory, sample_dir):
    return trained_run(tmp_path_factory, sample_dir, lora=True)


@pytest.fixture(scope="module")
def merged_dir(lora_recipe, tmp_path_factory) -> Path:
    return export_selector(lora_recipe.run_path / "checkpoints" / "final", tmp_path_factory.mktemp("exp") / "sel")


def _prompt_ids(ckpt: Path) -> torch.Tensor:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    return torch.tensor([tok("Question: which river?\nA: Tollbridge\nB: Corven\n", add_special_tokens=False)["input_ids"]])


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.float()


def test_merged_export_loads_without_peft_and_matches_trained_model(lora_recipe, merged_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ckpt = lora_recipe.run_path / "checkpoints" / "final"
    names = {p.name for p in merged_dir.iterdir()}
    assert not any(n.startswith("adapter_") for n in names)
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)
    assert any(n.endswith(".safetensors") for n in names)
    assert {"config.json", "tokenizer.json", "selector_config.json", "README.md"} <= names
    config_text = (merged_dir / "config.json").read_text()
    assert "peft" not in config_text.lower()
    assert json.loads(config_text)["architectures"] == ["Qwen2ForCausalLM"]

    exported = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    meta = json.loads((ckpt / "purecover_student.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(meta["base_model"], dtype=torch.float32)
    trained = PeftModel.from_pretrained(base, ckpt).eval()
    ids = _prompt_ids(ckpt)
    want = _logits(trained, ids)
    got = _logits(exported, ids)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # The adapter changed the model, so the comparison is not trivially base == base.
    with trained.disable_adapter():
        assert not torch.allclose(_logits(trained, ids), want, atol=1e-5)


def test_selector_config_and_model_card(lora_recipe, merged_dir):
    import purecover

    config = json.loads((merged_dir / "selector_config.json").read_text())
    meta = json.loads((lora_recipe.run_path / "checkpoints" / "final" / "purecover_student.json").read_text())
    assert set(config) == CONFIG_KEYS
    assert config["base_model"] == lora_recipe.student.model
    assert config["k1"] == 6 and config["tau3"] == pytest.approx(meta["tau3"])
    assert "readout" not in config  # the paper's identifier readout: left out, as in files written before the key
    assert config["k_max"] == meta["k_max"] and config["min_select"] == meta["min_select"]
    assert config["max_passage_tokens"] == lora_recipe.student.max_passage_tokens
    assert config["identifiers"]["labels"][:3] == ["A", "B", "C"]
    assert config["purecover_version"] == purecover.__version__
    card = (merged_dir / "README.md").read_text()
    assert lora_recipe.student.model in card
    assert "τ3" in card and f"{config['tau3']:.6g}" in card
    assert "subset F1" in card and "Selector.from_pretrained" in card and "AutoModelForCausalLM" in card
    assert "Dataset: hotpotqa" in card  # read from the run's data.run.json
    # the LM-loss normalisation is recorded (the default, student.lm_reduction: token_mean) and stated in the card
    summary = json.loads((lora_recipe.run_path / "train.run.json").read_text())["summary"]
    assert meta["losses"]["lm_reduction"] == summary["lm_reduction"] == lora_recipe.student.lm_reduction == "token_mean"
    assert "L_LM per question: the mean token NLL of the reply" in card


def test_model_card_snippet_reproduces_selector(merged_dir):
    """The plain-transformers code in the model card gives the Selector's logits and selection."""
    from purecover.models.selector import HFSelectorBackend, Selector

    card = (merged_dir / "README.md").read_text()
    section = card.split("With plain transformers", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"path/to/this/directory"', repr(str(merged_dir)))
    question = "Which river flows through the town where Ada Brill was born?"
    docs = [{"title": "Ada Brill", "text": "Ada Brill was born in Tollbridge."},
            {"title": "Tollbridge", "text": "The river Mirren flows through Tollbridge."},
            {"title": "Corven", "text": "Corven is a fishing village."}]
    scope = {"question": question, "docs": docs}
    exec(compile(code, "model-card", "exec"), scope)
    # The Selector over the snippet's own tokenizer and model (nothing loaded twice).
    result = Selector(scope["tok"], scope["cfg"], HFSelectorBackend(scope["model"])).select(question, docs)
    np.testing.assert_allclose(scope["s"].tolist(), result.logits, atol=1e-5, rtol=0)
    assert scope["keep"] == result.indices


def test_unmerged_adapter_export(lora_recipe, merged_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from purecover.models.selector import HFSelectorBackend, Selector

    out = export_selector(lora_recipe.run_path / "checkpoints" / "final", tmp_path / "adapter", merge=False)
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "selector_config.json", "README.md"} <= names
    assert "model.safetensors" not in names and "training_args.bin" not in names
    config = json.loads((out / "selector_config.json").read_text())
    assert config["adapter"] is True and set(config) == CONFIG_KEYS | {"adapter"}
    assert "PeftModel.from_pretrained" in (out / "README.md").read_text()
    docs = ["Ada Brill was born in Tollbridge.", "The river Mirren flows through Tollbridge."]
    adapter_selector = Selector.from_pretrained(out, device="cpu", dtype="float32")  # base + adapter
    a = adapter_selector.select("Which river?", docs)
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    m = Selector(adapter_selector.tokenizer, json.loads((merged_dir / "selector_config.json").read_text()),
                 HFSelectorBackend(merged)).select("Which river?", docs)
    np.testing.assert_allclose(a.logits, m.logits, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="merged export"):
        Selector.from_pretrained(out, backend="vllm")


def test_atomic_replace_keeps_one_complete_export(lora_recipe, merged_dir, tmp_path, monkeypatch):
    import shutil

    ckpt = lora_recipe.run_path / "checkpoints" / "final"
    out = tmp_path / "sel"
    shutil.copytree(merged_dir, out)  # an existing (merged) export
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken_card(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export_mod, "render_model_card", broken_card)
    with pytest.raises(RuntimeError, match="disk full"):
        export_selector(ckpt, out, merge=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # old export untouched
    assert [p.name for p in tmp_path.iterdir()] == ["sel"]  # no temporary directory left
    monkeypatch.undo()

    export_selector(ckpt, out, merge=False)  # replace the merged export with an adapter export
    names = {p.name for p in out.iterdir()}
    assert "adapter_config.json" in names and "model.safetensors" not in names  # old files gone
    assert json.loads((out / "selector_config.json").read_text())["adapter"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["sel"]


def test_full_model_checkpoint_is_copied(lora_recipe, merged_dir, tmp_path):
    """A checkpoint holding a whole model (student.lora.enabled=false) is re-saved as sharded safetensors.

    The checkpoint is laid out as the train stage writes it (model + tokenizer + purecover_student.json +
    the Trainer's pickled training_args.bin, which must not be exported); its weights are the merged model.
    """
    import shutil

    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "checkpoints" / "final"
    shutil.copytree(merged_dir, ckpt, ignore=shutil.ignore_patterns("selector_config.json", "README.md"))
    meta = json.loads((lora_recipe.run_path / "checkpoints" / "final" / "purecover_student.json").read_text())
    (ckpt / "purecover_student.json").write_text(json.dumps({**meta, "lora": None}))
    (ckpt / "training_args.bin").write_bytes(b"pickle")
    out = export_selector(ckpt, tmp_path / "sel", max_shard_size="1MB")
    names = sorted(p.name for p in out.iterdir())
    assert len([n for n in names if n.endswith(".safetensors")]) > 1 and "model.safetensors.index.json" in names
    assert "training_args.bin" not in names and not any(n.startswith("adapter_") for n in names)
    card = (out / "README.md").read_text()
    assert "fully fine-tuned" in card and "LoRA:" not in card
    ids = _prompt_ids(ckpt)
    trained = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(exported, ids), _logits(trained, ids), atol=1e-5, rtol=0)


def test_run_export_stage_writes_selector_and_manifest(tmp_path_factory, sample_dir):
    recipe = exported_run(tmp_path_factory, sample_dir)
    out = recipe.run_path / "selector"
    assert (out / "selector_config.json").is_file()
    manifest = json.loads((recipe.run_path / "export.run.json").read_text())
    assert manifest["stage"] == "export"
    assert manifest["summary"]["format"] == "merged" and manifest["summary"]["selector"] == str(out)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from purecover.config import load_recipe

    recipe = load_recipe(None, [f"run_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="purecover train"):
        run_export_stage(recipe)


def _student_meta(**changes) -> dict:
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector_prompt import prompt_template

    meta = {"base_model": "org/base", "lora": None, "identifiers": IdentifierScheme().to_dict(), "k1": 6, "tau3": 0.5,
            "tau3_logprob": -1.25, "k_max": 3, "min_select": 1, "max_passage_tokens": 40,
            "prompt_template": prompt_template()}
    return {**meta, **changes}


@pytest.mark.parametrize(("changes", "message"), [
    ({"tau3": "x"}, "field tau3: must be a number (got 'x')"),
    ({"tau3_logprob": True}, "field tau3_logprob: must be a number (got True)"),
    ({"k1": None}, "field k1: "),
    ({"identifiers": {"name": "letters"}}, "field identifiers.separator: missing"),
])
def test_bad_student_metadata_names_the_file_and_field(tmp_path, changes, message):
    meta = _student_meta(**changes)
    (tmp_path / "purecover_student.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError) as exc:
        export_mod.read_student_meta(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'purecover_student.json'}: {message}"), str(exc.value)
    assert "retrain" in str(exc.value)


def test_student_metadata_of_an_early_version_still_reads(tmp_path):
    """Without tau3_logprob, the subset F1s, losses, log history, config hash or summary (early checkpoints)."""
    (tmp_path / "purecover_student.json").write_text(json.dumps(_student_meta(tau3_logprob=None)))
    meta = export_mod.read_student_meta(tmp_path)
    assert (meta.tau3_logprob, meta.losses, meta.log_history, meta.summary) == (None, None, [], None)


def test_student_metadata_reads_back_byte_for_byte(lora_recipe):
    from purecover.records import StudentMeta, TrainSummary

    text = (lora_recipe.run_path / "checkpoints" / "final" / "purecover_student.json").read_text()
    meta = StudentMeta.model_validate(json.loads(text))
    assert isinstance(meta.summary, TrainSummary) and meta.summary.status == "complete"
    assert json.dumps(meta.to_json_dict(), ensure_ascii=False, indent=2) + "\n" == text


def test_the_train_export_and_publish_records_describe_every_field():
    from purecover.records import DatasetCardFront, ExportSummary, ModelCardFront, PublishMarker, StudentMeta
    from tests.test_records import _nested_models

    for record in (StudentMeta, ExportSummary, ModelCardFront, DatasetCardFront, PublishMarker):
        for model in _nested_models(record):
            for name, field in model.model_fields.items():
                assert field.description and len(field.description) > 10, f"{model.__name__}.{name}"
