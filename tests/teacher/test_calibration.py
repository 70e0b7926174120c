from __future__ import annotations

import json

import numpy as np
import pytest

from purecover.models.loading import load_causal_lm, load_tokenizer
from purecover.teacher.calibration import (
    BiasMismatchError,
    bias_keys,
    compute_position_bias,
    load_bias,
    save_bias,
)


@pytest.fixture(scope="module")
def teacher(tiny_teacher_dir):
    return load_causal_lm(str(tiny_teacher_dir), dtype="float32", device="cpu"), load_tokenizer(str(tiny_teacher_dir))


def test_bias_has_one_value_per_position_and_depends_on_layers(teacher):
    model, tok = teacher
    bias = compute_position_bias(model, tok, 6)
    assert bias.shape == (6,) and np.all(bias > 0) and np.all(bias < 1)
    first_layer = compute_position_bias(model, tok, 6, layers=[0])
    assert not np.allclose(bias, first_layer)


def test_bias_file_round_trip_and_key_mismatch(tmp_path, teacher):
    _model, tok = teacher
    keys = bias_keys("tiny", 6, tok, "all")
    save_bias(tmp_path / "bias.json", np.arange(6) / 10, keys)
    bias, key = load_bias(tmp_path / "bias.json", keys)
    assert np.allclose(bias, np.arange(6) / 10) and json.loads(key) == keys
    for change, name in ((dict(k1=8), "k1"), (dict(model="other"), "model"), (dict(layers=[0]), "layers"),
                         (dict(template="x"), "template")):
        with pytest.raises(BiasMismatchError, match=f"calibration key '{name}' differs"):
            load_bias(tmp_path / "bias.json", {**keys, **change})
    with pytest.raises(FileNotFoundError, match="purecover calibrate"):
        load_bias(tmp_path / "missing.json", keys)
