"""The passage readout's scores with transformers: the logit of one token at given positions of each prompt.

`build_selector_prompt(..., readout="passage")` puts a marker after each passage and returns the index of each
marker's last token (`SelectorPrompt.read_positions`); passage k's score is the logit of the read token
(`purecover.models.readouts.passage.read_token_id`) there. One forward pass per left-padded batch, as for the identifier readout, with the logits
kept only at the batch's read positions (``logits_to_keep`` as an index tensor), so the vocabulary projection
covers K positions per prompt, not the whole prompt. With a scoring head (`purecover.models.score_head`) the
score is the head on the hidden state at each read position instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .readouts.passage import backend_refusal as passage_backend_refusal

if TYPE_CHECKING:
    from .score_head import HeadReadout

__all__ = ["hf_passage_logits", "left_pad", "passage_backend_refusal"]


def left_pad(batch: Sequence[Sequence[int]], pad_id: int, device: Any
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """A batch of token id lists, left-padded: (input_ids (B, T), attention_mask (B, T), position_ids (B, T) counted
    from each prompt's first token, the padding of each prompt); ValueError for an empty prompt."""
    if any(len(p) == 0 for p in batch):
        raise ValueError("empty prompt")
    t = max(len(p) for p in batch)
    ids = torch.full((len(batch), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), t), dtype=torch.long)
    for j, p in enumerate(batch):
        ids[j, t - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[j, t - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), [t - len(p) for p in batch]


@torch.no_grad()
def hf_passage_logits(model: Any, prompts: Sequence[Sequence[int]], read_positions: Sequence[Sequence[int]],
                      read_token: int, batch_size: int = 8, pad_id: int = 0,
                      score_head: HeadReadout | None = None) -> list[list[float]]:
    """For prompt i, the logit of `read_token` at each of `read_positions[i]` (indices into the unpadded prompt):
    a list of len(read_positions[i]) floats per prompt, in that order. With `score_head` (``passage_score:
    head``): the head on the hidden state at each of those positions instead.

    Prompts are left-padded in batches of `batch_size`, position ids come from the attention mask (padding does
    not shift positions), and the logits are computed only at the union of the batch's (shifted) read positions.
    """
    if len(prompts) != len(read_positions):
        raise ValueError(f"{len(prompts)} prompts but {len(read_positions)} read position lists")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[list[float]] = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = prompts[i : i + batch_size]
            reads = read_positions[i : i + batch_size]
            for p, pos in zip(batch, reads):
                if any(not 0 <= k < len(p) for k in pos):
                    raise ValueError(f"read positions {list(pos)} outside a prompt of {len(p)} tokens")
            ids, mask, pos_ids, pads = left_pad(batch, pad_id, device)
            shifted = [[pad + k for k in pos] for pad, pos in zip(pads, reads)]
            keep = sorted({k for row in shifted for k in row})
            column = {k: c for c, k in enumerate(keep)}
            kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos_ids, "use_cache": False,
                      "logits_to_keep": torch.tensor(keep, device=device)}
            if score_head is None:
                logits = model(**kwargs).logits[..., read_token].float()  # (B, len(keep))
            else:
                with score_head.reading() as seen:
                    model(**kwargs)
                logits = score_head.scores(seen)  # (B, len(keep))
            for j, row in enumerate(shifted):
                out.append(logits[j, [column[k] for k in row]].cpu().tolist())
    finally:
        model.train(was_training)
    return out
