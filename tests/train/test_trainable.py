"""student.freeze_embeddings and student.cl_weight: what the train stage trains, and with which loss."""

from __future__ import annotations

import json

import pytest
import torch

from purecover.demo.tiny import tiny_causal_lm
from purecover.train.train_stage import freeze_embeddings


def _trained(tmp_path, *overrides: str):
    """(tiny model, run dir, recipe, train summary): two full-weight steps on a labelled demo run, logged every step."""
    from purecover.config import load_recipe
    from purecover.train.train_stage import run_train_stage
    from tests.train.helpers import labelled_overrides, labelled_run

    tiny, run = labelled_run(tmp_path)
    recipe = load_recipe(None, [
        f"run_dir={run}", *labelled_overrides(tiny), f"student.model={tiny}", "student.lora.enabled=false",
        "student.dtype=float32", "student.training.max_steps=2", "student.training.logging_steps=1",
        "student.training.save_steps=1000", *overrides])
    return tiny, run, recipe, run_train_stage(recipe, show_progress=False)


@pytest.mark.parametrize("tied", [True, False])
def test_freeze_embeddings_keeps_only_the_token_tables_fixed(tied):
    model = tiny_causal_lm("qwen2", 64, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                           num_kv_heads=1, seed=0, tie_word_embeddings=tied)
    frozen = freeze_embeddings(model)
    assert not model.get_input_embeddings().weight.requires_grad
    assert not model.get_output_embeddings().weight.requires_grad
    assert frozen == 64 * 16 * (1 if tied else 2)  # a tied table is counted once
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and not any("embed_tokens" in n or "lm_head" in n for n in trainable)
    assert freeze_embeddings(model) == 0  # idempotent


def test_train_stage_with_frozen_embeddings_and_no_contrastive_term(tmp_path):
    """The stage trains every weight but the embedding, and cl_weight=0 trains on L_LM alone (recorded)."""
    from safetensors.torch import load_file

    tiny, run, recipe, summary = _trained(tmp_path, "student.freeze_embeddings=true", "student.cl_weight=0",
                                          "student.training.learning_rate=0.01", "student.eval_fraction=0.0")
    before, after = load_file(tiny / "model.safetensors"), load_file(run / "checkpoints" / "final" / "model.safetensors")
    emb = next(k for k in before if k.endswith("embed_tokens.weight"))
    assert torch.equal(before[emb], after[emb])
    changed = [k for k in before if k != emb and not torch.equal(before[k], after[k])]
    assert changed, "no other weight was trained"
    meta = json.loads((run / "checkpoints" / "final" / "purecover_student.json").read_text())
    assert meta["losses"]["cl_weight"] == 0.0
    logged = [h for h in meta["log_history"] if "loss" in h and "l_lm" in h]
    assert logged and all(h["loss"] == pytest.approx(recipe.student.lm_weight * h["l_lm"], rel=1e-4) for h in logged)
    assert summary.global_step == 2


def test_both_loss_weights_zero_is_a_recipe_error():
    from purecover.config import ConfigError, load_recipe

    with pytest.raises(ConfigError, match="cl_weight"):
        load_recipe(None, ["student.cl_weight=0", "student.lm_weight=0"])


def test_trainer_log_carries_the_test_split_figure_and_the_card_names_each_split(tmp_path):
    """Issue 13: the test-split subset F1 is in the Trainer's own log (a ``test_*`` record, for wandb's test/
    panel) and equals the summary's; the card's training lines give the whole-run loss and name the eval_*
    records as the calibration split's."""
    from purecover.train.model_card import _training_log_lines

    _, run, _, summary = _trained(tmp_path, "student.training.eval_strategy=steps", "student.training.eval_steps=1",
                                  "student.eval_fraction=0.75", "student.calibration_share=0.5")
    assert summary.calib_questions > 0 and summary.test_questions > 0
    meta = json.loads((run / "checkpoints" / "final" / "purecover_student.json").read_text())
    tests = [h for h in meta["log_history"] if any(k.startswith("test_") for k in h)]
    assert len(tests) == 1 and tests[0]["test_subset_f1"] == summary.test_subset_f1
    assert tests[0]["test_questions"] == summary.test_questions
    assert not any(k in tests[0] for k in ("loss", "l_cl", "eval_loss"))  # no training/eval figure mixed in
    evals = [h for h in meta["log_history"] if "eval_subset_f1@size" in h]
    assert len(evals) == 2  # eval_steps=1 over 2 steps, on the calibration split
    lines = _training_log_lines(meta["log_history"], summary)
    assert lines[0] == f"- Training loss: {summary.train_loss:.4g} (mean over 2 steps)"
    assert lines[1].startswith("- Last logged training step 2: loss = ")
    assert lines[2].startswith(f"- Last evaluation (step 2) on the {summary.calib_questions} calibration questions")
