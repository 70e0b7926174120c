"""Model path checks in the loading helpers: a missing local path fails before the Hub is asked."""

from __future__ import annotations

import pytest

from purecover.models.loading import check_model_path, load_causal_lm, load_tokenizer, looks_like_local_path


@pytest.mark.parametrize("name", ["./models/nope", "/abs/missing", "~/no/such/model", "models/a/b", "..\\x"])
@pytest.mark.parametrize("load", [load_causal_lm, load_tokenizer])
def test_missing_local_model_path_is_a_clear_error(name, load):
    with pytest.raises(FileNotFoundError) as info:
        load(name)
    msg = str(info.value)
    assert f"path {name} does not exist" in msg
    assert "local path" in msg
    assert "Repo id must" not in msg


@pytest.mark.parametrize("name", ["./models/nope", "/abs/missing", "~/no/such/model", "models/a/b"])
def test_missing_embedding_model_path_is_a_clear_error(name):
    from purecover.data.retrieval.dense import load_sentence_transformer

    with pytest.raises(FileNotFoundError) as info:
        load_sentence_transformer(name)
    assert str(info.value).startswith(f"embedding model path {name} does not exist (a local path")


def test_model_path_that_is_a_file(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is a file, not a model directory"):
        load_causal_lm(str(f))


def test_hub_ids_and_existing_directories_pass(tmp_path, monkeypatch):
    assert check_model_path("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"
    assert check_model_path("gpt2") == "gpt2"
    assert not looks_like_local_path("intfloat/e5-base-v2")
    assert looks_like_local_path("./Qwen/Qwen2.5") and looks_like_local_path("a/b/c")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    assert check_model_path("~/m") == str(tmp_path / "m")
