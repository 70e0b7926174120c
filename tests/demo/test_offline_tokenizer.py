"""The offline demo tokenizer: loads offline, round-trips any text, and satisfies every prompt path."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from purecover.demo.offline_tokenizer import SPECIAL_TOKENS, build_offline_tokenizer, demo_tokenizer_texts

DOCS = [
    {"title": "Tollbridge", "text": "Tollbridge is a market town on the Mirren."},
    {"title": "", "text": "Ada Brill was born in Tollbridge in 1841."},
    {"title": "Café Ölm", "text": "A café with ünïcode — and “quotes” 🕰️."},
]
STEPS = ["Ada Brill was born in Tollbridge.", "The Mirren flows there."]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    return build_offline_tokenizer(tmp_path_factory.mktemp("offline_tok"), demo_tokenizer_texts())


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    from purecover.models.loading import load_tokenizer

    return load_tokenizer(str(tokenizer_dir))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer_dir) -> Path:
    from purecover.demo.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("offline_tiny") / "model", tokenizer_dir, "qwen2", seed=0)


def test_loads_offline_as_fast_tokenizer_with_qwen_special_tokens(tokenizer_dir, tok):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tokenizer_dir).is_fast and tok.is_fast
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>" and tok.bos_token is None
    ids = tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    assert len(set(ids)) == 3 and max(ids) == len(tok) - 1  # appended after the learned vocabulary
    assert tok("<|im_start|>user<|im_end|>", add_special_tokens=False)["input_ids"][0] == ids[1]
    vocab = tok.get_vocab()
    assert all(c in vocab for c in pre_tokenizers.ByteLevel.alphabet())  # no byte is ever unknown
    assert 1000 < len(tok) <= 4000


@pytest.mark.parametrize("text", [
    "Plain text.", "Héllo wörld 👋🏽 — “quoted”\n\nnew\tline\r\nend  ", "中文 日本語 한국어 العربية",
    "e\u0301 (decomposed) vs é, \x00\x07 control, \ufeff BOM, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\n\nA\nB\n", "  leading and trailing  ",
    "12345 numbers 3.14 and words'll don't",
])
def test_round_trip_and_offsets(tok, text):
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert tok.decode(enc["input_ids"]) == text
    offsets = enc["offset_mapping"]
    assert all(0 <= a <= b <= len(text) for a, b in offsets)
    assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    assert all(p[0] <= q[0] for p, q in itertools.pairwise(offsets))


@pytest.mark.parametrize("scheme", ["letters", "letters52"])
def test_identifier_scheme_holds(tok, scheme):
    from purecover.models.identifiers import IdentifierScheme

    checked = IdentifierScheme(scheme).check(tok, IdentifierScheme(scheme).capacity)
    assert checked.separator_id == tok("\n", add_special_tokens=False)["input_ids"][0]


def test_render_chat_is_chatml(tok):
    from purecover.models.chat import render_chat

    chat = render_chat(tok, "Be brief.", "Which river?")
    assert chat.text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhich river?<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert chat.text[chat.shift((0, 5))[0] :].startswith("Which")
    default = render_chat(tok, None, "Hi")
    assert default.text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    assert default.text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    full = tok.apply_chat_template([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
                                   tokenize=False)
    assert full.endswith("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n")


def test_selector_prompt_and_end_token(tok):
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector_prompt import build_selector_prompt, end_token_id

    scheme = IdentifierScheme("letters").check(tok, len(DOCS))
    prompt = build_selector_prompt(tok, "Which river?", DOCS, scheme, max_passage_tokens=6)
    assert prompt.text.endswith("<|im_start|>assistant\n") and "\nB: Ada" in prompt.text
    assert end_token_id(tok) == tok.convert_tokens_to_ids("<|im_end|>")
    assert scheme.target_ids([2, 0], end_token_id(tok))[-1] == tok.eos_token_id


def test_build_is_deterministic(tmp_path, tokenizer_dir):
    again = build_offline_tokenizer(tmp_path / "again", demo_tokenizer_texts())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (tokenizer_dir / name).read_bytes()


def test_too_small_vocab_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="256 bytes"):
        build_offline_tokenizer(tmp_path, ["abc"], vocab_size=100)


def test_tiny_model_forward_and_generate(tiny_dir, tok):
    from purecover.models.loading import load_causal_lm

    model = load_causal_lm(str(tiny_dir), dtype="float32", device="cpu")
    assert model.config.vocab_size == len(tok) and model.config.eos_token_id == tok.eos_token_id
    batch = tok(["Which river?", "Where was Ada Brill born, and when?"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
        out = model.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert logits.shape[:2] == batch["input_ids"].shape and logits.shape[-1] == len(tok)
    assert out.shape[0] == 2 and batch["input_ids"].shape[1] < out.shape[1] <= batch["input_ids"].shape[1] + 4


def test_teacher_prompt_spans_and_capture_match_eager(tiny_dir, tok):
    from purecover.models.loading import load_causal_lm
    from purecover.records import CandidateDoc
    from purecover.teacher.capture import SegmentSpec, capture_segment_attention, reference_segment_attention
    from purecover.teacher.prompts import build_reasoning_prompt, build_teacher_sequence

    docs = [CandidateDoc(**d) for d in DOCS]
    prompt, spans = build_reasoning_prompt(tok, "Which river flows through Ada Brill's birthplace?", docs)
    assert [prompt[a:b] for a, b in spans] == [f"{d['title']}\n{d['text']}" if d["title"] else d["text"]
                                              for d in DOCS]
    seq = build_teacher_sequence(tok, prompt, spans, STEPS, "the Mirren")
    assert seq.input_ids == tok(seq.text, add_special_tokens=False)["input_ids"]

    def decode(span):
        return tok.decode(seq.input_ids[span[0] : span[1]]).strip()

    assert [decode(s) for s in seq.doc_spans] == [prompt[a:b] for a, b in spans]
    assert [decode(s) for s in seq.step_spans] == STEPS and decode(seq.answer_span) == "the Mirren"
    flat = [*seq.doc_spans, *seq.step_spans, seq.answer_span]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(flat))

    model = load_causal_lm(str(tiny_dir), dtype="float32", device="cpu")
    ids = torch.tensor([seq.input_ids])
    mask = torch.ones_like(ids)
    spec = SegmentSpec.of([*seq.step_spans, seq.answer_span], [*seq.doc_spans, *seq.step_spans])
    got = capture_segment_attention(model, ids, mask, [spec])[0]
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
    want = reference_segment_attention(attentions, mask, [spec])[0]
    assert got.shape == want.shape == (len(STEPS) + 1, len(DOCS) + len(STEPS))
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    finite = ~torch.isnan(want)
    assert (got[finite] - want[finite]).abs().max().item() <= 1e-6
