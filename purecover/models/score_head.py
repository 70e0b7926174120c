"""The passage readout's scoring head: one linear map from the hidden state at each passage's marker to a score.

With ``student.passage_score: head`` (our extension; docs/guides/student.md#readouts) passage k's score is
w · h_k + b, where h_k (H,) is the hidden state that the model's output projection receives at marker k. The
default, ``passage_score: token``, reads the logit of the fixed token ' yes' there, which is the same form with w
frozen to that token's row of the output projection. The head starts as that row (and its bias, or 0), so
training starts from the token readout. It is trained with the adapter.

The hidden states come from a forward pre-hook on the output projection (`get_output_embeddings()`). That
works for any causal LM whose vocabulary projection is one module called on the final hidden states, and
costs no extra compute: ``logits_to_keep`` already cuts those states to the read positions.

File: ``score_head.safetensors`` beside the adapter in every checkpoint and in the exported selector: two
float32 tensors, ``weight`` (1, H) and ``bias`` (1,), with ``hidden_size`` in the metadata.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

__all__ = ["MAX_HEAD_FILE_BYTES", "SCORE_HEAD_ATTR", "SCORE_HEAD_FILE", "HeadReadout", "ScoreHead", "output_projection"]

SCORE_HEAD_FILE = "score_head.safetensors"
SCORE_HEAD_ATTR = "purecover_score_head"  # the submodule name while training (so the optimizer holds it)
MAX_HEAD_FILE_BYTES = 1 << 20  # H ≤ 65,536 in float32 is 256 KiB: anything larger is not a head file


def output_projection(model: Any) -> torch.nn.Module:
    """The module that maps final hidden states to vocabulary logits (`get_output_embeddings()`)."""
    module = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"{type(model).__name__} has no output projection (get_output_embeddings() is "
                         f"{type(module).__name__}); the scoring head reads its input")
    return module


class ScoreHead(torch.nn.Module):
    """Linear(H, 1): hidden states (..., H) → scores (...)."""

    def __init__(self, hidden_size: int, dtype: torch.dtype | None = None, device: Any = None) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1, bias=True, dtype=dtype, device=device)

    @property
    def hidden_size(self) -> int:
        return int(self.proj.in_features)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.to(self.proj.weight.dtype)).squeeze(-1)

    @classmethod
    def from_token(cls, model: Any, token_id: int) -> ScoreHead:
        """A head that starts equal to the logit of `token_id`: w = its row of the output projection, b = its bias
        (0 when the projection has none); same dtype and device as the projection."""
        proj = output_projection(model)
        weight = getattr(proj, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ValueError(f"the output projection {type(proj).__name__} has no (vocab, hidden) weight")
        if not 0 <= token_id < weight.shape[0]:
            raise ValueError(f"token id {token_id} is outside the output projection's {weight.shape[0]} rows")
        head = cls(int(weight.shape[1]), dtype=weight.dtype, device=weight.device)
        with torch.no_grad():
            head.proj.weight.copy_(weight[token_id].detach()[None])
            bias = getattr(proj, "bias", None)
            head.proj.bias.copy_(bias[token_id].detach()[None] if isinstance(bias, torch.Tensor)
                                 else torch.zeros(1, dtype=weight.dtype))
        return head

    def save(self, directory: str | Path, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None
             ) -> Path:
        """Write ``score_head.safetensors`` into `directory` (atomically; float32); returns its path. `weight` and
        `bias`: the values to write instead of the module's own (gathered ones, when the module holds shards)."""
        from safetensors.torch import save

        from ..utils.io import atomic_write_bytes

        weight = self.proj.weight if weight is None else weight
        bias = self.proj.bias if bias is None else bias
        if tuple(weight.shape) != (1, self.hidden_size) or tuple(bias.shape) != (1,):
            raise ValueError(f"a scoring head of hidden size {self.hidden_size} cannot be saved from weight "
                             f"{tuple(weight.shape)} and bias {tuple(bias.shape)} (sharded parameters not gathered?)")
        tensors = {"weight": weight.detach().float().cpu().contiguous(),
                   "bias": bias.detach().float().cpu().contiguous()}
        path = Path(directory) / SCORE_HEAD_FILE
        atomic_write_bytes(path, save(tensors, metadata={"format": "pt", "hidden_size": str(self.hidden_size)}))
        return path

    @classmethod
    def load(cls, directory: str | Path, hidden_size: int | None = None, dtype: torch.dtype | None = None,
             device: Any = None) -> ScoreHead:
        """Read ``score_head.safetensors`` from `directory`, checked before use: a bounded size, exactly the tensors
        ``weight`` (1, H) and ``bias`` (1,), finite values, H = `hidden_size` when given. Errors name the file."""
        from safetensors import SafetensorError, safe_open

        path = Path(directory) / SCORE_HEAD_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no scoring head (this selector reads its scores with one: "
                                    "selector_config.json passage_score: head)")
        size = path.stat().st_size
        if size > MAX_HEAD_FILE_BYTES:
            raise ValueError(f"{path}: {size} bytes, more than a scoring head's {MAX_HEAD_FILE_BYTES}")
        try:
            with safe_open(str(path), framework="pt") as f:
                names = sorted(f.keys())
                if names != ["bias", "weight"]:
                    raise ValueError(f"{path}: tensors {names}; a scoring head holds exactly 'bias' and 'weight'")
                weight, bias = f.get_tensor("weight"), f.get_tensor("bias")
        except SafetensorError as exc:
            raise ValueError(f"{path}: not a readable safetensors file ({exc})") from exc
        if weight.dim() != 2 or weight.shape[0] != 1 or tuple(bias.shape) != (1,):
            raise ValueError(f"{path}: weight {tuple(weight.shape)}, bias {tuple(bias.shape)}; expected (1, H) and (1,)")
        if hidden_size is not None and weight.shape[1] != hidden_size:
            raise ValueError(f"{path}: a head for hidden size {weight.shape[1]}, but the model's is {hidden_size}")
        if not (bool(torch.isfinite(weight).all()) and math.isfinite(float(bias[0]))):
            raise ValueError(f"{path}: non-finite values in the scoring head")
        head = cls(int(weight.shape[1]), dtype=dtype, device=device)
        with torch.no_grad():
            head.proj.weight.copy_(weight)
            head.proj.bias.copy_(bias)
        return head


class HeadReadout:
    """A `ScoreHead` reading the hidden states that `projection` (the model's output projection) receives.

    ``with readout.reading() as seen: model(...)`` applies the head to the projection's input of that forward
    (B, T', H), where T' are the positions kept by ``logits_to_keep``, inside the forward itself (so that DeepSpeed
    ZeRO-3, which gathers a module's parameter shards only while the model's forward runs, sees the head run
    there); ``readout.scores(seen)`` is the result, (B, T') float32.
    """

    def __init__(self, head: ScoreHead, projection: torch.nn.Module) -> None:
        self.head = head
        self.projection = projection

    @classmethod
    def of(cls, model: Any, head: ScoreHead) -> HeadReadout:
        return cls(head, output_projection(model))

    @contextmanager
    def reading(self) -> Iterator[list[torch.Tensor]]:
        seen: list[torch.Tensor] = []

        def keep(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            seen.append(self.head(args[0]).float())

        # first among the projection's pre-hooks: the head reads the hidden states as the model made them, not as
        # another hook (DeepSpeed ZeRO-3's backward bookkeeping of the projection) rewrote them
        handle = self.projection.register_forward_pre_hook(keep, prepend=True)
        try:
            yield seen
        finally:
            handle.remove()

    def scores(self, seen: list[torch.Tensor]) -> torch.Tensor:
        """The head's scores of the one forward in `seen`: (B, T') float32."""
        if len(seen) != 1:
            raise RuntimeError(f"the output projection ran {len(seen)} times in one forward; expected once")
        return seen[0]
