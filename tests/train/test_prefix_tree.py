"""The prefix-tree scoring of orderings (purecover.train.prefix_tree) against the previous construction and
against one full forward per ordering."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from purecover.demo.tiny import tiny_causal_lm
from purecover.train import prefix_tree
from purecover.train.losses import ReplyFormat
from purecover.train.prefix_tree import score_tree, tree_attention, tree_layout

VOCAB = 300
FMT = ReplyFormat(identifier_ids=tuple(range(10, 20)), separator_id=5, end_id=6)
CPU = torch.device("cpu")

ORDERING_SETS = [
    [list(p) for p in itertools.permutations(s)] for s in ([3], [2, 0], [4, 1, 6], [0, 2, 5, 7], [1, 3, 4, 6, 8])
] + [
    [[1], [1, 2]],  # one ordering is a prefix of another
    [[1, 2], [1]],
    [[]],  # the empty reply: the end token only
    [[], [2, 7]],
    [[5, 2, 7], [5, 7, 2], [2, 5, 7]],  # some permutations only
    [[9, 0, 4, 1]],
]


def old_prefix_tree(orderings, fmt, t_prompt):
    """The construction the layout replaces (Python loops, tokens and positions as lists), verbatim."""
    toks, pos, parent, nodes, paths = [], [], [], {}, []
    for order in orderings:
        order = tuple(order)
        terms = []
        prev = -1
        if not order:
            paths.append([(-1, fmt.end_id)])
            continue
        for j, k in enumerate(order):
            last = j == len(order) - 1
            prefix = order[: j + 1]
            if prefix not in nodes or (not last and nodes[prefix][1] is None):
                if prefix in nodes:
                    i_id = nodes[prefix][0]
                else:
                    i_id = len(toks)
                    toks.append(fmt.identifier_ids[k])
                    pos.append(t_prompt + 2 * j)
                    parent.append(prev)
                i_sep = None
                if not last:
                    i_sep = len(toks)
                    toks.append(fmt.separator_id)
                    pos.append(t_prompt + 2 * j + 1)
                    parent.append(i_id)
                nodes[prefix] = (i_id, i_sep)
            i_id, i_sep = nodes[prefix]
            terms.append((prev, fmt.identifier_ids[k]))
            if last:
                terms.append((i_id, fmt.end_id))
            else:
                terms.append((i_id, fmt.separator_id))
                prev = i_sep
        paths.append(terms)
    n = len(toks)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        allowed[i, i] = True
        if parent[i] >= 0:
            allowed[i] |= allowed[parent[i]]
    return toks, pos, allowed, paths


def symbol_tokens(elements):
    return torch.tensor([FMT.identifier_ids[k] for k in elements] + [FMT.separator_id, FMT.end_id])


@pytest.mark.parametrize("orderings", ORDERING_SETS, ids=lambda o: str(o)[:40])
def test_layout_equals_the_previous_construction(orderings):
    """Same tree tokens, positions, visibility and per-ordering (row, token) terms as the loop construction."""
    toks, pos, allowed, paths = old_prefix_tree(orderings, FMT, 37)
    layout, elements = tree_layout(orderings)
    sym = symbol_tokens(elements)
    assert sym[layout.node_sym].tolist() == toks
    assert (layout.node_offset + 37).tolist() == pos
    assert torch.equal(layout.visible, allowed)
    for p, terms in enumerate(paths):
        valid = layout.term_valid[p]
        assert int(layout.n_terms[p]) == len(terms)
        got = list(zip(layout.term_row[p][valid].tolist(), sym[layout.term_sym[p][valid]].tolist()))
        assert got == terms
    # the ancestors rows list exactly the visible tree tokens
    for i in range(layout.n):
        assert set(layout.ancestors[i][layout.ancestor_valid[i]].tolist()) == set(allowed[i].nonzero()[:, 0].tolist())


def test_layout_is_cached_per_shape():
    a, el_a = tree_layout([list(p) for p in itertools.permutations([1, 2, 3])])
    b, el_b = tree_layout([list(p) for p in itertools.permutations([9, 4, 7])])
    assert a is b and el_a == [1, 2, 3] and el_b == [9, 4, 7]
    five, _ = tree_layout([list(p) for p in itertools.permutations([0, 1, 2, 3, 4])])
    assert five.n == 530 and five.group_reps.shape[0] == 29  # first-layer groups: 5 ids x 5 depths + 4 separators
    with pytest.raises(ValueError, match="no orderings"):
        tree_layout([])


def tiny(arch="qwen2", **kwargs):
    kwargs = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2} | kwargs
    m = tiny_causal_lm(arch, VOCAB, seed=0, **kwargs)
    m.set_attn_implementation("eager")
    return m


def prompt_cache(m, length, seed=0):
    torch.manual_seed(seed)
    prompt = torch.randint(30, VOCAB, (length,))
    with torch.no_grad():
        out = m(input_ids=prompt[None], use_cache=True, logits_to_keep=1)
    return prompt, out.past_key_values, out.logits[0, -1].float().log_softmax(-1)


def full_forward_nll(m, prompt, orderings):
    """Mean token NLL of each ordering's reply, one full forward of prompt + reply each."""
    out = []
    t = prompt.shape[0]
    for o in orderings:
        target = FMT.target(list(o))
        ids = torch.cat([prompt, torch.tensor(target[:-1], dtype=torch.long)])[None]
        with torch.no_grad():
            logits = m(input_ids=ids).logits[0].float()
        out.append(float(torch.nn.functional.cross_entropy(logits[t - 1 : t - 1 + len(target)], torch.tensor(target))))
    return torch.tensor(out)


def score(m, cache, t, lp_first, orderings, dense=None):
    return score_tree(m, cache, t, lp_first, orderings, FMT.identifier_ids, FMT.separator_id, FMT.end_id, CPU,
                      dense=dense)


ARCHS = [("qwen2", {}), ("llama", {}), ("llama", {"num_kv_heads": 4}), ("qwen2", {"num_kv_heads": 1})]


@pytest.mark.parametrize(("arch", "kwargs"), ARCHS, ids=lambda a: str(a))
def test_fast_and_dense_equal_full_forwards(arch, kwargs):
    """Both attention methods give each ordering's mean NLL as one full forward of prompt + reply does
    (grouped-query, multi-query and plain multi-head attention), and choose the same ordering."""
    m = tiny(arch, **kwargs)
    prompt, cache, lp_first = prompt_cache(m, 33)
    for orderings in ORDERING_SETS:
        ref = full_forward_nll(m, prompt, orderings)
        fast = score(m, cache, 33, lp_first, orderings, dense=False)
        dense = score(m, cache, 33, lp_first, orderings, dense=True)
        assert torch.allclose(fast, ref, atol=1e-5), (orderings, fast - ref)
        assert torch.allclose(dense, ref, atol=1e-5), (orderings, dense - ref)
        assert int(fast.argmin()) == int(ref.argmin())


def test_gather_equals_log_softmax_sum():
    """The one-gather sum (logit − logsumexp, in place) equals the previous per-term sum over a full log_softmax."""
    m = tiny()
    _, cache, lp_first = prompt_cache(m, 29, seed=3)
    orderings = [list(p) for p in itertools.permutations([0, 4, 7, 2])]
    layout, elements = tree_layout(orderings)
    toks = symbol_tokens(elements)[layout.node_sym]
    with torch.no_grad():
        logp = prefix_tree._forward_dense(m, cache, 29, layout, toks, CPU).float().log_softmax(-1)
    _, _, _, paths = old_prefix_tree(orderings, FMT, 29)
    expected = torch.tensor([-sum(float(lp_first[tok]) if row < 0 else float(logp[row, tok]) for row, tok in terms)
                             / len(terms) for terms in paths])
    assert torch.allclose(score(m, cache, 29, lp_first, orderings, dense=True), expected, atol=1e-6)


def test_first_layer_grouping_is_bitwise_exact():
    """Running the first layer's prompt attention once per (token, position) group changes no bit."""
    m = tiny(num_layers=3)
    _, cache, _ = prompt_cache(m, 40, seed=4)
    layout, elements = tree_layout([list(p) for p in itertools.permutations([1, 3, 5, 6])])
    ungrouped = dataclasses.replace(layout, group_reps=torch.arange(layout.n), group=torch.arange(layout.n))
    toks = symbol_tokens(elements)[layout.node_sym]
    with torch.no_grad():
        grouped_logits = prefix_tree._forward_fast(m, cache, 40, layout, toks, CPU)
        plain_logits = prefix_tree._forward_fast(m, cache, 40, ungrouped, toks, CPU)
    assert grouped_logits is not None and torch.equal(grouped_logits, plain_logits)


def test_cache_and_attention_implementation_are_left_as_they_were(monkeypatch):
    m = tiny()
    _, cache, lp_first = prompt_cache(m, 30, seed=5)
    keys = [layer.keys.clone() for layer in cache.layers]
    orderings = [list(p) for p in itertools.permutations([2, 3, 4])]
    score(m, cache, 30, lp_first, orderings)
    score(m, cache, 30, lp_first, orderings, dense=True)
    assert cache.get_seq_length() == 30
    assert all(torch.equal(k, layer.keys) for k, layer in zip(keys, cache.layers))
    assert m.config._attn_implementation == "eager"

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(prefix_tree, "_tree_attention_math", boom)
    with pytest.raises(RuntimeError, match="boom"):
        score(m, cache, 30, lp_first, orderings)
    assert m.config._attn_implementation == "eager"
    with pytest.raises(RuntimeError, match="only runs inside"):
        tree_attention(m.model.layers[0].self_attn, torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 2, 8),
                       torch.zeros(1, 2, 2, 8), None)


@pytest.mark.parametrize("window", [16, 4096])
def test_sliding_window(window):
    """Mistral with a sliding window: where the window hides part of the prompt, the fast path steps aside and the
    dense mask applies the window (equal to full forwards); where it does not, the fast path runs."""
    m = tiny("mistral", sliding_window=window)
    prompt, cache, lp_first = prompt_cache(m, 40, seed=6)
    orderings = [list(p) for p in itertools.permutations([0, 5, 8])]
    ref = full_forward_nll(m, prompt, orderings)
    assert torch.allclose(score(m, cache, 40, lp_first, orderings), ref, atol=1e-5)
    assert torch.allclose(score(m, cache, 40, lp_first, orderings, dense=True), ref, atol=1e-5)
    if window < 40:
        with pytest.raises(RuntimeError, match="does not apply"):
            score(m, cache, 40, lp_first, orderings, dense=False)
    else:
        assert torch.allclose(score(m, cache, 40, lp_first, orderings, dense=False), ref, atol=1e-5)


def test_qwen2_mixed_layer_types_with_a_binding_window():
    """Full-attention and sliding-window layers in one model: the dense fallback gives each type its mask."""
    m = tiny("qwen2", num_layers=3, use_sliding_window=True, sliding_window=12, max_window_layers=1)
    assert set(m.config.layer_types) == {"full_attention", "sliding_attention"}
    prompt, cache, lp_first = prompt_cache(m, 30, seed=7)
    orderings = [list(p) for p in itertools.permutations([1, 2, 6])]
    ref = full_forward_nll(m, prompt, orderings)
    assert torch.allclose(score(m, cache, 30, lp_first, orderings), ref, atol=1e-5)


def test_a_layer_outside_the_attention_interface_falls_back(monkeypatch):
    """If fewer attention calls than cache layers reach tree_attention (a layer with its own attention), the
    fast result is discarded and the dense method runs."""
    m = tiny()
    prompt, cache, lp_first = prompt_cache(m, 25, seed=8)
    orderings = [list(p) for p in itertools.permutations([3, 4])]
    ref = full_forward_nll(m, prompt, orderings)

    class OneLayerMissing(prefix_tree._TreeState):
        def __setattr__(self, name, value):  # the first layer's call is not counted, as if it bypassed the interface
            if name == "calls" and value == 1 and not getattr(self, "skipped", False):
                object.__setattr__(self, "skipped", True)
                value = 0
            super().__setattr__(name, value)

    monkeypatch.setattr(prefix_tree, "_TreeState", OneLayerMissing)
    with pytest.raises(RuntimeError, match="does not apply"):
        score(m, cache, 25, lp_first, orderings, dense=False)
    assert torch.allclose(score(m, cache, 25, lp_first, orderings), ref, atol=1e-5)


def test_prompt_attention_matmul_path_equals_flash():
    """The matmul path (devices without torch's CPU flash kernel) gives the flash kernel's output and log-sum-exp."""
    torch.manual_seed(9)
    q, k, v = torch.randn(1, 2, 24, 16), torch.randn(1, 2, 50, 16), torch.randn(1, 2, 50, 16)
    out_f, lse_f = prefix_tree._dense_attention_with_lse(q, k, v, 0.25, flash=True)
    out_m, lse_m = prefix_tree._dense_attention_with_lse(q, k, v, 0.25, flash=False)
    assert torch.allclose(out_f, out_m, atol=1e-5) and torch.allclose(lse_f, lse_m, atol=1e-5)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.25)
    assert torch.allclose(out_f, ref, atol=1e-5)
