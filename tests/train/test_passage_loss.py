"""The passage readout's loss: L_CL and the per-passage BCE on the marker scores, against the formula written out
(one plain forward, the scores picked by hand), with and without L_LM, on both code paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from purecover.demo.tiny import tiny_causal_lm
from purecover.train.losses import ReplyFormat, passage_bce, selector_loss
from tests.train.test_losses import brute_force

VOCAB = 300
FMT = ReplyFormat(identifier_ids=tuple(range(10, 20)), separator_id=5, end_id=6)
READ = 42  # the score token


def model(seed=0):
    m = tiny_causal_lm("qwen2", VOCAB, hidden_size=32, intermediate_size=64, num_layers=2, seed=seed)
    m.set_attn_implementation("eager")
    return m


def by_hand(m, prompt, positions, selected, cl_weight, bce_weight):
    """The formula: s_k = logit of READ at position k; L = cl · −mean log σ(s_i − s_j) + bce · mean BCE."""
    s = m(input_ids=prompt[None]).logits[0, positions, READ].float()
    pos = torch.tensor([k in selected for k in range(len(positions))])
    cl = -F.logsigmoid(s[pos][:, None] - s[~pos][None, :]).mean() if pos.any() and (~pos).any() else s.sum() * 0
    bce = -(pos.float() * F.logsigmoid(s) + (~pos).float() * F.logsigmoid(-s)).mean()
    return cl_weight * cl + bce_weight * bce, s


@pytest.mark.parametrize("selected", [[], [2], [0, 3], [1, 4, 5]])
@pytest.mark.parametrize("bce_weight", [0.0, 0.5])
def test_loss_and_gradients_equal_the_formula(selected, bce_weight):
    torch.manual_seed(1)
    prompt = torch.randint(30, VOCAB, (48,))
    positions = [6, 13, 20, 27, 33, 40]
    m_fast, m_ref = model(), model()
    out = selector_loss(m_fast, [prompt], [selected], [6], FMT, lm_weight=0.0, cl_weight=0.8,
                        read_positions=[positions], read_token=READ, bce_weight=bce_weight)
    ref, s = by_hand(m_ref, prompt, positions, selected, 0.8, bce_weight)
    out.loss.backward()
    ref.backward()
    assert torch.allclose(out.loss, ref, atol=1e-5), (float(out.loss), float(ref))
    assert torch.allclose(out.first_logits[0], s.detach(), atol=1e-5)
    assert float(out.l_lm) == 0.0 and out.orders == [selected]
    for (name, p), q in zip(m_fast.named_parameters(), m_ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("share_prompt", [True, False])
def test_with_the_lm_loss_it_adds_the_identifier_replys_loss(share_prompt):
    """lm_weight > 0: L = L_CL(marker scores) + bce · L_BCE + λ · L_LM, with L_LM the identifier reply's minimum
    over orderings (the brute-force reference of the identifier tests, its L_CL taken out)."""
    torch.manual_seed(2)
    prompt = torch.randint(30, VOCAB, (44,))
    positions = [5, 12, 19, 26, 31]
    selected = [1, 3]
    m_fast, m_cl, m_lm, m_lm_cl = model(), model(), model(), model()
    out = selector_loss(m_fast, [prompt], [selected], [5], FMT, lm_weight=0.7, share_prompt=share_prompt,
                        read_positions=[positions], read_token=READ, bce_weight=0.3)
    cl_part, s = by_hand(m_cl, prompt, positions, selected, 1.0, 0.3)
    lm_part = brute_force(m_lm, prompt, selected, 5, 0.7) - brute_force(m_lm_cl, prompt, selected, 5, 0.0)
    assert torch.allclose(out.loss, cl_part + lm_part, atol=1e-5), (float(out.loss), float(cl_part + lm_part))
    assert torch.allclose(out.first_logits[0], s.detach(), atol=1e-5)
    assert float(out.l_lm) > 0


def test_batch_is_the_mean_of_its_questions():
    torch.manual_seed(3)
    prompts = [torch.randint(30, VOCAB, (n,)) for n in (30, 41)]
    reads = [[4, 9, 15, 22], [3, 10, 18, 25, 33, 39]]
    selected = [[1], [0, 5]]
    m = model()
    batch = selector_loss(m, prompts, selected, [4, 6], FMT, lm_weight=0.0, read_positions=reads, read_token=READ,
                          bce_weight=1.0)
    singles = [selector_loss(m, [p], [s], [len(r)], FMT, lm_weight=0.0, read_positions=[r], read_token=READ,
                             bce_weight=1.0) for p, r, s in zip(prompts, reads, selected)]
    assert torch.allclose(batch.loss, torch.stack([x.loss for x in singles]).mean(), atol=1e-6)


def test_bad_read_positions_are_refused():
    prompt = torch.randint(30, VOCAB, (20,))
    with pytest.raises(ValueError, match="read_token"):
        selector_loss(model(), [prompt], [[0]], [3], FMT, read_positions=[[2, 5, 9]])
    with pytest.raises(ValueError, match="2 read positions for 3 candidates"):
        selector_loss(model(), [prompt], [[0]], [3], FMT, read_positions=[[2, 5]], read_token=READ)


def test_passage_bce_is_the_binary_cross_entropy():
    s = torch.tensor([2.0, -1.0, 0.5])
    want = -(F.logsigmoid(s[0]) + F.logsigmoid(-s[1]) + F.logsigmoid(s[2])) / 3
    assert torch.allclose(passage_bce(s, [0, 2]), want)
    assert torch.allclose(passage_bce(s, []), -F.logsigmoid(-s).mean())


@pytest.mark.parametrize("lm_weight", [0.0, 0.5])
def test_with_a_scoring_head_the_scores_are_the_head_on_the_hidden_states(lm_weight):
    """passage_score head: s_k = w · h_k + b with h_k the final hidden state at marker k; L and the gradients of the
    model and of the head equal the formula written out (one plain forward with output_hidden_states)."""
    from purecover.models.score_head import HeadReadout, ScoreHead

    torch.manual_seed(3)
    prompt = torch.randint(30, VOCAB, (40,))
    positions, selected = [5, 12, 19, 26, 33], [1, 3]
    m_fast, m_ref = model(), model()
    torch.manual_seed(4)
    head_fast = ScoreHead(32)
    head_ref = ScoreHead(32)
    head_ref.load_state_dict(head_fast.state_dict())
    out = selector_loss(m_fast, [prompt], [selected], [5], FMT, lm_weight=lm_weight, cl_weight=0.8,
                        read_positions=[positions], read_token=READ, bce_weight=0.5,
                        score_head=HeadReadout.of(m_fast, head_fast))
    hidden = m_ref(input_ids=prompt[None], output_hidden_states=True).hidden_states[-1][0]
    s = hidden[positions] @ head_ref.proj.weight[0] + head_ref.proj.bias[0]
    pos = torch.tensor([k in selected for k in range(len(positions))])
    ref = 0.8 * -F.logsigmoid(s[pos][:, None] - s[~pos][None, :]).mean() + 0.5 * passage_bce(s, selected)
    assert torch.allclose(out.first_logits[0], s.detach(), atol=1e-5)
    if lm_weight:  # L_LM is the identifier reply's, untouched by the head: take it from the output
        ref = ref + lm_weight * out.l_lm
    assert torch.allclose(out.loss, ref, atol=1e-5), (float(out.loss), float(ref))
    out.loss.backward()
    ref.backward()
    assert head_fast.proj.weight.grad is not None and float(head_fast.proj.weight.grad.abs().sum()) > 0
    assert torch.allclose(head_fast.proj.weight.grad, head_ref.proj.weight.grad, atol=1e-5, rtol=1e-4)
    assert torch.allclose(head_fast.proj.bias.grad, head_ref.proj.bias.grad, atol=1e-5, rtol=1e-4)
    if not lm_weight:
        for (name, p), q in zip(m_fast.named_parameters(), m_ref.parameters()):
            assert (p.grad is None) == (q.grad is None), name  # the vocabulary projection is not in this loss
            assert p.grad is None or torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name
    with pytest.raises(ValueError, match="needs read_positions"):
        selector_loss(m_fast, [prompt], [selected], [5], FMT, score_head=HeadReadout.of(m_fast, head_fast))
