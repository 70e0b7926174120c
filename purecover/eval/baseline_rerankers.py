"""The baselines that rerank by a model's score of each candidate: a cross-encoder (`CrossEncoderRerank`) and
in-context reranking (`ICRRerank`, `ICRFusedRerank`); each model is loaded on first use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from purecover.records import CandidateRecord, LabelRecord

from .baseline_common import StoredSelection, _check_k, _descending, doc_text


class CrossEncoderRerank:
    """Rerank by a sentence-transformers CrossEncoder score of (question, passage); top k.

    `model_name`: a Hub id (e.g. ``BAAI/bge-reranker-large``) or a local directory, loaded on first
    use. The model must output one score per pair (``num_labels == 1``).
    """

    name = "cross_encoder"

    def __init__(self, model_name: str = "BAAI/bge-reranker-large", batch_size: int = 32, *,
                 device: str | None = None, max_length: int | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        self.model_name = model_name
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(self.model_name, device=self.device, max_length=self.max_length)
        return self._model

    def scores(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One score per candidate (in candidate order)."""
        docs = candidate_record.docs
        if not docs:
            return np.zeros(0, dtype=np.float64)
        question = candidate_record.question
        pairs = [(question, doc_text(d)) for d in docs]
        out = np.asarray(self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False,
                                            convert_to_numpy=True), dtype=np.float64)
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.shape != (len(docs),):
            raise ValueError(f"cross-encoder {self.model_name!r} returned scores of shape {out.shape} for "
                             f"{len(docs)} pairs; expected one score per pair (num_labels=1)")
        return out

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        return _descending(self.scores(candidate_record))[:k]


class ICRRerank:
    """In-context reranking (ICR, Chen et al., ICLR 2025): candidates by their calibrated ICR score; top k.

    The score of a candidate is the attention the question's tokens pay its tokens minus the same with the
    content-free query "N/A", summed over `layers` (``all`` or layer indices, negative ones from the end),
    from one batch of the two prompts (`purecover.eval.icr.icr_scores`). `model_name`: a causal LM (a Hub
    id, a local directory, a GGUF file or a catalogue name), loaded on first use with its tokenizer, weights
    in `dtype` on `device` (``auto``: cuda when available), never with remote modelling code. Each question's
    per-layer scores are cached by its question and passage texts, so the budgets of one evaluation reuse them.
    `share_with`: another ICR selector of the same model and passage length whose model and cache this one uses.
    """

    name = "icr"

    def __init__(self, model_name: str, layers: str | Sequence[int] = "all", *, max_passage_tokens: int = 192,
                 dtype: str = "auto", device: str = "auto", share_with: ICRRerank | None = None) -> None:
        if max_passage_tokens < 1:
            raise ValueError(f"max_passage_tokens must be ≥ 1, got {max_passage_tokens}")
        if isinstance(layers, str) and layers != "all":
            raise ValueError(f"layers must be 'all' or a list of layer indices, got {layers!r}")
        self.model_name = model_name
        self.layers = layers if isinstance(layers, str) else [int(i) for i in layers]
        self.max_passage_tokens = max_passage_tokens
        self.dtype = dtype
        self.device = device
        self._model: Any = None
        self._tokenizer: Any = None
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}
        if share_with is not None and (share_with.model_name, share_with.max_passage_tokens, share_with.dtype,
                                       share_with.device) == (model_name, max_passage_tokens, dtype, device):
            self._model, self._tokenizer, self._cache = share_with._model, share_with._tokenizer, share_with._cache
            self._share = share_with
        else:
            self._share = None

    @property
    def model(self) -> Any:
        if self._model is None:
            if self._share is not None:  # load once for both
                self._model = self._share.model
            else:
                from purecover.models.loading import load_causal_lm

                self._model = load_causal_lm(self.model_name, dtype=self.dtype, device=self.device,
                                             trust_remote_code=False)
        return self._model

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self._share is not None:
                self._tokenizer = self._share.tokenizer
            else:
                from purecover.models.loading import load_tokenizer

                self._tokenizer = load_tokenizer(self.model_name)
        return self._tokenizer

    def per_layer(self, candidate_record: CandidateRecord, layers: str | Sequence[int] | None = None) -> Any:
        """The question's `purecover.eval.icr.ICRScores` over `layers` (None: this selector's; ``all``: every
        layer, e.g. to choose layers with `purecover.eval.icr.choose_icr_layers`), cached: a question is scored
        again only for layers its cached scores lack (then over the union)."""
        from purecover.eval.icr import icr_scores, model_layer_count, resolve_icr_layers

        wanted = resolve_icr_layers(model_layer_count(self.model), self.layers if layers is None else layers)
        key = (candidate_record.question, tuple(doc_text(d) for d in candidate_record.docs))
        cached = self._cache.get(key)
        if cached is None or not set(wanted) <= set(cached.layers):
            read = sorted(set(wanted) | set(cached.layers if cached is not None else ()))
            cached = icr_scores(self.model, self.tokenizer, candidate_record.question, candidate_record.docs, read,
                                max_passage_tokens=self.max_passage_tokens)
            self._cache[key] = cached
        return cached

    def icr(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One calibrated ICR score per candidate (in candidate order), summed over this selector's layers."""
        if not candidate_record.docs:
            return np.zeros(0, dtype=np.float64)
        from purecover.eval.icr import model_layer_count, resolve_icr_layers

        wanted = list(resolve_icr_layers(model_layer_count(self.model), self.layers))
        scores = self.per_layer(candidate_record, wanted).score(wanted)
        if len(scores) > 1 and not np.any(scores):
            raise ValueError(
                f"eval.icr_layers: every ICR score of question {candidate_record.qid!r} is 0, so ICR would copy the "
                f"retrieval order: the layers read ({wanted}) see none of the passages from the question"
                f"{sliding_note(self.model, wanted)}; read full-attention layers (eval.icr_layers: all, or their "
                "indices)")
        return scores

    def scores(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One score per candidate (in candidate order): the calibrated ICR score."""
        return self.icr(candidate_record)

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        return _descending(self.scores(candidate_record))[:k]


def sliding_note(model: Any, layers: Sequence[int]) -> str:
    """", all sliding-window layers of N tokens" when every one of `layers` of `model` is a windowed layer, else ""."""
    from purecover.teacher.layers import attention_windows

    try:
        kinds, windows = attention_windows(model.config)
    except (AttributeError, ValueError):
        return ""
    shown = sorted({windows[i] for i in layers if 0 <= i < len(windows) and windows[i] is not None})
    if not shown or any(windows[i] is None for i in layers if 0 <= i < len(windows)):
        return ""
    return f", all {'/'.join(sorted({kinds[i] for i in layers}))} layers of {'/'.join(map(str, shown))} tokens"


class ICRFusedRerank(ICRRerank):
    """ICR fused with the retrieval rank: z(icr) + fusion_weight · z(−rank) per question (z: standardised over
    the question's candidates; rank: the candidate's position, retrieval order), top k
    (`purecover.eval.icr.fuse_with_rank`). fusion_weight 0 is `ICRRerank`'s order."""

    name = "icr_fused"

    def __init__(self, model_name: str, layers: str | Sequence[int] = "all", *, fusion_weight: float = 1.0,
                 max_passage_tokens: int = 192, dtype: str = "auto", device: str = "auto",
                 share_with: ICRRerank | None = None) -> None:
        if isinstance(fusion_weight, bool) or not isinstance(fusion_weight, (int, float)) or not (
                0 <= fusion_weight < float("inf")):
            raise ValueError(f"fusion_weight must be a finite number ≥ 0, got {fusion_weight!r}")
        super().__init__(model_name, layers, max_passage_tokens=max_passage_tokens, dtype=dtype, device=device,
                         share_with=share_with)
        self.fusion_weight = float(fusion_weight)

    def scores(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One score per candidate (in candidate order): the fused score."""
        from purecover.eval.icr import fuse_with_rank

        return fuse_with_rank(self.icr(candidate_record), self.fusion_weight)
