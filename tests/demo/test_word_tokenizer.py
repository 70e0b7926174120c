"""build_word_tokenizer: a small real HF tokenizer the selector's prompt and identifiers work with."""

from __future__ import annotations

import pytest

from purecover.demo.tiny import build_tiny_model, build_word_tokenizer
from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt, end_token_id

TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
DOCS = [{"title": "", "text": "Anna saw a blue kettle."}, {"title": "Boat", "text": "A red boat, near the river!"}]


@pytest.mark.parametrize("template", [None, TEMPLATE])
def test_prompt_identifiers_and_end_token(tmp_path, template):
    from purecover.models.loading import load_tokenizer

    texts = ["Which passages mention blue?", "system user assistant Question Passages"] + [
        f"{d['title']} {d['text']}" for d in DOCS]
    build_word_tokenizer(tmp_path / "tok", texts, chat_template=template)
    # loaded the way the stages load it, from a tiny model folder (llama: transformers trusts tokenizer_config)
    model_dir = build_tiny_model(tmp_path / "m", tmp_path / "tok", "llama")
    tok = load_tokenizer(str(model_dir), padding_side="left")
    scheme = IdentifierScheme("letters").check(tok, 2)
    assert scheme.separator_id == tok.convert_tokens_to_ids("\n")
    prompt = build_selector_prompt(tok, "Which passages mention blue?", DOCS, scheme)
    tokens = tok.convert_ids_to_tokens(prompt.input_ids)
    # one token per word, punctuation mark and newline; only the instruction words outside `texts` are unknown
    assert tokens[
        tokens.index("Anna") - 2: tokens.index("Boat") + 1] == ["A", ":", "Anna", "saw", "a", "blue", "kettle", ".", "\n", "B", ":", "Boat"]
    tail = ["<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"] if template else ["\n", "\n"]
    assert tokens[-3 - len(tail):] == ["mention", "blue", "?", *tail]
    end = tok.convert_ids_to_tokens(end_token_id(tok))
    assert end == ("<|im_end|>" if template else "<eos>")
    assert (tokens[0] == "<|im_start|>") == bool(template)
    assert len(tok) == max(tok.get_vocab().values()) + 1
