"""Attention capture equals segment averages of eager `output_attentions` (docs/concepts/method.md#segment-attention)."""

from __future__ import annotations

import pytest
import torch

from purecover.teacher.capture import SegmentSpec, capture_segment_attention, reference_segment_attention

TEXT = ("The Mirren rises in the Hollin hills and flows west through Tollbridge, a market town known for its "
        "clockmakers. Ada Brill, born there in 1841, built the first clockwork seed drill. ")


def tiny(arch: str, tokenizer, **extra):
    from purecover.demo.tiny import tiny_causal_lm

    model = tiny_causal_lm(arch, len(tokenizer), hidden_size=64, intermediate_size=96, num_layers=3,
                           max_position_embeddings=4096, **extra)
    model.set_attn_implementation("sdpa")
    return model


def token_batch(tokenizer, lengths):
    """Left-padded batch of real text of the given token lengths."""
    ids_all = tokenizer(TEXT * 60, add_special_tokens=False)["input_ids"]
    t = max(lengths)
    ids = torch.full((len(lengths), t), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(lengths), t), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, t - n :] = torch.tensor(ids_all[i * 7 : i * 7 + n])
        mask[i, t - n :] = 1
    return ids, mask


def spec_for(n: int) -> SegmentSpec:
    """Documents in the first 60%, steps and an answer at the end, plus an empty column."""
    d = int(n * 0.6) // 4
    docs = [(i * d, (i + 1) * d) for i in range(4)]
    s0 = int(n * 0.7)
    step = max(1, (n - s0 - 3) // 3)
    steps = [(s0 + i * step, s0 + (i + 1) * step) for i in range(3)]
    answer = (n - 3, n)
    return SegmentSpec.of([*steps, answer], [*docs, *steps, (5, 5)])


def eager_attentions(model, ids, mask):
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
    finally:
        model.set_attn_implementation("sdpa")


def reference(model, ids, mask, specs, layers="all"):
    return reference_segment_attention(eager_attentions(model, ids, mask), mask, specs, layers)


def assert_close(got, want, tol=1e-6):
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert torch.equal(torch.isnan(g), torch.isnan(w))
        finite = ~torch.isnan(w)
        assert (g[finite] - w[finite]).abs().max().item() <= tol


@pytest.mark.parametrize("arch", ["qwen2", "llama", "mistral"])
@pytest.mark.parametrize("length", [48, 257, 700])
def test_capture_equals_eager_single_sequence(qwen_tokenizer_dir, arch, length):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    extra = {"sliding_window": 128} if arch == "mistral" else {}
    model = tiny(arch, tok, **extra)
    ids, mask = token_batch(tok, [length])
    specs = [spec_for(length)]
    got = capture_segment_attention(model, ids, mask, specs)
    assert_close(got, reference(model, ids, mask, specs))
    assert model.config._attn_implementation == "sdpa"  # restored


@pytest.mark.parametrize("arch", ["qwen2", "llama", "mistral"])
def test_capture_equals_eager_padded_batch_and_layer_subsets(qwen_tokenizer_dir, arch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny(arch, tok)
    ids, mask = token_batch(tok, [300, 181])
    specs = [spec_for(300), spec_for(181)]
    attentions = eager_attentions(model, ids, mask)
    for layers in ("all", [0], [1, 2], [-1]):
        got = capture_segment_attention(model, ids, mask, specs, layers=layers)
        assert_close(got, reference_segment_attention(attentions, mask, specs, layers))


def test_per_layer_capture_keeps_each_layer_as_eager_sees_it(qwen_tokenizer_dir):
    """per_layer=True: slice l is layer l's own segment attention (eager), and the mean over slices is the
    averaged capture, from the same single pass."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny("llama", tok)
    ids, mask = token_batch(tok, [260, 140])
    specs = [spec_for(260), spec_for(140)]
    attentions = eager_attentions(model, ids, mask)
    for layers, read in (("all", [0, 1, 2]), ([2, 0], [0, 2])):
        split = capture_segment_attention(model, ids, mask, specs, layers=layers, per_layer=True)
        assert [m.shape[0] for m in split] == [len(read)] * 2
        for slot, layer in enumerate(read):
            assert_close([m[slot] for m in split], reference_segment_attention(attentions, mask, specs, [layer]))
        whole = capture_segment_attention(model, ids, mask, specs, layers=layers)
        assert_close([m.mean(dim=0) for m in split], whole, tol=1e-12)
    assert not torch.allclose(split[0][0].nan_to_num(), split[0][1].nan_to_num())  # the layers differ


def test_row_chunking_does_not_change_the_result(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny("qwen2", tok)
    ids, mask = token_batch(tok, [400, 350])
    specs = [spec_for(400), spec_for(350)]
    whole = capture_segment_attention(model, ids, mask, specs)
    tiny_chunks = capture_segment_attention(model, ids, mask, specs, max_chunk_bytes=100_000)  # two rows per chunk
    assert_close(tiny_chunks, whole, tol=1e-9)


def test_padded_batch_equals_separate_sequences(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny("qwen2", tok)
    ids, mask = token_batch(tok, [220, 90])
    specs = [spec_for(220), spec_for(90)]
    batched = capture_segment_attention(model, ids, mask, specs)
    alone = capture_segment_attention(model, ids[1:, -90:], mask[1:, -90:], specs[1:])
    assert_close(batched[1:], alone, tol=1e-6)


def test_bad_spans_and_layers_are_clear_errors(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny("qwen2", tok)
    ids, mask = token_batch(tok, [50])
    with pytest.raises(ValueError, match=r"span \[40, 60\) outside its 50 tokens"):
        capture_segment_attention(model, ids, mask, [SegmentSpec.of([(40, 60)], [(0, 5)])])
    with pytest.raises(ValueError, match="out of range"):
        capture_segment_attention(model, ids, mask, [spec_for(50)], layers=[7])
    with pytest.raises(ValueError, match="2 segment specs for a batch of 1"):
        capture_segment_attention(model, ids, mask, [spec_for(50)] * 2)


def test_soft_capped_logits_gemma2_padded_batch():
    """Gemma2 soft-caps attention logits (no sdpa kernel): the explicit path must match eager too."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=500, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=32,
                          attn_logit_softcapping=5.0, query_pre_attn_scalar=16)
    model = Gemma2ForCausalLM(config).eval()
    ids = torch.randint(0, 500, (2, 80))
    mask = torch.ones_like(ids)
    mask[1, :20] = 0
    specs = [SegmentSpec.of([(60, 70), (70, 80)], [(0, 20), (20, 50), (60, 70)]),
             SegmentSpec.of([(40, 50), (50, 60)], [(0, 20), (20, 40)])]
    got = capture_segment_attention(model, ids, mask, specs)
    with torch.no_grad():
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert_close(got, reference_segment_attention(attentions, mask, specs))


def tiny_gemma3(window: int = 8):
    """A tiny Gemma3 text model whose layers 0, 1 and 3 slide over `window` tokens and layer 2 sees everything."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=500, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                              sliding_window=window, max_position_embeddings=512,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                           "sliding_attention"])
    return Gemma3ForCausalLM(config).eval()


def test_sliding_window_layers_gemma3_padded_batch():
    """A sliding layer's capture uses its own sliding mask: equal to eager on every layer subset, and what lies
    beyond the window (the first document, 40+ tokens before the steps, window 8) is exactly zero there."""
    model = tiny_gemma3(window=8)
    ids = torch.randint(0, 500, (2, 72))
    mask = torch.ones_like(ids)
    mask[1, :12] = 0  # left padding
    specs = [SegmentSpec.of([(50, 58), (58, 66), (66, 72)], [(0, 10), (10, 40), (44, 52), (50, 58)]),
             SegmentSpec.of([(40, 48), (48, 60)], [(0, 12), (12, 30), (36, 44)])]
    with torch.no_grad():
        model.set_attn_implementation("eager")
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
        model.set_attn_implementation("sdpa")
    for layers in ("all", [0], [1], [2], [3], [0, 3], [-1]):
        got = capture_segment_attention(model, ids, mask, specs, layers=layers)
        assert_close(got, reference_segment_attention(attentions, mask, specs, layers))
    sliding = capture_segment_attention(model, ids, mask, specs, layers=[0])
    full = capture_segment_attention(model, ids, mask, specs, layers=[2])
    assert torch.all(sliding[0][:, 0] == 0) and torch.all(sliding[1][:, 0] == 0)  # out of the window
    assert torch.all(full[0][:, 0] > 0) and torch.all(full[1][:, 0] > 0)  # the full layer sees it
    # full_attention reads layer 2 only: the same as listing it
    assert_close(capture_segment_attention(model, ids, mask, specs, layers="full_attention"), full, tol=0)


@pytest.mark.parametrize("length", [48, 257])
def test_sliding_window_layers_qwen2_config(qwen_tokenizer_dir, length):
    """Qwen2 with use_sliding_window: layers from max_window_layers on slide (window 32 tokens)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    model = tiny("qwen2", tok, use_sliding_window=True, sliding_window=32, max_window_layers=1)
    assert model.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    ids, mask = token_batch(tok, [length, length - 20])
    specs = [spec_for(length), spec_for(length - 20)]
    attentions = eager_attentions(model, ids, mask)
    for layers in ("all", [0], [1], [1, 2]):
        got = capture_segment_attention(model, ids, mask, specs, layers=layers)
        assert_close(got, reference_segment_attention(attentions, mask, specs, layers))
    if length > 100:  # the first document lies beyond the window of the sliding layers
        assert torch.all(capture_segment_attention(model, ids, mask, specs, layers=[1])[0][:-1, 0] == 0)
