"""A chat template that never finishes (nested range loops) is refused when the tokenizer is loaded or the GGUF file
converted, within the time bound; real templates pass; the Jinja sandbox still blocks attribute escapes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from purecover.demo.offline_tokenizer import build_offline_tokenizer
from purecover.models import chat_template_check
from purecover.models.loading import load_tokenizer

RUNAWAY = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
HUGE = "{% for a in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}"


def _tokenizer_with(tmp_path: Path, template: str | None) -> Path:
    out = build_offline_tokenizer(tmp_path / "tok", ["a small text for a small vocabulary"] * 4, vocab_size=300)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    for extra in ("chat_template.jinja", "chat_template.json"):
        (out / extra).unlink(missing_ok=True)
    return out


@pytest.fixture(autouse=True)
def _fresh_checks(monkeypatch):
    monkeypatch.setattr(chat_template_check, "_CHECKED", set())
    monkeypatch.setattr(chat_template_check, "RENDER_SECONDS", 2.0)


def test_a_runaway_template_is_refused_within_the_bound(tmp_path):
    path = _tokenizer_with(tmp_path, RUNAWAY)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"did not finish rendering a 4-message conversation within 2 s") as err:
        load_tokenizer(str(path))
    assert time.monotonic() - start < 30 and str(path) in str(err.value)


def test_a_template_that_renders_megabytes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(chat_template_check, "MAX_RENDERED_CHARS", 100_000)
    with pytest.raises(ValueError, match="renders a 4-message conversation as 5,200,000 characters"):
        load_tokenizer(str(_tokenizer_with(tmp_path, HUGE)))


def test_a_plain_template_passes_once_and_a_raising_one_is_left_to_prompt_time(tmp_path):
    tok = load_tokenizer(str(_tokenizer_with(tmp_path / "a", "{% for m in messages %}{{ m.content }}{% endfor %}")))
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi"
    assert len(chat_template_check._CHECKED) == 1
    strict = "{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}x"
    load_tokenizer(str(_tokenizer_with(tmp_path / "b", strict)))  # raises on a system message: not refused here


def test_the_sandbox_still_blocks_attribute_escapes(tmp_path):
    from jinja2.exceptions import SecurityError

    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    tok = load_tokenizer(str(_tokenizer_with(tmp_path, escape)))
    with pytest.raises(SecurityError):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_a_gguf_files_runaway_template_is_refused_before_conversion(tmp_path, monkeypatch):
    from purecover.models import gguf_convert
    from tests.models.gguf_files import write_tiny_gguf

    tok_dir = _tokenizer_with(tmp_path, RUNAWAY)
    path = write_tiny_gguf(tmp_path / "runaway.gguf", tokenizer_dir=tok_dir)
    monkeypatch.setattr(gguf_convert, "_check_implied_size", lambda p: None)
    with pytest.raises(ValueError, match="did not finish rendering"):
        gguf_convert.convert_gguf(path, tmp_path / "cache")
    assert not any((tmp_path / "cache" / "converted").glob("gguf-*/config.json"))
