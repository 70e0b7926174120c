"""teacher.layers resolved from the model config (purecover/teacher/layers.py): full_attention by default, the
reach rule for sliding-window layers, and the layers recorded by the calibrate and label stages."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from purecover.config import load_recipe
from purecover.records import BiasFile, LabelSummary, LayersRead
from purecover.teacher import label_stage
from purecover.teacher.bias_fingerprint import bias_inputs_fingerprint
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.label_stage import LABELS_FILE, run_label_stage
from purecover.teacher.layers import LayerWindowError, load_layer_plan, resolve_layers
from tests.teacher.conftest import GEMMA3_WINDOW, fresh_run, make_recipe

# --------------------------------------------------------------------------- resolution from configs


def test_gemma3_270m_layout_resolves_to_its_three_full_attention_layers():
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(num_hidden_layers=18, sliding_window=512)  # Gemma-3-270M: 5 sliding, 1 full
    plan = resolve_layers(config, "full_attention")
    assert plan.read == (5, 11, 17) and plan.sliding() == [] and plan.model_type == "gemma3_text"
    everything = resolve_layers(config, "all")
    assert everything.read == tuple(range(18))
    assert everything.sliding() == [i for i in range(18) if i not in (5, 11, 17)]
    assert everything.shortest_window() == 512


def test_gemma2_qwen2_mistral_and_llama_configs():
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config

    assert resolve_layers(Gemma2Config(num_hidden_layers=4, sliding_window=64), "full_attention").read == (1, 3)
    qwen = Qwen2Config(num_hidden_layers=4, use_sliding_window=True, sliding_window=8, max_window_layers=2)
    plan = resolve_layers(qwen, "full_attention")
    assert plan.read == (0, 1) and plan.windows == (None, None, 8, 8)
    # Qwen2.5 as published: use_sliding_window false, so no layer slides and full_attention is every layer
    assert resolve_layers(Qwen2Config(num_hidden_layers=4, sliding_window=131072), "full_attention").read == (0, 1, 2, 3)
    assert resolve_layers(LlamaConfig(num_hidden_layers=3), "full_attention").read == (0, 1, 2)
    assert resolve_layers(MistralConfig(num_hidden_layers=2, sliding_window=None), "full_attention").read == (0, 1)
    mistral = MistralConfig(num_hidden_layers=2, sliding_window=4096)  # every layer slides
    assert resolve_layers(mistral, "all").windows == (4096, 4096)
    with pytest.raises(ValueError, match=r"mistral model has no full-attention layer .*teacher\.layers: \[-1\]"):
        resolve_layers(mistral, "full_attention")


def test_config_without_layer_types_uses_use_sliding_window_and_max_window_layers():
    old_qwen2 = SimpleNamespace(model_type="qwen2", num_hidden_layers=4, sliding_window=8, use_sliding_window=True,
                                max_window_layers=3)
    assert resolve_layers(old_qwen2, "full_attention").read == (0, 1, 2)
    assert resolve_layers(SimpleNamespace(**{**vars(old_qwen2), "use_sliding_window": False}), "all").sliding() == []


def test_explicit_indices_and_bad_settings():
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(num_hidden_layers=6, sliding_window=4)
    assert resolve_layers(config, [-1, 0, 0]).read == (0, 5)
    with pytest.raises(ValueError, match=r"teacher\.layers: layer indices \[6\] out of range for a model with 6"):
        resolve_layers(config, [6])
    with pytest.raises(ValueError, match="must be full_attention, all or a list"):
        resolve_layers(config, "full")


def test_reach_rule_refuses_an_explicit_layer_only_when_the_window_is_too_short():
    from transformers import Gemma3TextConfig

    plan = resolve_layers(Gemma3TextConfig(num_hidden_layers=6, sliding_window=512), [0, 5])
    plan.check_reach(511, "question q1")  # the window (512 tokens: itself and 511 before) reaches
    with pytest.raises(LayerWindowError, match=r"layer 0 of gemma3_text is a sliding_attention layer with a window "
                                               r"of 512 tokens, but in question q1 its first reasoning step starts "
                                               r"512 tokens after the first document"):
        plan.check_reach(512, "question q1")
    resolve_layers(Gemma3TextConfig(num_hidden_layers=6, sliding_window=512), "all").check_reach(10_000, "q")


# --------------------------------------------------------------------------- the stages




def labels(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / LABELS_FILE).read_text().splitlines()]


@pytest.fixture()
def captured_layers(monkeypatch):
    """The `layers` argument of every capture the label stage runs."""
    calls: list[object] = []
    real = label_stage.capture_token_lists

    def spy(*args, **kwargs):
        calls.append(kwargs["layers"])
        return real(*args, **kwargs)

    monkeypatch.setattr(label_stage, "capture_token_lists", spy)
    return calls


def test_default_reads_only_the_full_attention_layers_and_records_them(tmp_path, demo_candidates, tiny_gemma3_dir,
                                                                       captured_layers):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_gemma3_dir, "teacher.steps=oracle")
    assert recipe.teacher.layers == "full_attention"
    resolved = list(load_layer_plan(str(tiny_gemma3_dir), "full_attention").read)
    assert resolved == [2]  # layer types: sliding, sliding, full, sliding
    cal = run_calibrate_stage(recipe, show_progress=False)
    assert cal.layers == LayersRead(setting="full_attention", model_type="gemma3_text", num_layers=4, read=[2],
                                    sliding=[], window=None)
    bias = BiasFile.model_validate_json((run / "bias.json").read_text())
    assert bias.keys.layers == "full_attention" and bias.keys.layers_read == resolved
    summary = run_label_stage(recipe, show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.error == 0
    assert summary.layers is not None and summary.layers.read == resolved and summary.layers.sliding == []
    assert captured_layers and all(layers == resolved for layers in captured_layers)  # what was read
    recs = labels(run)
    assert len(recs) == 6 and all(r["teacher"]["layers_read"] == resolved for r in recs)
    manifest = json.loads((run / "label.run.json").read_text())
    assert manifest["summary"]["layers"]["read"] == resolved


def test_a_bias_from_other_layers_is_refused(tmp_path, demo_candidates, tiny_gemma3_dir):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_gemma3_dir, "teacher.steps=oracle")
    run_calibrate_stage(recipe, show_progress=False)
    path = run / "bias.json"
    data = json.loads(path.read_text())
    data["keys"]["layers_read"] = [0, 1, 2, 3]  # what full_attention read under another layer layout
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="calibration key 'layers_read' differs"):
        run_label_stage(recipe, show_progress=False)


def test_explicit_sliding_layer_out_of_reach_is_refused_before_generation(tmp_path, demo_candidates,
                                                                           tiny_gemma3_dir):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_gemma3_dir, "teacher.layers=[0, 2]", "teacher.calibrate=false")
    message = rf"layer 0 of gemma3_text is a sliding_attention layer with a window of {GEMMA3_WINDOW} tokens"
    with pytest.raises(LayerWindowError, match=message):
        run_label_stage(recipe, show_progress=False)
    assert not list((run / "label_shards").glob("replies*"))  # refused before the teacher wrote a reply
    assert not (run / LABELS_FILE).exists()
    with pytest.raises(LayerWindowError, match=message + r".* in the calibration sequence"):
        run_calibrate_stage(make_recipe(run, tiny_gemma3_dir, "teacher.layers=[0, 2]"), show_progress=False)
    assert not (run / "bias.json").exists()


def test_exact_check_at_capture_stops_the_run(tmp_path, demo_candidates, tiny_gemma3_dir, monkeypatch):
    """The pre-check measures to the reply's start; the exact distance is checked again before each capture, and
    that refusal stops the run instead of becoming per-question error records."""
    run = fresh_run(tmp_path, demo_candidates)
    monkeypatch.setattr(label_stage, "reply_distance", lambda *args: 0)  # a pre-check that lets everything pass
    recipe = make_recipe(run, tiny_gemma3_dir, "teacher.layers=[3]", "teacher.calibrate=false", "teacher.steps=oracle")
    with pytest.raises(LayerWindowError, match=r"layer 3 .* its first reasoning step starts \d+ tokens after"):
        run_label_stage(recipe, show_progress=False)
    assert not (run / LABELS_FILE).exists()


def test_all_warns_once_and_counts_the_questions_beyond_the_window(tmp_path, demo_candidates, tiny_gemma3_dir,
                                                                   captured_layers, caplog):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_gemma3_dir, "teacher.layers=all", "teacher.calibrate=false", "teacher.steps=oracle")
    with caplog.at_level(logging.WARNING, logger="purecover.teacher.layers"):
        summary = run_label_stage(recipe, show_progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.name == "purecover.teacher.layers"]
    assert len(warnings) == 1
    assert f"layers 0, 1, 3 (sliding_attention, window {GEMMA3_WINDOW} tokens)" in warnings[0]
    assert "in 6 of 6 sequences" in warnings[0]
    assert summary.layers == LayersRead(setting="all", model_type="gemma3_text", num_layers=4, read=[0, 1, 2, 3],
                                        sliding=[0, 1, 3], window=GEMMA3_WINDOW, beyond_window=6)
    assert captured_layers and all(layers == [0, 1, 2, 3] for layers in captured_layers)
    assert all(r["teacher"]["layers_read"] == [0, 1, 2, 3] for r in labels(run))


def test_model_without_sliding_layers_reads_every_layer_as_before(tmp_path, demo_candidates, tiny_teacher_dir,
                                                                  captured_layers, caplog):
    run_default = fresh_run(tmp_path / "default", demo_candidates)
    with caplog.at_level(logging.WARNING, logger="purecover.teacher.layers"):
        summary = run_label_stage(make_recipe(run_default, tiny_teacher_dir, "teacher.calibrate=false",
                                              "teacher.steps=oracle"), show_progress=False)
    assert summary.layers == LayersRead(setting="full_attention", model_type="qwen2", num_layers=2, read=[0, 1],
                                        sliding=[], window=None)
    run_all = fresh_run(tmp_path / "all", demo_candidates)
    run_label_stage(make_recipe(run_all, tiny_teacher_dir, "teacher.calibrate=false", "teacher.steps=oracle",
                                "teacher.layers=all"), show_progress=False)
    assert not [r for r in caplog.records if r.name == "purecover.teacher.layers"]  # nothing slides: no warning
    assert captured_layers and all(layers == [0, 1] for layers in captured_layers)
    for a, b in zip(labels(run_default), labels(run_all), strict=True):  # the same labels as `all`
        assert a["teacher"].pop("layers") == "full_attention" and b["teacher"].pop("layers") == "all"
        assert a == b and a["teacher"]["layers_read"] == [0, 1]


def test_calibration_fingerprint_follows_the_resolved_layers(tmp_path, tiny_gemma3_dir, monkeypatch):
    import purecover.teacher.layers as layers_module

    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"teacher.model={tiny_gemma3_dir}"])
    before = bias_inputs_fingerprint(recipe)
    assert bias_inputs_fingerprint(recipe) == before
    real = layers_module.attention_windows

    def every_layer_full(config):  # e.g. another transformers deriving other layer types from the same file
        kinds, windows = real(config)
        return ["full_attention"] * len(kinds), [None] * len(windows)

    monkeypatch.setattr(layers_module, "attention_windows", every_layer_full)
    assert bias_inputs_fingerprint(recipe) != before
