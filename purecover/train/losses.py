"""The student's losses (docs/concepts/method.md#the-student): permutation-invariant LM loss + pairwise contrastive loss.

    L_LM = min over orderings π of S of the mean token NLL of the reply in order π
           (lm_reduction="sequence_sum": of its total NLL, −log p; the same ordering wins, since
           every ordering's reply has the same 2|S| tokens)
    L_CL = −(1/|P|) Σ_{(i,j) ∈ S × rejected} log σ(s_i − s_j),   0 when P is empty
    L_BCE = mean over the K candidates of the binary cross-entropy of σ(s_k) against k ∈ S
    L    = cl_weight · L_CL + λ_LM · L_LM + bce_weight · L_BCE   (bce_weight 0 unless set)

The authors' released code trains differently (docs/paper/released-code.md), and two switches reproduce it:
``reply_order="target"`` replies in the order the target is given (a top-k target: by descending gain) instead
of the best ordering, and `rejected` narrows L_CL's negatives to a few per question (BPR over sampled
negatives; `negative_pool` and `sample_negatives` draw them).

s_k is the logit of passage k's identifier at the first reply position (``student.readout: identifier``, the
paper), or, with the passage readout (our extension), the logit of a fixed token at the marker after passage k,
read in the same forward over the prompt (`purecover.models.selector_prompt`), or a trained linear head on the
hidden state there (``passage_score: head``, `purecover.models.score_head`).

How the minimum is computed without |S|! full passes. The gradient of a minimum is the
gradient of its arg-min, so the orderings are *scored* without gradient: per question the
prompt is encoded once (key/value cache) and all orderings, laid out as one prefix tree
(shared prefixes once: 530 tokens for the 120 orderings of |S| = 5), are scored in a single
forward over that cache (`purecover.train.prefix_tree`: layout cached per subset size; each
layer's attention computed as an unmasked prompt part plus each tree token's ancestors, merged
exactly by log-sum-exp; a dense 4-D mask where that does not apply). Exact when
|S| <= m_exact; beyond, the ordering by descending s_k (detached) is used. The ordering is always chosen without dropout: the scores (and the prompt
encoding they are read from) come from the model in eval mode, so with LoRA or attention dropout
the chosen ordering is the same as naive enumeration in eval mode, and does not depend on the
dropout draw of the training forward. Then one training
forward/backward runs on prompt + best reply for the whole batch (prompts left-padded, replies
right-padded, positions counted from each prompt's first token, logits kept only at the reply
positions so the vocabulary projection never covers the prompt).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .prefix_tree import score_tree
from .reply_attention import reply_attention_applies, reply_attention_for

if TYPE_CHECKING:
    from ..models.score_head import HeadReadout

__all__ = ["LM_REDUCTIONS", "REPLY_ORDERS", "LossOutput", "ReplyFormat", "best_ordering", "contrastive_loss",
           "has_active_dropout", "negative_pool", "passage_bce", "sample_negatives", "score_orderings",
           "selector_loss"]

REPLY_ORDERS = ("best", "target")


@dataclass(frozen=True)
class ReplyFormat:
    """Token ids of the reply format: identifier of each passage position, separator, end of turn."""

    identifier_ids: tuple[int, ...]
    separator_id: int
    end_id: int

    def target(self, order: Sequence[int]) -> list[int]:
        out: list[int] = []
        for i, k in enumerate(order):
            if i:
                out.append(self.separator_id)
            out.append(self.identifier_ids[k])
        out.append(self.end_id)
        return out


@dataclass
class LossOutput:
    """Batch means of the losses, plus per question the candidates' scores (K,) and order.

    `first_logits`: the scores L_CL read, detached: the first-position identifier logits (identifier readout) or
    the marker logits (passage readout). `l_bce`: the mean per-passage binary cross-entropy of those scores
    (trained on only when its weight is > 0); `l_lm` is 0 when L_LM was not computed (passage readout with
    lm_weight 0)."""

    loss: torch.Tensor
    l_cl: torch.Tensor
    l_lm: torch.Tensor
    first_logits: list[torch.Tensor]
    orders: list[list[int]]
    l_bce: torch.Tensor | None = None



def _score_on_cache(model: Any, cache: Any, t_len: int, lp_first: torch.Tensor, orderings: Sequence[Sequence[int]],
                    fmt: ReplyFormat, device: torch.device) -> torch.Tensor:
    """Mean NLL (P,) of each ordering's reply, all laid out as one prefix tree over `cache` (not modified)."""
    return score_tree(model, cache, t_len, lp_first, orderings, fmt.identifier_ids, fmt.separator_id, fmt.end_id,
                      device)


@torch.no_grad()
def score_orderings(model: Any, prompt_ids: torch.Tensor, orderings: Sequence[Sequence[int]], fmt: ReplyFormat
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean token NLL of each ordering's reply, and the first-position logits of all identifiers.

    prompt_ids: (T,) one unpadded prompt. Returns (nll (P,), first_logits (n_ids,)), float32.
    The prompt is encoded once; all replies are laid out as one prefix tree and scored in a
    single forward over the prompt's key/value cache, each tree token seeing the prompt and its own
    ancestors only (`purecover.train.prefix_tree.score_tree`).
    """
    out = model(input_ids=prompt_ids[None], use_cache=True, logits_to_keep=1)
    first_logits = out.logits[0, -1].float()
    nll = _score_on_cache(model, out.past_key_values, prompt_ids.shape[0], first_logits.log_softmax(-1), orderings,
                          fmt, prompt_ids.device)
    ident = torch.tensor(fmt.identifier_ids, device=first_logits.device)
    return nll, first_logits[ident]


def best_ordering(model: Any, prompt_ids: torch.Tensor, selected: Sequence[int], n_docs: int, fmt: ReplyFormat,
                  m_exact: int = 5) -> tuple[list[int], torch.Tensor]:
    """The ordering of `selected` whose reply has the lowest mean NLL (exact for |S| <= m_exact, else by
    descending s_k), and the detached identifier logits of the first position (n_docs,)."""
    sel = list(selected)
    if len(sel) <= 1 or len(sel) > m_exact:
        _, first = score_orderings(model, prompt_ids, [sel], fmt)
        first = first[:n_docs]
        if len(sel) > 1:
            sel = sorted(sel, key=lambda k: (-float(first[k]), k))
        return sel, first
    orders = [list(p) for p in itertools.permutations(sel)]
    nll, first = score_orderings(model, prompt_ids, orders, fmt)
    return orders[int(torch.argmin(nll))], first[:n_docs]


def has_active_dropout(model: Any) -> bool:
    """Whether a forward in the model's current mode is random: a dropout module with p > 0 in training mode
    (LoRA dropout, hidden dropout), or ``config.attention_dropout`` > 0 while training."""
    if not model.training:
        return False
    if float(getattr(getattr(model, "config", None), "attention_dropout", 0.0) or 0.0) > 0.0:
        return True
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.training and m.p > 0 for m in model.modules())


@torch.no_grad()
def _eval_prompt(model: Any, prompt_ids: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """The prompt's key/value cache and last-position logits (V,) from the model in eval mode (no dropout)."""
    was_training = model.training
    model.eval()
    try:
        out = model(input_ids=prompt_ids[None], use_cache=True, logits_to_keep=1)
    finally:
        model.train(was_training)
    return out.past_key_values, out.logits[0, -1].float()


def contrastive_loss(scores: torch.Tensor, selected: Sequence[int], rejected: Sequence[int] | None = None
                     ) -> torch.Tensor:
    """−mean log σ(s_i − s_j) over selected i × rejected j; 0 (with grad) when either side is empty.

    scores: (K,) identifier logits. `rejected`: the negatives to pair with (positions, none of them selected);
    None: every unselected position."""
    k = scores.shape[0]
    mask = torch.zeros(k, dtype=torch.bool, device=scores.device)
    if selected:
        mask[list(selected)] = True
    if rejected is None:
        pos, neg = scores[mask], scores[~mask]
    else:
        both = sorted(set(rejected) & set(selected))
        if both:
            raise ValueError(f"positions {both} are both selected and rejected")
        pos, neg = scores[mask], scores[list(rejected)]
    if pos.numel() == 0 or neg.numel() == 0:
        return scores.sum() * 0.0
    return -F.logsigmoid(pos[:, None] - neg[None, :]).mean()


def _choose_order(model: Any, cache: Any, t_len: int, first: torch.Tensor, selected: Sequence[int], n_docs: int,
                  fmt: ReplyFormat, m_exact: int) -> list[int]:
    sel = list(selected)
    if len(sel) <= 1:
        return sel
    if len(sel) > m_exact:
        ident = first[list(fmt.identifier_ids[:n_docs])]
        return sorted(sel, key=lambda k: (-float(ident[k]), k))
    was_training = model.training
    model.eval()
    try:
        orders = [list(p) for p in itertools.permutations(sel)]
        nll = _score_on_cache(model, cache, t_len, first.log_softmax(-1), orders, fmt, first.device)
    finally:
        model.train(was_training)
    return orders[int(torch.argmin(nll))]


def negative_pool(selected: Sequence[int], n_docs: int, order: Sequence[int] | None, pool: int) -> list[int]:
    """The released code's negative pool: the `pool` last candidates of the ranking "target first, then the
    others in retrieval order", as shown positions, never a selected one.

    `order[i]`: the retrieval position (in candidates.jsonl) of shown passage i; None: shown in retrieval order.
    The code ranks the others by their own greedy scores, which the labels do not keep: retrieval order is this
    project's reading (docs/paper/released-code.md)."""
    chosen = set(selected)
    rank = (lambda i: i) if order is None else (lambda i: order[i])
    others = sorted((i for i in range(n_docs) if i not in chosen), key=rank)
    return others[-pool:] if pool > 0 else []


def sample_negatives(pool: Sequence[int], k: int, seed: int, key: str) -> list[int]:
    """`k` positions drawn uniformly without replacement from `pool` (all of it when it holds <= k), in pool
    order; a pure function of (pool, k, seed, key), so a resumed run draws what the uninterrupted one drew."""
    if len(pool) <= k:
        return list(pool)
    digest = hashlib.sha256(f"negatives:{seed}:{key}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    picked = sorted(rng.sample(range(len(pool)), k))
    return [pool[i] for i in picked]


LM_REDUCTIONS = ("token_mean", "sequence_sum")


def _check_reduction(lm_reduction: str) -> None:
    if lm_reduction not in LM_REDUCTIONS:
        raise ValueError(f"lm_reduction {lm_reduction!r}; expected one of {', '.join(LM_REDUCTIONS)}")


def passage_bce(scores: torch.Tensor, selected: Sequence[int]) -> torch.Tensor:
    """Mean binary cross-entropy of each passage's score against 1 (selected) / 0 (not): scores (K,) logits."""
    target = torch.zeros_like(scores)
    if selected:
        target[list(selected)] = 1.0
    return F.binary_cross_entropy_with_logits(scores, target)


def _read_scores(model: Any, prompt: torch.Tensor, positions: Sequence[int], read_token: int, use_cache: bool,
                 score_head: HeadReadout | None = None) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """One forward over `prompt` (T,) keeping the logits at `positions` and at the last position only: returns
    (passage scores (K,) = the `read_token` logit at each position, or with `score_head` the head on the hidden
    state there; last-position logits (V,); the cache)."""
    keep = torch.tensor([*positions, prompt.shape[0] - 1], device=prompt.device)
    if score_head is None:
        out = model(input_ids=prompt[None], use_cache=use_cache, logits_to_keep=keep)
        logits = out.logits[0].float()  # (K + 1, V)
        return logits[:-1, read_token], logits[-1], out.past_key_values
    with score_head.reading() as seen:
        out = model(input_ids=prompt[None], use_cache=use_cache, logits_to_keep=keep)
    return score_head.scores(seen)[0, :-1], out.logits[0, -1].float(), out.past_key_values


def _passage_loss(model: Any, prompts: Sequence[torch.Tensor], selected: Sequence[Sequence[int]],
                  read_positions: Sequence[Sequence[int]], read_token: int, cl_weight: float, bce_weight: float,
                  rejected: Sequence[Sequence[int] | None], score_head: HeadReadout | None = None) -> LossOutput:
    """The passage readout without L_LM: per prompt one forward, L_CL (and the BCE) on the marker scores."""
    l_cl, l_bce, scores = [], [], []
    for p, sel, pos, neg in zip(prompts, selected, read_positions, rejected):
        s, _, _ = _read_scores(model, p, pos, read_token, use_cache=False, score_head=score_head)
        l_cl.append(contrastive_loss(s, sel, neg))
        l_bce.append(passage_bce(s, sel))
        scores.append(s.detach())
    cl, bce = torch.stack(l_cl).mean(), torch.stack(l_bce).mean()
    zero = cl.detach() * 0.0
    return LossOutput(loss=cl_weight * cl + bce_weight * bce, l_cl=cl.detach(), l_lm=zero, first_logits=scores,
                      orders=[list(s) for s in selected], l_bce=bce.detach())


def _shared_prompt_loss(model: Any, prompts: Sequence[torch.Tensor], selected: Sequence[Sequence[int]],
                        n_docs: Sequence[int], fmt: ReplyFormat, lm_weight: float, m_exact: int, cl_weight: float,
                        lm_reduction: str = "token_mean", reply_order: str = "best",
                        rejected: Sequence[Sequence[int] | None] | None = None,
                        read_positions: Sequence[Sequence[int]] | None = None, read_token: int | None = None,
                        bce_weight: float = 0.0, score_head: HeadReadout | None = None) -> LossOutput | None:
    """Each prompt is encoded once, with gradient; orderings are scored on its cache (read detached, not
    modified) and the best reply continues from the cache itself (with `reply_attention.reply_attention` where it
    applies: sdpa or eager attention without soft-capping or sinks). With active dropout (`has_active_dropout`) the
    orderings are scored on a second, eval-mode encoding of the prompt instead (one no-grad prompt
    forward more), so the choice is dropout-free. None when the model gives no cache (gradient
    checkpointing), so the caller falls back to the two-pass path."""
    l_lm, l_cl, l_bce, firsts, orders = [], [], [], [], []
    stochastic = has_active_dropout(model)
    fast_reply = reply_attention_applies(model)
    negatives = list(rejected) if rejected is not None else [None] * len(prompts)
    reads = list(read_positions) if read_positions is not None else [None] * len(prompts)
    for p, sel, n, neg, pos in zip(prompts, selected, n_docs, negatives, reads):
        if pos is not None:
            assert read_token is not None
            passage_scores, first, cache = _read_scores(model, p, pos, read_token, use_cache=True,
                                                        score_head=score_head)
        else:
            out = model(input_ids=p[None], use_cache=True, logits_to_keep=1)
            first, cache = out.logits[0, -1].float(), out.past_key_values
        if cache is None:
            return None
        t_len = p.shape[0]
        if reply_order == "target":
            order = list(sel)
        else:
            if stochastic and len(sel) > 1:
                score_cache, score_first = _eval_prompt(model, p)
            else:
                score_cache, score_first = cache, first.detach()
            order = _choose_order(model, score_cache, t_len, score_first, sel, n, fmt, m_exact)
        target = torch.tensor(fmt.target(order), device=p.device)
        logits = first[None]
        if target.shape[0] > 1:
            reply_pos = torch.arange(t_len, t_len + target.shape[0] - 1, device=p.device)[None]
            with reply_attention_for(model, fast_reply):
                rest = model(input_ids=target[None, :-1], past_key_values=cache, position_ids=reply_pos,
                             use_cache=True).logits[0].float()
            logits = torch.cat([logits, rest])
        l_lm.append(F.cross_entropy(logits, target, reduction="mean" if lm_reduction == "token_mean" else "sum"))
        scores = passage_scores if pos is not None else first[torch.tensor(fmt.identifier_ids[:n], device=p.device)]
        l_cl.append(contrastive_loss(scores, sel, neg))
        l_bce.append(passage_bce(scores, sel))
        firsts.append(scores.detach())
        orders.append(order)
    lm, cl, bce = torch.stack(l_lm).mean(), torch.stack(l_cl).mean(), torch.stack(l_bce).mean()
    loss = cl_weight * cl + lm_weight * lm + (bce_weight * bce if bce_weight else 0.0)
    return LossOutput(loss=loss, l_cl=cl.detach(), l_lm=lm.detach(), first_logits=firsts, orders=orders,
                      l_bce=bce.detach())


def selector_loss(model: Any, prompts: Sequence[torch.Tensor], selected: Sequence[Sequence[int]],
                  n_docs: Sequence[int], fmt: ReplyFormat, lm_weight: float = 1.0, m_exact: int = 5,
                  pad_id: int = 0, share_prompt: bool | None = None, lm_reduction: str = "token_mean",
                  cl_weight: float = 1.0, reply_order: str = "best",
                  rejected: Sequence[Sequence[int] | None] | None = None,
                  read_positions: Sequence[Sequence[int]] | None = None, read_token: int | None = None,
                  bce_weight: float = 0.0, score_head: HeadReadout | None = None) -> LossOutput:
    """L = cl_weight · L_CL + lm_weight · L_LM for a batch of prompts (1-D token tensors) and teacher subsets.

    `share_prompt` (default: on unless gradient checkpointing is on): encode each prompt once, with
    gradient, and reuse it for scoring and for the best reply. Off: a no-grad pass scores the
    orderings, then one batched training forward runs on prompt + best reply. Either way the
    ordering is chosen in eval mode (no dropout), so both paths choose the same ordering; without
    dropout they give the same loss and gradients (up to float rounding), with dropout the training
    forward draws its own dropout masks. `lm_reduction`: ``token_mean`` (each question's L_LM is the
    mean token NLL of its reply) or ``sequence_sum`` (the reply's total NLL); L_LM is then the mean over
    the batch's questions. `reply_order`: ``best`` (the ordering above) or ``target``, each subset's reply in the
    order it is given, nothing scored (the released code). `rejected`: per question the negatives of L_CL (None, or
    a None entry: every unselected position).

    Passage readout (`read_positions`: per prompt the index of each passage's marker token, with `read_token` the
    id whose logit there is the passage's score): L_CL (and with `bce_weight` > 0 the per-passage BCE,
    `passage_bce`) read those scores instead of the first-position identifier logits, from the same forward
    over the prompt. With lm_weight 0 no reply is scored at all (one forward per prompt); otherwise L_LM is the
    identifier reply's, as above. `score_head` (``passage_score: head``): the scores are the head on the hidden
    state at each marker instead of the `read_token` logit there.
    """
    if score_head is not None and read_positions is None:
        raise ValueError("a scoring head reads the passage readout's markers: it needs read_positions")
    _check_reduction(lm_reduction)
    if read_positions is not None:
        if read_token is None:
            raise ValueError("read_positions need read_token (the passage readout's score token)")
        if len(read_positions) != len(prompts):
            raise ValueError(f"{len(read_positions)} read position lists for a batch of {len(prompts)}")
        for pos, n in zip(read_positions, n_docs):
            if len(pos) != n:
                raise ValueError(f"{len(pos)} read positions for {n} candidates")
    if reply_order not in REPLY_ORDERS:
        raise ValueError(f"reply_order {reply_order!r}; expected one of {', '.join(REPLY_ORDERS)}")
    if rejected is not None and len(rejected) != len(prompts):
        raise ValueError(f"{len(rejected)} negative lists for a batch of {len(prompts)}")
    if read_positions is not None and lm_weight == 0:
        out = _passage_loss(model, prompts, selected, read_positions, int(read_token), cl_weight, bce_weight,  # type: ignore[arg-type]
                            list(rejected) if rejected is not None else [None] * len(prompts), score_head)
        if not math.isfinite(float(out.loss.detach())):
            raise FloatingPointError(f"non-finite selector loss (L_CL={float(out.l_cl)}, L_BCE={float(out.l_bce)})")
        return out
    if share_prompt is None:
        share_prompt = not getattr(model, "is_gradient_checkpointing", False)
    if share_prompt:
        out = _shared_prompt_loss(model, prompts, selected, n_docs, fmt, lm_weight, m_exact, cl_weight, lm_reduction,
                                  reply_order, rejected, read_positions, read_token, bce_weight, score_head)
        if out is not None:
            if not math.isfinite(float(out.loss.detach())):
                raise FloatingPointError(f"non-finite selector loss (L_CL={float(out.l_cl)}, L_LM={float(out.l_lm)})")
            return out
    if reply_order == "target":
        orders = [list(s) for s in selected]
    else:
        was_training = model.training
        model.eval()  # orderings are chosen without dropout noise
        try:
            orders = [best_ordering(model, p, s, n, fmt, m_exact)[0] for p, s, n in zip(prompts, selected, n_docs)]
        finally:
            model.train(was_training)
    targets = [fmt.target(o) for o in orders]
    t_prompt = max(p.shape[0] for p in prompts)
    l_max = max(len(t) for t in targets)
    b = len(prompts)
    device = prompts[0].device
    ids = torch.full((b, t_prompt + l_max - 1), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    labels = torch.full((b, l_max), -100, dtype=torch.long, device=device)
    for i, (p, t) in enumerate(zip(prompts, targets)):
        start = t_prompt - p.shape[0]  # left padding of the prompt
        ids[i, start:t_prompt] = p
        ids[i, t_prompt : t_prompt + len(t) - 1] = torch.tensor(t[:-1], device=device)
        mask[i, start : t_prompt + len(t) - 1] = 1
        labels[i, : len(t)] = torch.tensor(t, device=device)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                   logits_to_keep=l_max).logits.float()  # (B, l_max, V): reply positions only
    token_nll = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")  # (B, l_max)
    counts = (labels != -100).sum(-1).clamp(min=1)
    per_question = token_nll.sum(-1)  # (B,): ignored positions contribute 0
    l_lm = (per_question / counts if lm_reduction == "token_mean" else per_question).mean()
    if read_positions is not None:  # the marker scores: one more forward per prompt (no cache to read them from)
        first_logits = [_read_scores(model, p, pos, int(read_token), use_cache=False,  # type: ignore[arg-type]
                                     score_head=score_head)[0] for p, pos in zip(prompts, read_positions)]
    else:
        ident = torch.tensor(fmt.identifier_ids, device=device)
        first_logits = [logits[i, 0, ident[: n_docs[i]]] for i in range(b)]
    negatives = list(rejected) if rejected is not None else [None] * b
    l_cl = torch.stack([contrastive_loss(s, sel, neg) for s, sel, neg in zip(first_logits, selected, negatives)]).mean()
    l_bce = torch.stack([passage_bce(s, sel) for s, sel in zip(first_logits, selected)]).mean()
    loss = cl_weight * l_cl + lm_weight * l_lm + (bce_weight * l_bce if bce_weight else 0.0)
    if not math.isfinite(float(loss.detach())):
        raise FloatingPointError(f"non-finite selector loss (L_CL={float(l_cl)}, L_LM={float(l_lm)})")
    return LossOutput(loss=loss, l_cl=l_cl.detach(), l_lm=l_lm.detach(),
                      first_logits=[f.detach() for f in first_logits], orders=orders, l_bce=l_bce.detach())
