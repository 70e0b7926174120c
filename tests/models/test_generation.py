"""Generation backends: HF on a tiny real model, the vLLM adapter against a fake `vllm` module."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest
import torch

from purecover.data.samples import sample_data_dir
from purecover.models.generation import HFGenerator, VLLMGenerator, make_generator

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


# ---------------------------------------------------------------------------- vLLM adapter with a fake module


class FakeLogprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


class FakeSamplingParams:
    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


def _output(text: str, logprobs):
    return types.SimpleNamespace(outputs=[types.SimpleNamespace(text=text, logprobs=logprobs)])


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in `vllm` module (not a package: `vllm.distributed` is absent)."""
    mod = types.ModuleType("vllm")
    mod.instances = []

    class FakeLLM:
        def __init__(self, **kwargs) -> None:
            self.kwargs = kwargs
            self.calls: list[tuple[list[str], FakeSamplingParams]] = []
            self.logprobs_for: dict[str, object] = {}
            mod.instances.append(self)

        def generate(self, prompts, params):
            assert isinstance(prompts, list)
            self.calls.append((list(prompts), params))
            out = []
            for p in prompts:
                if params.kwargs.get("max_tokens") == 1 and "allowed_token_ids" in params.kwargs:
                    out.append(_output("", self.logprobs_for.get(p, [])))
                else:
                    out.append(_output(f"<{p}>", None))
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


def test_vllm_generate_is_greedy_and_in_prompt_order(fake_vllm):
    gen = VLLMGenerator("m")
    prompts = ("p2", "p0", "p1")  # any sequence
    assert gen.generate(prompts, max_new_tokens=17) == ["<p2>", "<p0>", "<p1>"]
    (sent, params), = gen.llm.calls
    assert sent == ["p2", "p0", "p1"]
    assert params.kwargs["temperature"] == 0.0
    assert params.kwargs["max_tokens"] == 17


def test_vllm_token_probabilities(fake_vllm):
    gen = VLLMGenerator("m")
    gen.llm.logprobs_for = {
        "a": [{15: FakeLogprob(math.log(0.5)), 17: FakeLogprob(math.log(0.25)), 999: FakeLogprob(-0.1)}],
        "b": [{16: FakeLogprob(0.0)}],
        "c": [],  # no logprobs at all
        "d": [{15: math.log(0.125)}],  # plain floats are accepted too
    }
    probs = gen.token_probabilities(["a", "b", "c", "d"], [15, 16, 17])
    assert probs[0] == pytest.approx([0.5, 0.0, 0.25])
    assert probs[1] == pytest.approx([0.0, 1.0, 0.0])
    assert probs[2] == [0.0, 0.0, 0.0]
    assert probs[3] == pytest.approx([0.125, 0.0, 0.0])
    (sent, params), = gen.llm.calls
    assert sent == ["a", "b", "c", "d"]
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
    with pytest.raises(ImportError, match=r"purecover\[vllm\]"):
        VLLMGenerator("m")
    with pytest.raises(ImportError, match=r"purecover\[vllm\]"):
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
    gen = make_generator("vllm", model_name=str(Path("/m")), tensor_parallel_size=2, dtype="float16", seed=3,
                         trust_remote_code=True)
    assert isinstance(gen, VLLMGenerator)
    kwargs = fake_vllm.instances[0].kwargs
    assert (kwargs["model"], kwargs["tensor_parallel_size"], kwargs["dtype"], kwargs["seed"],
            kwargs["trust_remote_code"]) == (str(Path("/m")), 2, "float16", 3, True)
