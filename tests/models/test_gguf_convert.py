"""GGUF files as a model source: conversion matches the source tensors, the cache is keyed by content, locked and
atomic, unsupported files are refused before any tensor is read, and model names resolve to the converted directory."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from purecover.models import gguf_convert
from purecover.models.gguf_convert import (
    SOURCE_FILE,
    UnsupportedGgufError,
    convert_gguf,
    converted_dir_for,
    read_gguf_info,
    read_source,
)
from purecover.models.loading import (
    check_model_path,
    gguf_file_of,
    load_causal_lm,
    load_tokenizer,
    model_source,
)
from purecover.utils.index_lock import key_lock

from .gguf_files import TINY_LICENSE, TINY_NAME, sha256_of, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf")


@pytest.fixture(scope="module")
def converted(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    cache = tmp_path_factory.mktemp("cache")
    return cache, convert_gguf(tiny_gguf, cache, upstream="example/tiny-llama")


def test_header_is_read_without_tensors(tiny_gguf: Path) -> None:
    info = read_gguf_info(tiny_gguf)
    assert (info.architecture, info.name, info.license) == ("llama", TINY_NAME, TINY_LICENSE)
    assert info.quantization == "ALL_F32"
    assert info.tensor_types == {"F32": 2 + 2 * 9 + 1}
    assert info.has_chat_template is False


def test_converted_model_matches_its_source_tensors(tiny_gguf: Path, converted: tuple[Path, Path]) -> None:
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out = converted
    assert (out / "model.safetensors").is_file()
    assert not list(out.glob("*.bin")) and not list(out.glob("*.pt"))  # safetensors only
    mine = AutoModelForCausalLM.from_pretrained(out, use_safetensors=True).state_dict()
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name).state_dict()
    assert mine.keys() == direct.keys()
    for name, tensor in direct.items():
        assert torch.equal(mine[name], tensor), name
    raw = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(tiny_gguf)).tensors}
    assert np.array_equal(mine["model.embed_tokens.weight"].numpy(), raw["token_embd.weight"])
    assert np.array_equal(mine["lm_head.weight"].numpy(), raw["output.weight"])
    assert np.array_equal(mine["model.layers.1.post_attention_layernorm.weight"].numpy(), raw["blk.1.ffn_norm.weight"])
    tok_mine = AutoTokenizer.from_pretrained(out)
    tok_direct = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert tok_mine("the cat sat").input_ids == tok_direct("the cat sat").input_ids


def test_source_record_and_card_name_the_file_never_a_local_path(tiny_gguf: Path,
                                                                   converted: tuple[Path, Path]) -> None:
    _, out = converted
    src = read_source(out)
    assert src is not None
    assert src.sha256 == sha256_of(tiny_gguf) and src.size_bytes == tiny_gguf.stat().st_size
    assert (src.file_name, src.upstream, src.license, src.model_type) == (
        "tiny-f32.gguf", "example/tiny-llama", TINY_LICENSE, "llama")
    assert src.parameters == sum(p.numel() for p in load_causal_lm(str(out), dtype="float32", device="cpu").parameters())
    card = (out / "README.md").read_text()
    assert "license: apache-2.0" in card and "base_model: example/tiny-llama" in card and src.sha256 in card
    for f in out.iterdir():  # no file of the directory names where the GGUF file or the cache lay
        assert str(tiny_gguf.parent) not in f.read_text(errors="ignore"), f.name
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"


def test_the_cache_is_keyed_by_content(tiny_gguf: Path, converted: tuple[Path, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache, out = converted
    assert out == cache / "converted" / f"gguf-{sha256_of(tiny_gguf)[:16]}"

    def no_second_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_convert, "_convert_into", no_second_conversion)
    copy = shutil.copy(tiny_gguf, tmp_path / "same-bytes-other-name.gguf")
    assert convert_gguf(tiny_gguf, cache) == out
    assert convert_gguf(copy, cache) == out  # the same bytes under another name: the same directory
    other = write_tiny_gguf(tmp_path / "tiny-f32.gguf", seed=1)  # same name, other bytes
    assert converted_dir_for(other, cache) != out


def test_a_second_converter_waits_for_the_lock_then_finds_it_done(tiny_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    final = converted_dir_for(tiny_gguf, cache)
    result: list[Path] = []
    with key_lock(cache / "locks" / f"{final.name}.lock", "a test holding the conversion"):
        worker = threading.Thread(target=lambda: result.append(convert_gguf(tiny_gguf, cache)))
        worker.start()
        time.sleep(1.0)
        assert not result and not final.exists()  # blocked on the lock
    worker.join(timeout=120)
    assert result == [final] and (final / SOURCE_FILE).is_file()


def test_a_failed_conversion_leaves_nothing_behind(tiny_gguf: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"

    def dies_half_way(gguf_path: Path, out: Path, *args: object, **kwargs: object) -> None:
        (out / "model.safetensors").write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_convert, "_convert_into", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf, cache)
    assert list((cache / "converted").iterdir()) == []


def test_unsupported_architecture_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = write_tiny_gguf(tmp_path / "odd.gguf", arch="nonesuch")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("tensors were read")

    monkeypatch.setattr(gguf_convert, "_convert_into", never)
    with pytest.raises(UnsupportedGgufError, match="GGUF architecture 'nonesuch' cannot be loaded") as err:
        convert_gguf(odd, tmp_path / "cache")
    assert "\n" not in str(err.value)
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"definitely not a GGUF file")
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        convert_gguf(not_gguf, tmp_path / "cache")


def test_quantised_tensors_convert_to_their_dequantised_values(tmp_path: Path) -> None:
    """Q8_0 and Q5_0 (two of the four types of the Qwen2.5-Coder-0.5B file; Q4_K and Q6_K are dequantised by the
    same gguf call, and the real file's conversion is measured in docs/guides/real-models.md)."""
    import gguf
    from safetensors.torch import load_file

    types = {"blk.0.ffn_up.weight": "Q8_0", "blk.1.ffn_down.weight": "Q5_0"}
    path = write_tiny_gguf(tmp_path / "quant.gguf", tensor_types=types)
    assert read_gguf_info(path).tensor_types == {"F32": 19, "Q5_0": 1, "Q8_0": 1}
    out = convert_gguf(path, tmp_path / "cache")
    weights = load_file(str(out / "model.safetensors"))
    reader = gguf.GGUFReader(str(path))
    stored = {t.name: t for t in reader.tensors}
    for gguf_name, hf_name in (("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"),
                               ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight")):
        t = stored[gguf_name]
        expected = gguf.quants.dequantize(t.data, t.tensor_type).reshape(weights[hf_name].shape)
        assert torch.equal(weights[hf_name], torch.from_numpy(np.ascontiguousarray(expected)))


def test_a_tensor_type_gguf_cannot_dequantise_is_refused_naming_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    odd = write_tiny_gguf(tmp_path / "f64.gguf", tensor_types={"blk.0.attn_q.weight": "F64"})

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("tensors were read")

    monkeypatch.setattr(gguf_convert, "_convert_into", never)
    with pytest.raises(UnsupportedGgufError, match=r"tensors stored as F64 \(1 tensor\): the installed gguf package "
                                                   r"\([^)]+\) cannot dequantise that type") as err:
        convert_gguf(odd, tmp_path / "cache")
    assert "\n" not in str(err.value) and not (tmp_path / "cache" / "converted").exists()
    assert gguf_convert.dequantizable("Q4_K") and gguf_convert.dequantizable("Q6_K")
    assert not gguf_convert.dequantizable("NOT_A_TYPE")


def test_model_names_resolve_to_the_converted_directory(tiny_gguf: Path, tmp_path: Path) -> None:
    """A .gguf path, or a directory holding one, loads through the same functions as any model (the tests' model
    cache is a temporary directory: tests/conftest.py)."""
    resolved = check_model_path(str(tiny_gguf))
    assert (Path(resolved) / SOURCE_FILE).is_file()
    assert check_model_path(str(tiny_gguf.parent)) == resolved  # the directory holds one GGUF file
    assert gguf_file_of(str(tiny_gguf.parent)) == tiny_gguf
    tok = load_tokenizer(str(tiny_gguf))
    model = load_causal_lm(str(tiny_gguf), dtype="float32", device="cpu")
    logits = model(**tok("the cat", return_tensors="pt")).logits
    assert logits.shape[-1] == 101
    src = model_source(str(tiny_gguf))
    assert src is not None and src.sha256 == sha256_of(tiny_gguf)
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(tiny_gguf, two / name)
    with pytest.raises(ValueError, match="holds 2 GGUF files"):
        check_model_path(str(two))


def test_a_catalogue_name_that_is_not_fetched_says_how_to_fetch_it() -> None:
    with pytest.raises(FileNotFoundError, match="run `purecover models fetch smollm2-135m-instruct`"):
        check_model_path("smollm2-135m-instruct", "teacher.model")
    assert model_source("smollm2-135m-instruct") is None
    assert model_source("Qwen/Qwen2.5-7B-Instruct") is None  # a Hub id: nothing recorded, nothing fetched
