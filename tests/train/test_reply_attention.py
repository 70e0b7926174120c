"""The best reply's training-forward attention (purecover.train.reply_attention) against the model's own."""

from __future__ import annotations

import pytest
import torch

from purecover.train import reply_attention
from tests.train.test_prefix_tree import VOCAB, tiny


@pytest.mark.parametrize(("arch", "kwargs"), [("qwen2", {}), ("llama", {"num_kv_heads": 4}),
                                               ("mistral", {"sliding_window": 8})], ids=str)
def test_reply_attention_equals_the_models_attention(arch, kwargs):
    """The best reply's training forward after a cached prompt: same logits and gradients with reply_attention
    as with the model's own attention (grouped-query heads, plain heads, a sliding window that binds)."""
    results = []
    for use in (False, True):
        m = tiny(arch, **kwargs)
        m.train()
        torch.manual_seed(10)
        prompt = torch.randint(30, VOCAB, (20,))
        reply = torch.tensor([[12, 5, 17, 5, 11]])
        out = m(input_ids=prompt[None], use_cache=True, logits_to_keep=1)
        with reply_attention.reply_attention_for(m, None if use else False) as applied:
            logits = m(input_ids=reply, past_key_values=out.past_key_values, position_ids=torch.arange(20, 25)[None],
                       use_cache=True).logits
        assert applied == use and m.config._attn_implementation == "eager"
        (logits.float().log_softmax(-1)[0, :, 7].sum() + out.logits.sum()).backward()
        results.append((logits.detach(), [p.grad.clone() for p in m.parameters()]))
    (ref, ref_grads), (got, got_grads) = results
    assert torch.allclose(got, ref, atol=1e-5)
    for a, b in zip(got_grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_reply_attention_is_not_used_with_soft_capping():
    m = tiny()
    assert reply_attention.reply_attention_applies(m)
    m.config.attn_logit_softcapping = 50.0
    assert not reply_attention.reply_attention_applies(m)
