"""Generation backends: HF on a tiny real model, the vLLM adapter against a fake `vllm` module."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch

from purecover.data.samples import sample_data_dir
from purecover.models.generation import (
    Generated,
    HFGenerator,
    VLLMGenerator,
    generate_detailed,
    make_generator,
)

PROMPTS = [
    "Hi",
    "The quick brown fox jumps over the lazy dog, then runs far away into the dark forest near the river Mirren.",
    "x",
    "Ada Brill was born in Tollbridge.",
    "Question: which river flows through the town where Ada Brill was born? Answer:",
]


# ---------------------------------------------------------------------------- HF backend on a tiny model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = sample_data_dir()
    if root is None or not (root / "qwen2_tokenizer").is_dir():
        pytest.skip("Qwen2 tokenizer not found: expected <sample data>/qwen2_tokenizer "
                    "(../shared/data beside the repo, or PURECOVER_SAMPLE_DATA)")
    from purecover.demo.tiny import build_tiny_model
    from purecover.models.loading import load_causal_lm, load_tokenizer

    out = build_tiny_model(tmp_path_factory.mktemp("tiny_backends"), root / "qwen2_tokenizer")
    model = load_causal_lm(str(out), dtype="float32", device="cpu")
    # The tied random head mostly repeats the last prompt token; an untied random head makes the
    # continuations depend on the whole prompt (and on positions), so padding mistakes show up.
    gen = torch.Generator().manual_seed(1)
    head = torch.randn(model.lm_head.weight.shape, generator=gen) * 0.5
    model.lm_head.weight = torch.nn.Parameter(head, requires_grad=False)
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    return model, load_tokenizer(str(out))


def _lengths(tok) -> list[int]:
    return [len(tok(p, add_special_tokens=False)["input_ids"]) for p in PROMPTS]


def test_prompts_have_clearly_different_lengths(tiny):
    _, tok = tiny
    lengths = _lengths(tok)
    assert max(lengths) >= 5 * min(lengths)


@pytest.fixture(scope="module")
def alone(tiny) -> list[str]:
    """Each prompt generated on its own (no padding at all)."""
    model, tok = tiny
    gen = HFGenerator(model, tok, batch_size=1)
    return [gen.generate([p], max_new_tokens=8)[0] for p in PROMPTS]


@pytest.mark.parametrize("initial_side", ["left", "right"])
def test_batched_generation_equals_one_by_one(tiny, alone, initial_side):
    model, tok = tiny
    tok.padding_side = initial_side
    try:
        batched = HFGenerator(model, tok, batch_size=8).generate(PROMPTS, max_new_tokens=8)
        assert tok.padding_side == initial_side  # restored after generation
    finally:
        tok.padding_side = "left"
    assert batched == alone
    assert len(batched) == len(PROMPTS)
    assert all(isinstance(s, str) and s for s in batched)
    assert len(set(batched)) > 1  # the continuations depend on the prompt


def test_generation_is_batch_size_independent(tiny, alone):
    model, tok = tiny
    assert HFGenerator(model, tok, batch_size=2).generate(PROMPTS, max_new_tokens=8) == alone


def test_generation_continues_with_the_argmax_token(tiny):
    model, tok = tiny
    gen = HFGenerator(model, tok, batch_size=8)
    out = gen.generate(PROMPTS, max_new_tokens=1)
    for prompt, text in zip(PROMPTS, out):
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            nxt = int(model(input_ids=ids).logits[0, -1].argmax())
        assert text == tok.decode([nxt], skip_special_tokens=True)


def test_generation_returns_only_the_continuation(tiny):
    model, tok = tiny
    gen = HFGenerator(model, tok, batch_size=8)
    out = gen.generate(PROMPTS, max_new_tokens=3)
    longer = gen.generate(PROMPTS, max_new_tokens=6)
    for short, long_ in zip(out, longer):
        assert long_.startswith(short)  # greedy: a prefix of the longer continuation, prompt not echoed
    assert gen.generate([], max_new_tokens=3) == []


def test_token_probabilities_match_manual_softmax(tiny):
    model, tok = tiny
    token_ids = [15, 16, 17, 18, 19, 20, tok.eos_token_id]
    tok.padding_side = "right"
    try:
        gen = HFGenerator(model, tok, batch_size=3)
        probs = gen.token_probabilities(PROMPTS, token_ids)
        assert tok.padding_side == "right"
    finally:
        tok.padding_side = "left"
    assert len(probs) == len(PROMPTS) and all(len(row) == len(token_ids) for row in probs)
    for prompt, row in zip(PROMPTS, probs):
        ids = tok(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            full = torch.softmax(model(input_ids=ids).logits[0, -1].double(), dim=-1)
        want = full[token_ids].tolist()
        assert row == pytest.approx(want, rel=1e-4, abs=1e-9)
        assert all(0.0 < p < 1.0 for p in row)
        assert sum(row) < 1.0  # under the full distribution, not renormalised over the candidates


def test_detailed_generation_says_the_token_limit_was_reached(tiny, alone):
    """Without a stop, a random tiny model runs to max_new_tokens: the same texts, none finished by itself."""
    model, tok = tiny
    out = HFGenerator(model, tok, batch_size=2).generate_detailed(PROMPTS, max_new_tokens=8)
    assert [g.text for g in out] == alone
    assert all(g.finished is False for g in out)


def test_stop_when_ends_each_row_where_it_holds(tiny, alone):
    """A stop predicate ends a row as soon as it holds for the row's text so far (batched: the other rows go on);
    the stopped rows count as finished and are prefixes of their unstopped continuations."""
    model, tok = tiny
    full = HFGenerator(model, tok, batch_size=1).generate(PROMPTS, max_new_tokens=12)
    target = full[1][: max(1, len(full[1]) // 3)]  # stop row 1 early, once its text starts like this

    def stop_when(text: str) -> bool:
        return text.startswith(target)

    out = HFGenerator(model, tok, batch_size=8).generate_detailed(PROMPTS, 12, stop_when=stop_when)
    assert out[1].finished is True and out[1].text.startswith(target) and len(out[1].text) < len(full[1])
    assert full[1].startswith(out[1].text)
    for i, g in enumerate(out):
        if i != 1 and not full[i].startswith(target):
            assert (g.text, g.finished) == (full[i], False)  # the other rows are untouched


def test_generate_detailed_on_a_backend_without_it():
    """A custom backend with only ``generate``: its texts, ``finished`` unknown."""
    class Plain:
        def generate(self, prompts, max_new_tokens):
            return [p.upper() for p in prompts]

    assert generate_detailed(Plain(), ["a", "b"], 4) == [Generated("A", None), Generated("B", None)]


# ---------------------------------------------------------------------------- vLLM adapter with a fake module


class FakeLogprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class FakeSamplingParams:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


def _output(text: str, logprobs, finish_reason=None):
    return types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text, logprobs=logprobs,
                                                                finish_reason=finish_reason)])


BOS = "<bos>"


def _bos_tokenizer():
    """A real fast tokenizer whose post-processor adds a BOS (like Llama-3's) and whose chat template emits one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = [BOS, "<unk>", "<|user|>", "<|assistant|>", "a", "b", "c", "d", "p0", "p1", "p2", "hello", "world"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                        special_tokens=[(BOS, 0)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, unk_token="<unk>", pad_token="<unk>")
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok


@pytest.fixture(scope="module")
def bos_tok():
    tok = _bos_tokenizer()
    assert tok("a b")["input_ids"][0] == tok.bos_token_id  # the post-processor does add a BOS
    return tok


def _ids(tok, text):
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


@pytest.fixture
def fake_vllm(monkeypatch, bos_tok):
    """A stand-in `vllm` module (not a package: `vllm.distributed` is absent).

    Like vLLM's `LLM.generate`, it takes token prompts (``{"prompt_token_ids": [...]}``); a text
    prompt would be tokenised with special tokens (vLLM's default), which is what the adapter must avoid.
    """
    mod = types.ModuleType("vllm")
    mod.instances = []
    mod.finish_reasons = []  # what the next outputs report (vLLM: "stop" or "length"), then None

    class FakeLLM:
        def __init__(self, **kwargs) -> None:
            self.kwargs = kwargs
            self.calls: list[tuple[list, FakeSamplingParams]] = []
            self.logprobs_for: dict[tuple[int, ...], object] = {}
            mod.instances.append(self)

        def get_tokenizer(self):
            return bos_tok

        def generate(self, prompts, params):
            assert isinstance(prompts, list)
            self.calls.append((list(prompts), params))
            out = []
            for p in prompts:
                ids = tuple(p["prompt_token_ids"]) if isinstance(p, dict) else _ids(bos_tok, p)
                if not isinstance(p, dict):
                    ids = (bos_tok.bos_token_id, *ids)  # vLLM tokenises text with add_special_tokens=True
                if params.kwargs.get("max_tokens") == 1 and "allowed_token_ids" in params.kwargs:
                    out.append(_output("", self.logprobs_for.get(ids, [])))
                else:
                    out.append(_output("<" + bos_tok.decode(list(ids)) + ">", None,
                                       mod.finish_reasons.pop(0) if mod.finish_reasons else None))
            return out

    mod.LLM = FakeLLM
    mod.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)
    for name in ("vllm.distributed", "vllm.distributed.parallel_state"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return mod


def test_vllm_constructor_forwards_options(fake_vllm):
    gen = VLLMGenerator("/models/teacher", tensor_parallel_size=4, dtype="bfloat16", seed=7, max_model_len=8192,
                        gpu_memory_utilization=0.8)
    (llm,) = fake_vllm.instances
    assert gen.llm is llm
    assert llm.kwargs == {"model": "/models/teacher", "tensor_parallel_size": 4, "dtype": "bfloat16",
                          "trust_remote_code": False, "seed": 7, "gpu_memory_utilization": 0.8,
                          "max_model_len": 8192}


def test_vllm_constructor_defaults(fake_vllm):
    VLLMGenerator("m")
    kwargs = fake_vllm.instances[0].kwargs
    assert kwargs["tensor_parallel_size"] == 1 and kwargs["dtype"] == "auto" and kwargs["seed"] == 0
    assert kwargs["trust_remote_code"] is False
    assert "max_model_len" not in kwargs


def test_vllm_generate_is_greedy_and_in_prompt_order(fake_vllm, bos_tok):
    gen = VLLMGenerator("m")
    assert gen.tokenizer is bos_tok  # the engine's tokenizer when none is given
    prompts = ("p2", "p0", "p1")  # any sequence
    assert gen.generate(prompts, max_new_tokens=17) == ["<p2>", "<p0>", "<p1>"]
    (sent, params), = gen.llm.calls
    assert sent == [{"prompt_token_ids": list(_ids(bos_tok, p))} for p in prompts]
    assert params.kwargs["temperature"] == 0.0
    assert params.kwargs["max_tokens"] == 17
    assert gen.generate([], max_new_tokens=3) == []


def test_vllm_sends_the_hf_token_ids_with_one_bos(fake_vllm, bos_tok):
    """A chat-rendered prompt already starts with BOS: vLLM must get the HF path's ids, not a second BOS."""
    from purecover.models.chat import render_chat

    prompt = render_chat(bos_tok, "hello", "a b c").text
    assert prompt.startswith(BOS)
    hf_ids = bos_tok(prompt, add_special_tokens=False)["input_ids"]  # HFGenerator._encode's ids
    assert hf_ids.count(bos_tok.bos_token_id) == 1
    assert bos_tok(prompt)["input_ids"].count(bos_tok.bos_token_id) == 2  # what sending text would do
    gen = VLLMGenerator("m", tokenizer=bos_tok)
    gen.generate([prompt], max_new_tokens=4)
    gen.llm.logprobs_for = {tuple(hf_ids): [{4: FakeLogprob(math.log(0.5))}]}
    assert gen.token_probabilities([prompt], [4, 5]) == [pytest.approx([0.5, 0.0])]
    for sent, _ in gen.llm.calls:
        (req,) = sent
        assert req["prompt_token_ids"] == hf_ids
        assert req["prompt_token_ids"].count(bos_tok.bos_token_id) == 1


def test_vllm_token_probabilities(fake_vllm, bos_tok):
    gen = VLLMGenerator("m", tokenizer=bos_tok)
    ka, kb, kc, kd = (_ids(bos_tok, t) for t in ("a", "b", "c", "d"))
    gen.llm.logprobs_for = {
        ka: [{15: FakeLogprob(math.log(0.5)), 17: FakeLogprob(math.log(0.25)), 999: FakeLogprob(-0.1)}],
        kb: [{16: FakeLogprob(0.0)}],
        kc: [],  # no logprobs at all
        kd: [{15: math.log(0.125)}],  # plain floats are accepted too
    }
    probs = gen.token_probabilities(["a", "b", "c", "d"], [15, 16, 17])
    assert probs[0] == pytest.approx([0.5, 0.0, 0.25])
    assert probs[1] == pytest.approx([0.0, 1.0, 0.0])
    assert probs[2] == [0.0, 0.0, 0.0]
    assert probs[3] == pytest.approx([0.125, 0.0, 0.0])
    (sent, params), = gen.llm.calls
    assert sent == [{"prompt_token_ids": list(k)} for k in (ka, kb, kc, kd)]
    assert params.kwargs["allowed_token_ids"] == [15, 16, 17]
    assert params.kwargs["logprobs"] == 20  # top-20 of the unrestricted distribution
    assert params.kwargs["max_tokens"] == 1
    assert params.kwargs["temperature"] == 0.0


def test_vllm_close_without_distributed(fake_vllm):
    gen = VLLMGenerator("m")
    gen.close()
    assert not hasattr(gen, "llm")


def test_vllm_close_tears_down_parallel_state(fake_vllm, monkeypatch):
    called = []
    dist = types.ModuleType("vllm.distributed")
    ps = types.ModuleType("vllm.distributed.parallel_state")
    ps.destroy_model_parallel = lambda: called.append("model_parallel")
    ps.destroy_distributed_environment = lambda: called.append("distributed_environment")
    dist.parallel_state = ps
    fake_vllm.distributed = dist
    monkeypatch.setitem(sys.modules, "vllm.distributed", dist)
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", ps)
    gen = VLLMGenerator("m")
    gen.close()
    assert called == ["model_parallel", "distributed_environment"]
    assert not hasattr(gen, "llm")


def test_vllm_missing_raises_helpful_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail even if it were installed
    with pytest.raises(ImportError, match=r"pip install -e '\.\[vllm\]'"):
        VLLMGenerator("m")
    with pytest.raises(ImportError, match=r"pip install -e '\.\[vllm\]'"):
        make_generator("vllm", model_name="m")


# ---------------------------------------------------------------------------- make_generator


def test_make_generator_unknown_backend():
    with pytest.raises(ValueError, match="unknown generation backend 'sglang'"):
        make_generator("sglang", model=object(), tokenizer=object())


def test_make_generator_hf_needs_model_and_tokenizer():
    with pytest.raises(ValueError, match="hf backend needs"):
        make_generator("hf")
    with pytest.raises(ValueError, match="hf backend needs"):
        make_generator("hf", model=object())
    with pytest.raises(ValueError, match="hf backend needs"):
        make_generator("hf", tokenizer=object())


def test_make_generator_hf():
    model, tok = object(), object()
    gen = make_generator("hf", model=model, tokenizer=tok, batch_size=3, show_progress=True)
    assert isinstance(gen, HFGenerator)
    assert gen.model is model and gen.tokenizer is tok and gen.batch_size == 3 and gen.show_progress is True


def test_make_generator_vllm_needs_a_name(fake_vllm):
    with pytest.raises(ValueError, match="model name"):
        make_generator("vllm", model=object(), tokenizer=object())
    assert fake_vllm.instances == []


def test_make_generator_vllm_forwards_options(fake_vllm):
    tok = _bos_tokenizer()
    gen = make_generator("vllm", model_name=str(Path("/m")), tensor_parallel_size=2, dtype="float16", seed=3,
                         trust_remote_code=True, tokenizer=tok)
    assert isinstance(gen, VLLMGenerator) and gen.tokenizer is tok
    kwargs = fake_vllm.instances[0].kwargs
    assert (kwargs["model"], kwargs["tensor_parallel_size"], kwargs["dtype"], kwargs["seed"],
            kwargs["trust_remote_code"]) == (str(Path("/m")), 2, "float16", 3, True)


def test_vllm_detailed_generation_reads_the_finish_reason(fake_vllm):
    """``length`` (the token limit) is not finished, ``stop`` is, and so is a text the stop predicate accepts;
    an output without a finish reason says nothing (None)."""
    gen = VLLMGenerator("/models/teacher")
    fake_vllm.finish_reasons[:] = ["length", "stop", "length"]
    out = gen.generate_detailed(["a", "b", "c d", "a b"], 8, stop_when=lambda text: "c" in text)
    assert [g.finished for g in out] == [False, True, True, None]
    assert [g.text for g in out] == gen.generate(["a", "b", "c d", "a b"], 8)
