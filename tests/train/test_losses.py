"""The permutation-invariant loss equals a brute-force reference (one full forward per ordering)."""

from __future__ import annotations

import itertools

import pytest
import torch

from purecover.demo.tiny import tiny_causal_lm
from purecover.train.losses import (
    ReplyFormat,
    best_ordering,
    contrastive_loss,
    has_active_dropout,
    negative_pool,
    sample_negatives,
    score_orderings,
    selector_loss,
)

VOCAB = 300
FMT = ReplyFormat(identifier_ids=tuple(range(10, 20)), separator_id=5, end_id=6)


def model(seed=0):
    m = tiny_causal_lm("qwen2", VOCAB, hidden_size=32, intermediate_size=64, num_layers=2, seed=seed)
    m.set_attn_implementation("eager")
    return m


def brute_force(m, prompt, selected, n_docs, lm_weight):
    """min over orderings of full-sequence NLL (each ordering its own forward, with gradient)."""
    losses = []
    first_logits = None
    for order in itertools.permutations(selected) if selected else [()]:
        target = FMT.target(list(order))
        ids = torch.cat([prompt, torch.tensor(target[:-1], dtype=torch.long)])[None]
        logits = m(input_ids=ids).logits[0].float()
        t = prompt.shape[0]
        pred = logits[t - 1 : t - 1 + len(target)]
        losses.append(torch.nn.functional.cross_entropy(pred, torch.tensor(target)))
        first_logits = logits[t - 1, list(FMT.identifier_ids[:n_docs])]
    l_lm = torch.stack(losses).min()
    return contrastive_loss(first_logits, selected) + lm_weight * l_lm


@pytest.mark.parametrize("share_prompt", [True, False])
@pytest.mark.parametrize("selected", [[], [3], [2, 0], [4, 1, 6], [0, 2, 5, 7], [1, 3, 4, 6, 8]])
def test_loss_and_gradients_equal_brute_force(selected, share_prompt):
    torch.manual_seed(1)
    prompt = torch.randint(30, VOCAB, (40,))
    m_fast, m_ref = model(), model()
    out = selector_loss(m_fast, [prompt], [selected], [9], FMT, lm_weight=0.7, share_prompt=share_prompt)
    out.loss.backward()
    ref = brute_force(m_ref, prompt, selected, 9, 0.7)
    ref.backward()
    assert torch.allclose(out.loss, ref, atol=1e-5), (float(out.loss), float(ref))
    for (name, p), q in zip(m_fast.named_parameters(), m_ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("share_prompt", [True, False])
def test_batched_loss_equals_mean_of_single_losses(share_prompt):
    torch.manual_seed(2)
    prompts = [torch.randint(30, VOCAB, (n,)) for n in (25, 40, 33)]
    selected = [[1, 2], [0], [3, 4, 5]]
    m = model()
    batch = selector_loss(m, prompts, selected, [6, 6, 6], FMT, share_prompt=share_prompt)
    singles = [selector_loss(m, [p], [s], [6], FMT, share_prompt=not share_prompt) for p, s in zip(prompts, selected)]
    assert torch.allclose(batch.loss, torch.stack([s.loss for s in singles]).mean(), atol=1e-5)
    assert batch.orders == [s.orders[0] for s in singles]


def test_scoring_with_cache_equals_full_forward():
    torch.manual_seed(3)
    prompt = torch.randint(30, VOCAB, (30,))
    m = model()
    orders = [list(p) for p in itertools.permutations([0, 3, 5])]
    nll, first = score_orderings(m, prompt, orders, FMT)
    for o, value in zip(orders, nll):
        target = FMT.target(o)
        ids = torch.cat([prompt, torch.tensor(target[:-1], dtype=torch.long)])[None]
        with torch.no_grad():
            logits = m(input_ids=ids).logits[0]
        full = torch.nn.functional.cross_entropy(logits[29 : 29 + len(target)], torch.tensor(target))
        assert abs(float(full) - float(value)) < 1e-5
        assert torch.allclose(first, logits[29, list(FMT.identifier_ids)], atol=1e-5)


def test_large_sets_use_the_score_ordering():
    torch.manual_seed(4)
    prompt = torch.randint(30, VOCAB, (30,))
    m = model()
    order, first = best_ordering(m, prompt, [0, 1, 2, 3, 4, 5], 10, FMT, m_exact=5)
    assert order == sorted([0, 1, 2, 3, 4, 5], key=lambda k: (-float(first[k]), k))
    exact, _first = best_ordering(m, prompt, [0, 1, 2], 10, FMT, m_exact=5)
    nll, _ = score_orderings(m, prompt, [list(p) for p in itertools.permutations([0, 1, 2])], FMT)
    assert exact == [list(p) for p in itertools.permutations([0, 1, 2])][int(nll.argmin())]


def test_contrastive_loss_values():
    s = torch.tensor([2.0, 0.0, -1.0], requires_grad=True)
    expected = -(torch.nn.functional.logsigmoid(torch.tensor([2.0, 3.0]))).mean()
    assert torch.allclose(contrastive_loss(s, [0]), expected)
    assert contrastive_loss(s, []).item() == 0.0 and contrastive_loss(s, [0, 1, 2]).item() == 0.0
    contrastive_loss(s, [0, 1, 2]).backward()  # zero, but differentiable


def test_gradient_checkpointing_falls_back_to_the_two_pass_path():
    torch.manual_seed(5)
    prompt = torch.randint(30, VOCAB, (35,))
    m_ckpt, m_ref = model(), model()
    m_ckpt.gradient_checkpointing_enable()
    m_ckpt.train()
    m_ref.train()
    out = selector_loss(m_ckpt, [prompt], [[1, 4, 2]], [8], FMT)  # the cache is off: two-pass path
    ref = selector_loss(m_ref, [prompt], [[1, 4, 2]], [8], FMT, share_prompt=True)
    out.loss.backward()
    ref.loss.backward()
    assert out.orders == ref.orders and torch.allclose(out.loss, ref.loss, atol=1e-5)
    for p, q in zip(m_ckpt.parameters(), m_ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def _lora_with_dropout(dropout: float = 0.5):
    """The tiny model with a LoRA adapter whose B is not zero (so its dropout changes the output), in train mode."""
    from peft import LoraConfig, get_peft_model

    m = get_peft_model(model(seed=3), LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                 init_lora_weights=False))
    m.train()
    return m


def naive_best_order(m, prompt, selected):
    """The lowest mean-NLL ordering by one full eval-mode forward per ordering (ties: the first in
    itertools.permutations order, like the loss)."""
    m.eval()
    with torch.no_grad():
        nlls = []
        orders = list(itertools.permutations(selected))
        for order in orders:
            target = FMT.target(list(order))
            ids = torch.cat([prompt, torch.tensor(target[:-1], dtype=torch.long)])[None]
            logits = m(input_ids=ids).logits[0].float()
            t = prompt.shape[0]
            nlls.append(float(torch.nn.functional.cross_entropy(logits[t - 1 : t - 1 + len(target)],
                                                                torch.tensor(target))))
    m.train()
    return list(orders[int(torch.argmin(torch.tensor(nlls)))])


@pytest.mark.parametrize("share_prompt", [True, False])
def test_ordering_is_chosen_without_dropout_noise(share_prompt):
    """With LoRA dropout 0.5 the chosen ordering equals naive eval-mode enumeration for every draw of the
    training forward's dropout (the prompt cache used for scoring is dropout-free too)."""
    pytest.importorskip("peft")
    m = _lora_with_dropout()
    assert has_active_dropout(m)
    m.eval()
    assert not has_active_dropout(m)
    m.train()
    cases = [([1, 4, 2], 50), ([0, 3, 5, 7], 60), ([2, 8], 45), ([6, 1, 3, 0, 9], 40)]
    for i, (selected, length) in enumerate(cases):
        torch.manual_seed(100 + i)
        prompt = torch.randint(30, VOCAB, (length,))
        expected = naive_best_order(m, prompt, selected)
        for draw in range(3):  # another dropout draw each time: same ordering
            torch.manual_seed(draw)
            out = selector_loss(m, [prompt], [selected], [10], FMT, share_prompt=share_prompt)
            assert out.orders[0] == expected, (selected, draw)
            assert m.training  # the train mode is restored


@pytest.mark.parametrize("share_prompt", [True, False])
def test_sequence_sum_reduction_is_the_replys_total_nll(share_prompt):
    """lm_reduction=sequence_sum gives −log p(reply) of the best ordering (the paper's formula): the
    token-mean L_LM times the reply's 2|S| tokens, per question, averaged over the batch; same ordering."""
    torch.manual_seed(4)
    prompts = [torch.randint(30, VOCAB, (n,)) for n in (30, 36)]
    selected = [[1, 4, 2], [5]]
    m = model()
    mean = selector_loss(m, prompts, selected, [8, 8], FMT, share_prompt=share_prompt)
    total = selector_loss(m, prompts, selected, [8, 8], FMT, share_prompt=share_prompt, lm_reduction="sequence_sum")
    assert total.orders == mean.orders
    singles = [selector_loss(m, [p], [s], [8], FMT, share_prompt=share_prompt) for p, s in zip(prompts, selected)]
    expected = sum(float(o.l_lm) * len(FMT.target(o.orders[0])) for o in singles) / 2
    assert float(total.l_lm) == pytest.approx(expected, rel=1e-5)
    assert float(total.l_cl) == pytest.approx(float(mean.l_cl), rel=1e-6)
    with pytest.raises(ValueError, match="lm_reduction 'tokens'"):
        selector_loss(m, prompts, selected, [8, 8], FMT, lm_reduction="tokens")


@pytest.mark.parametrize("share_prompt", [True, False])
def test_cl_weight_scales_the_contrastive_term(share_prompt):
    """L = cl_weight · L_CL + lm_weight · L_LM on both paths; cl_weight = 0 leaves L_LM alone (the ablation)."""
    torch.manual_seed(4)
    prompts = [torch.randint(30, VOCAB, (n,)) for n in (30, 36)]
    selected = [[1, 4, 2], [5]]
    m = model()
    base = selector_loss(m, prompts, selected, [8, 8], FMT, share_prompt=share_prompt)
    for w in (0.0, 2.5):
        out = selector_loss(m, prompts, selected, [8, 8], FMT, share_prompt=share_prompt, cl_weight=w)
        assert float(out.l_cl) == pytest.approx(float(base.l_cl), rel=1e-5)
        assert float(out.loss.detach()) == pytest.approx(w * float(base.l_cl) + float(base.l_lm), rel=1e-5)


def released_reference(m, prompt, target, rejected, n_docs, lm_weight):
    """The released code's loss, read from its formula: lm_weight · mean token NLL of the target in its own order
    + mean over (target i, negative j) of −log σ(s_i − s_j), one plain forward."""
    reply = FMT.target(list(target))
    ids = torch.cat([prompt, torch.tensor(reply[:-1], dtype=torch.long)])[None]
    logits = m(input_ids=ids).logits[0].float()
    t = prompt.shape[0]
    sft = torch.nn.functional.cross_entropy(logits[t - 1 : t - 1 + len(reply)], torch.tensor(reply))
    s = logits[t - 1, list(FMT.identifier_ids[:n_docs])]
    bpr = torch.stack([-torch.nn.functional.logsigmoid(s[i] - s[j]) for i in target for j in rejected]).mean()
    return bpr + lm_weight * sft


@pytest.mark.parametrize("share_prompt", [True, False])
def test_released_code_loss_equals_its_formula(share_prompt):
    """reply_order target + given negatives: the loss and gradients of 0.01 · SFT(target as ordered) + BPR."""
    torch.manual_seed(3)
    prompt = torch.randint(30, VOCAB, (40,))
    target, rejected = [6, 1, 3], [0, 8, 4]
    m_fast, m_ref = model(), model()
    out = selector_loss(m_fast, [prompt], [target], [9], FMT, lm_weight=0.01, share_prompt=share_prompt,
                        reply_order="target", rejected=[rejected])
    out.loss.backward()
    ref = released_reference(m_ref, prompt, target, rejected, 9, 0.01)
    ref.backward()
    assert out.orders == [target]
    assert torch.allclose(out.loss, ref, atol=1e-5), (float(out.loss), float(ref))
    for (name, p), q in zip(m_fast.named_parameters(), m_ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


def test_target_order_is_kept_where_the_best_ordering_differs():
    """The paper's loss reorders the label; reply_order target trains on the order given."""
    torch.manual_seed(4)
    m = model()
    for _ in range(20):
        prompt = torch.randint(30, VOCAB, (30,))
        target = [5, 2, 7]
        best = selector_loss(m, [prompt], [target], [9], FMT).orders[0]
        if best != target:
            break
    else:
        pytest.fail("no prompt whose best ordering differs from the given one")
    kept = selector_loss(m, [prompt], [target], [9], FMT, reply_order="target")
    assert kept.orders == [target] and best != target
    assert float(kept.l_lm) > float(selector_loss(m, [prompt], [target], [9], FMT).l_lm)


def test_contrastive_loss_with_given_negatives():
    s = torch.tensor([2.0, -1.0, 0.5, 3.0, -2.0])
    got = contrastive_loss(s, [0, 3], [1, 4])
    want = -torch.nn.functional.logsigmoid(torch.tensor([3.0, 4.0, 4.0, 5.0])).mean()
    assert torch.allclose(got, want)
    assert float(contrastive_loss(s, [0], [])) == 0.0
    with pytest.raises(ValueError, match=r"\[0\] are both selected and rejected"):
        contrastive_loss(s, [0, 3], [0, 1])
    with pytest.raises(ValueError, match="reply_order 'gain'"):
        selector_loss(model(), [torch.arange(30, 50)], [[1]], [9], FMT, reply_order="gain")


def test_negative_pool_is_the_tail_of_target_then_retrieval_order():
    # shown in retrieval order: the unselected, last 10 of them
    pool = negative_pool([0, 4, 2, 7, 11], 20, None, 10)
    assert pool == [9, 10, 12, 13, 14, 15, 16, 17, 18, 19]
    # shown shuffled: order[i] is the retrieval position of shown passage i; the pool holds the shown positions of
    # the 10 unselected passages retrieved last
    order = list(reversed(range(20)))  # shown i = retrieved 19 - i
    pool = negative_pool([19, 15, 17, 12, 8], 20, order, 10)  # retrieved 0, 4, 2, 7, 11 selected
    assert sorted(19 - i for i in pool) == [9, 10, 12, 13, 14, 15, 16, 17, 18, 19]
    assert not set(pool) & {19, 15, 17, 12, 8}
    assert negative_pool([0, 1], 4, None, 10) == [2, 3]  # fewer candidates than the pool


def test_sampled_negatives_are_seeded_uniform_and_fresh_per_step():
    pool = list(range(10, 20))
    a = sample_negatives(pool, 5, seed=0, key="q1:retrieval:3")
    assert a == sample_negatives(pool, 5, seed=0, key="q1:retrieval:3")  # a resume draws the same
    assert len(a) == len(set(a)) == 5 and set(a) <= set(pool) and a == sorted(a, key=pool.index)
    draws = {tuple(sample_negatives(pool, 5, 0, f"q1:retrieval:{step}")) for step in range(40)}
    assert len(draws) > 20  # a fresh draw each step
    counts = torch.zeros(20)
    for step in range(2000):
        counts[sample_negatives(pool, 5, 0, f"q:{step}")] += 1
    assert counts[:10].sum() == 0 and (counts[10:] - 1000).abs().max() < 100  # each pool member about half the time
    assert sample_negatives([3, 4], 5, 0, "q") == [3, 4]
