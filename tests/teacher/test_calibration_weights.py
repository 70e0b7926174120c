"""bias.json is matched on a fingerprint of the teacher's weights, not on the model path string: by the label
stage's key check (`load_bias`) and by the calibrate stage's config hash (`bias_inputs_fingerprint`), which is
what decides whether calibrate reruns."""

from __future__ import annotations

import json
import shutil
import types

import numpy as np
import pytest
import torch

from purecover.teacher.bias_fingerprint import bias_inputs_fingerprint
from purecover.teacher.calibration import (
    BiasMismatchError,
    PositionBias,
    calibration_keys,
    load_bias,
    save_bias,
    weights_fingerprint,
)

K1 = 4
TOKENS = 30  # teacher.calibration_lengths as a fixed count: no tokenizer or candidates needed


def save_tiny_qwen2(directory, seed=0, hidden=16):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=64, hidden_size=hidden, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(directory)
    assert list(directory.glob("*.safetensors"))
    return directory


def keys_for(model_dir, tmp_path):
    keys, lengths = calibration_keys(str(model_dir), K1, None, "all", TOKENS, tmp_path / "candidates.jsonl")
    return keys, lengths


def calibrate(model_dir, tmp_path):
    """Write bias.json as the calibrate stage does, for the model in `model_dir`."""
    keys, lengths = keys_for(model_dir, tmp_path)
    path = tmp_path / "bias.json"
    save_bias(path, PositionBias(np.arange(K1) / 10, [TOKENS] * K1), keys, lengths)
    return path


def fingerprint(model_dir, tmp_path, *extra):
    """The calibrate stage's hash addition for a recipe with this teacher (what makes calibrate rerun)."""
    from purecover.config import load_recipe

    return bias_inputs_fingerprint(load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"teacher.model={model_dir}",
                                                      f"data.k1={K1}", f"teacher.calibration_lengths={TOKENS}", *extra]))


def test_same_model_at_another_path_matches(tmp_path):
    first = save_tiny_qwen2(tmp_path / "a" / "teacher")
    bias_path = calibrate(first, tmp_path)
    copy = shutil.copytree(first, tmp_path / "elsewhere" / "teacher-copy")
    keys, _ = keys_for(copy, tmp_path)
    assert keys.model == str(copy) and keys.weights == weights_fingerprint(str(first))
    bias, key = load_bias(bias_path, keys)
    assert np.allclose(bias, np.arange(K1) / 10)
    assert json.loads(key)["model"] == str(first)  # the file still shows where it was computed
    assert fingerprint(copy, tmp_path) == fingerprint(first, tmp_path)  # calibrate does not rerun


@pytest.mark.parametrize("other", [dict(seed=1), dict(hidden=32)], ids=["other-weights", "other-config"])
def test_another_model_saved_at_the_same_path_is_refused(tmp_path, other):
    model_dir = save_tiny_qwen2(tmp_path / "teacher")
    bias_path = calibrate(model_dir, tmp_path)
    old = weights_fingerprint(str(model_dir))
    old_hash = fingerprint(model_dir, tmp_path)
    shutil.rmtree(model_dir)
    save_tiny_qwen2(model_dir, **other)
    keys, _ = keys_for(model_dir, tmp_path)
    assert keys.model == str(model_dir) and keys.weights != old
    with pytest.raises(BiasMismatchError) as info:
        load_bias(bias_path, keys)
    assert str(info.value) == (
        f"{bias_path}: calibration key 'weights' differs: the file has {old!r} (teacher {str(model_dir)!r}), "
        f"this run needs {keys.weights!r} (teacher {str(model_dir)!r}): the bias was computed with other "
        "model weights; rerun `purecover calibrate` for this configuration")
    assert fingerprint(model_dir, tmp_path) != old_hash  # calibrate reruns


def test_bias_file_without_a_weights_key_is_recomputed(tmp_path):
    model_dir = save_tiny_qwen2(tmp_path / "teacher")
    bias_path = calibrate(model_dir, tmp_path)
    data = json.loads(bias_path.read_text())
    del data["keys"]["weights"]  # as written before the fingerprint existed
    bias_path.write_text(json.dumps(data))
    keys, _ = keys_for(model_dir, tmp_path)
    with pytest.raises(BiasMismatchError, match=r"calibration key 'weights' is missing: the file was written before "
                                                r"bias\.json recorded a fingerprint of the teacher's weights"):
        load_bias(bias_path, keys)


def test_fingerprint_reads_samples_not_the_weights(tmp_path, monkeypatch):
    model_dir = save_tiny_qwen2(tmp_path / "teacher")
    weights = next(model_dir.glob("*.safetensors"))
    before = weights_fingerprint(str(model_dir))
    # a byte in the middle of the tensor data changes the fingerprint (a fine-tune keeps names and sizes)
    data = bytearray(weights.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    middle = header + (len(data) - header - 4096) // 2
    data[middle] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert weights_fingerprint(str(model_dir)) != before
    assert weights_fingerprint(str(model_dir)).startswith("sha256:")


def test_hub_ids_use_the_cached_snapshot_commit(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert weights_fingerprint("owner/model") == "hub:owner/model"  # not cached: the id itself
    repo = tmp_path / "models--owner--model"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert weights_fingerprint("owner/model") == f"hub:owner/model@{commit}"
    (repo / "snapshots" / commit / "config.json").unlink()  # only the tokenizer fetched so far
    assert weights_fingerprint("owner/model") == f"hub:owner/model@{commit}"
    assert weights_fingerprint("./no/such/dir") == "hub:./no/such/dir"


def test_a_prompt_template_edited_in_place_is_not_current(tmp_path):
    """The pipeline's plan (no tokenizer load) recalibrates when the reasoning template's wording changed, even
    under the same teacher.prompt_file path (the recipe, hence the stage hash, is then unchanged)."""
    from purecover.teacher.prompts import ReasoningPrompt, _default_template

    model_dir = save_tiny_qwen2(tmp_path / "teacher")
    template = tmp_path / "reasoning.txt"
    template.write_text(_default_template() + "\n", encoding="utf-8")
    ours = ReasoningPrompt.from_config(types.SimpleNamespace(prompt_file=str(template), max_steps=5))
    keys, lengths = keys_for(model_dir, tmp_path)
    path = tmp_path / "bias.json"
    save_bias(path, PositionBias(np.arange(K1) / 10, [TOKENS] * K1), keys, lengths, ours)

    def is_current(prompt):  # the wording stored in bias.json, compared as the calibrate stage's hash compares it
        return json.loads(path.read_text())["prompt"] == prompt.record().to_json_dict()

    assert is_current(ours)
    assert is_current(ReasoningPrompt.default())  # the same wording, read from the package's own file
    before = fingerprint(model_dir, tmp_path, f"teacher.prompt_file={template}")
    assert before == fingerprint(model_dir, tmp_path)  # the same wording as the package's: the same hash
    template.write_text("Reason in steps.\n{documents}\nQ: {question}\n", encoding="utf-8")
    assert fingerprint(model_dir, tmp_path, f"teacher.prompt_file={template}") != before  # edited in place: rerun
    assert not is_current(ReasoningPrompt.from_config(types.SimpleNamespace(prompt_file=str(template), max_steps=5)))
    assert not is_current(ReasoningPrompt.from_config(types.SimpleNamespace(system_prompt="", max_steps=5)))


def test_bias_json_keeps_its_keys_and_a_bad_file_names_the_field(tmp_path):
    """bias.json is written through `BiasFile` with the keys of every earlier version, in the same order; a
    file whose field is wrong is refused naming it (and, being a changed output, redone by the calibrate stage)."""
    from purecover.records import RecordError

    model_dir = save_tiny_qwen2(tmp_path / "teacher")
    path = calibrate(model_dir, tmp_path)
    data = json.loads(path.read_text())
    assert list(data) == ["keys", "bias", "n_dummy_steps", "prompt", "doc_tokens", "created", "versions"]
    assert list(data["doc_tokens"]) == ["target", "measured", "source"]
    keys, _ = keys_for(model_dir, tmp_path)
    path.write_text(json.dumps({**data, "bias": "flat"}))
    with pytest.raises(RecordError, match=r"bias\.json: field bias: must be a list \(got a string\); rerun "
                                          r"`purecover calibrate`"):
        load_bias(path, keys)
    path.write_text(json.dumps({"keys": data["keys"], "bias": data["bias"]}))  # the earliest files: keys and bias
    assert np.allclose(load_bias(path, keys)[0], np.arange(K1) / 10)


def test_a_gguf_teacher_is_named_by_its_file_content(tmp_path):
    """A .gguf teacher (or catalogue model) is fingerprinted by the GGUF file's sha256, wherever it lies."""
    from purecover.models.loading import check_model_path
    from purecover.teacher.calibration import weights_fingerprint
    from tests.models.gguf_files import sha256_of, write_tiny_gguf

    gguf = write_tiny_gguf(tmp_path / "a" / "teacher.gguf") if (tmp_path / "a").mkdir() is None else None
    check_model_path(str(gguf))  # converted when the stage loads it
    copy = tmp_path / "b.gguf"
    shutil.copy(gguf, copy)
    assert weights_fingerprint(str(gguf)) == weights_fingerprint(str(copy)) == f"gguf:sha256:{sha256_of(gguf)}"
    other = write_tiny_gguf(tmp_path / "c.gguf", seed=5)
    check_model_path(str(other))
    assert weights_fingerprint(str(other)) != weights_fingerprint(str(gguf))
