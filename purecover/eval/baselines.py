"""Baseline selectors compared with the student on the same candidates, through one interface.

Every selector answers ``select(candidate_record, label_record, selection_record, k)`` with
candidate *positions* (indices into ``candidate_record.docs``), best first, at most ``k``, no
duplicates. Records are those of docs/concepts/file-formats.md: a `purecover.records.CandidateRecord` (``candidates.jsonl``),
a `purecover.records.LabelRecord` (``labels.jsonl``) and a `StoredSelection` (a
`purecover.records.SelectionRecord` of ``selections.jsonl``, or an external reranker's selection); a
selector that does not need the label or selection record ignores it.

Selectors (registry names of :func:`make_baseline` in brackets):

* :class:`RetrievalTopK` [retrieval]: the first ``k`` candidates (retrieval order).
* :class:`CrossEncoderRerank` [cross_encoder]: candidates by a sentence-transformers
  ``CrossEncoder`` score of (question, passage), e.g. ``BAAI/bge-reranker-large``.
* :class:`ICRRerank` [icr]: in-context reranking (Chen et al., ICLR 2025): candidates by the calibrated
  attention a causal LM's question tokens pay them (`purecover.eval.icr`).
* :class:`ICRFusedRerank` [icr_fused]: ICR fused with the retrieval rank, z(icr) + w·z(−rank).
* :class:`MMR` [mmr]: maximal marginal relevance, λ·cos(q, d) − (1 − λ)·max_{d'∈S} cos(d, d').
* :class:`XQuAD` [xquad]: (1 − λ)·P(d|q) + λ·Σ_s P(s|q)·P(d|s)·Π_{d'∈S}(1 − P(d'|s)).
* :class:`IASelect` [ia_select]: Σ_s P(s|q)·V(d|q,s)·Π_{d'∈S}(1 − V(d'|q,s)).
* :class:`LancerAggregation` [lancer_sum, lancer_rrf, lancer_greedy_sum, lancer_greedy_cov,
  lancer_greedy_alpha]: LANCER's aggregations over the label record's ``ratings``.
* :class:`GoldSupporting` [gold_support]: the candidates that are gold supporting paragraphs
  (``gold_doc_ids``), in retrieval order: an upper-bound reference, not a method.
* :class:`TeacherLabels` [teacher]: the teacher's ``selected``, truncated to ``k``.
* :class:`StudentSelections` [student]: the student's ``selected``, truncated to ``k``.

Embedding similarity (MMR, xQuAD, IA-Select): texts are encoded with an *embedder*, any object
with the sentence-transformers ``encode(texts, batch_size=..., normalize_embeddings=True,
convert_to_numpy=True, show_progress_bar=False)`` API, through
`purecover.data.retrieval.dense.encode_texts` (the teacher's embedding estimator uses the same);
similarities are cosines of the normalised embeddings. A passage is encoded as
`purecover.data.passage.passage_text` renders it (``title\\ntext``, ``text`` alone when untitled).
Each question's texts are encoded in encoder calls of their own (the question with its passages;
the subtopics), so a question's selection never depends on which other questions were evaluated
with it; a selector instance caches each such call's result by its list of texts.

xQuAD / IA-Select probabilities: P(s|q) is uniform over the subtopics; P(d|s) (= V(d|q,s) for
IA-Select) and, for xQuAD, P(d|q) are the softmax over the candidates of cos/``temperature``
(default 0.1: cosines live in [−1, 1], so a softmax at temperature 1 would be almost uniform).
Subtopics are the label record's ``steps`` (teacher reasoning steps, ``subtopics="steps"``) or
its ``subquestions`` (LANCER sub-questions, ``subtopics="subquestions"``); when the label record
is absent or has none, the question itself is the only subtopic (xQuAD then reduces to a
relevance ranking and IA-Select to a relevance ranking with diminishing returns), and the
selector counts such questions in ``fallback_count``.

Tie rule (everywhere): among equal scores or gains, the earlier candidate (smaller position) wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from purecover.data.passage import passage_text
from purecover.data.retrieval.dense import encode_texts
from purecover.records import CandidateDoc, CandidateRecord, LabelRecord
from purecover.teacher.lancer_rank import LANCER_METHODS, lancer_rank

__all__ = [
    "BASELINE_NAMES",
    "MMR",
    "BaselineSelector",
    "CrossEncoderRerank",
    "GoldSupporting",
    "IASelect",
    "ICRFusedRerank",
    "ICRRerank",
    "LancerAggregation",
    "RetrievalTopK",
    "StoredSelection",
    "StudentSelections",
    "TeacherLabels",
    "XQuAD",
    "doc_text",
    "make_baseline",
]

class StoredSelection(Protocol):
    """A subset stored for one question (a student's `purecover.records.SelectionRecord`, an external
    reranker's selection, or a teacher's `purecover.records.LabelRecord`): candidate positions, best first."""

    @property
    def qid(self) -> str: ...

    @property
    def selected(self) -> list[int]: ...


@runtime_checkable
class BaselineSelector(Protocol):
    """A selector: candidate positions, best first, at most k, no duplicates."""

    name: str

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None,
               selection_record: StoredSelection | None, k: int) -> list[int]: ...


# ----------------------------------------------------------------------------- helpers

def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer ≥ 1, got {k!r}")
    return int(k)


def _check_same_qid(candidate_record: CandidateRecord, other: StoredSelection, kind: str) -> None:
    if other.qid != candidate_record.qid:
        raise ValueError(f"{kind} record qid {other.qid!r} does not match candidate record qid "
                         f"{candidate_record.qid!r}")


def doc_text(doc: CandidateDoc) -> str:
    """The text a passage is embedded or scored as: `purecover.data.passage.passage_text`
    (``title\\ntext`` with both stripped, ``text`` when untitled)."""
    return passage_text(doc.title, doc.text)


def _descending(scores: np.ndarray) -> list[int]:
    """Positions by descending score, ties by smaller position."""
    return [int(i) for i in np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")]


def _first_argmax(values: np.ndarray, available: np.ndarray) -> int:
    masked = np.where(available, values, -np.inf)
    return int(np.argmax(masked))  # np.argmax returns the first maximum


def _softmax(x: np.ndarray, temperature: float, axis: int = -1) -> np.ndarray:
    z = x / temperature
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _positions(values: Any, n_docs: int, qid: str, field: str) -> list[int]:
    if not isinstance(values, list):
        raise ValueError(f"question {qid}: {field} must be a list of candidate positions, got {values!r}")
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < n_docs:
            raise ValueError(f"question {qid}: {field} holds {v!r}, not a candidate position in 0..{n_docs - 1}")
        if int(v) in out:
            raise ValueError(f"question {qid}: {field} repeats position {int(v)}")
        out.append(int(v))
    return out


class _EmbeddingCache:
    """`encode_texts(embedder, texts)`, one encoder call per distinct list of texts, cached by the whole list.

    The cached value of a list is a function of that list alone (the encoder sees exactly it), so
    reusing it is safe: unlike a cache by single text, it never mixes vectors from differently
    composed encoder batches.
    """

    def __init__(self, embedder: Any) -> None:
        if not callable(getattr(embedder, "encode", None)):
            raise TypeError(f"embedder must have a sentence-transformers style encode(); got {type(embedder).__name__}")
        self.embedder = embedder
        self.cache: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self.cache:
            self.cache[key] = encode_texts(self.embedder, key)
        return self.cache[key]


# ----------------------------------------------------------------------------- selectors

class RetrievalTopK:
    """The first k candidates, in retrieval order."""

    name = "retrieval"

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        return list(range(min(k, len(candidate_record.docs))))


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
        return self.per_layer(candidate_record, wanted).score(wanted)

    def scores(self, candidate_record: CandidateRecord) -> np.ndarray:
        """One score per candidate (in candidate order): the calibrated ICR score."""
        return self.icr(candidate_record)

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        return _descending(self.scores(candidate_record))[:k]


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


class _EmbeddingSelector:
    def __init__(self, embedder: Any) -> None:
        self._embed = _EmbeddingCache(embedder)

    def prepare(self, candidate_records: Sequence[CandidateRecord]) -> None:
        """Embed the question and passages of each record ahead of `select` (one encoder call per record)."""
        for rec in candidate_records:
            if rec.docs:
                self._embed(self._query_doc_texts(rec))

    @staticmethod
    def _query_doc_texts(candidate_record: CandidateRecord) -> list[str]:
        return [candidate_record.question] + [doc_text(d) for d in candidate_record.docs]

    def _query_docs(self, candidate_record: CandidateRecord) -> tuple[np.ndarray, np.ndarray]:
        vecs = self._embed(self._query_doc_texts(candidate_record))
        return vecs[0], vecs[1:]


class MMR(_EmbeddingSelector):
    """Maximal marginal relevance: argmax_d λ·cos(q, d) − (1 − λ)·max_{d'∈S} cos(d, d').

    With S empty the redundancy term is 0; λ = 1 is the relevance (cosine) order.
    """

    name = "mmr"

    def __init__(self, embedder: Any, lam: float = 0.5) -> None:
        if not 0 <= lam <= 1:
            raise ValueError(f"lam must lie in [0, 1], got {lam}")
        super().__init__(embedder)
        self.lam = lam

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        if not candidate_record.docs:
            return []
        q, D = self._query_docs(candidate_record)
        rel = D @ q
        sim = D @ D.T
        n = len(rel)
        available = np.ones(n, dtype=bool)
        max_sim = np.zeros(n, dtype=np.float64)
        out: list[int] = []
        for _ in range(min(k, n)):
            redundancy = max_sim if out else np.zeros(n)
            i = _first_argmax(self.lam * rel - (1 - self.lam) * redundancy, available)
            out.append(i)
            available[i] = False
            max_sim = np.maximum(max_sim, sim[:, i]) if len(out) > 1 else sim[:, i].copy()
        return out


class _SubtopicSelector(_EmbeddingSelector):
    def __init__(self, embedder: Any, subtopics: str = "steps", temperature: float = 0.1) -> None:
        if subtopics not in ("steps", "subquestions"):
            raise ValueError(f"subtopics must be 'steps' or 'subquestions', got {subtopics!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        super().__init__(embedder)
        self.subtopics = subtopics
        self.temperature = temperature
        self.fallback_count = 0

    def subtopic_texts(self, candidate_record: CandidateRecord, label_record: LabelRecord | None) -> list[str]:
        """The label's steps / sub-questions, or [question] when there are none (counted in fallback_count)."""
        if label_record is not None:
            _check_same_qid(candidate_record, label_record, "label")
            values = (label_record.steps if self.subtopics == "steps" else label_record.subquestions) or []
            texts = [v.strip() for v in values if v.strip()]
            if texts:
                return texts
        self.fallback_count += 1
        return [candidate_record.question]

    def _probabilities(self, candidate_record: CandidateRecord, label_record: LabelRecord | None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """(P(d|q) over candidates (n,), P(d|s) (m, n)), softmax of cos/temperature over candidates."""
        q, D = self._query_docs(candidate_record)
        S = self._embed(self.subtopic_texts(candidate_record, label_record))
        return _softmax(D @ q, self.temperature), _softmax(S @ D.T, self.temperature, axis=1)


class XQuAD(_SubtopicSelector):
    """xQuAD: argmax_d (1 − λ)·P(d|q) + λ·Σ_s P(s|q)·P(d|s)·Π_{d'∈S}(1 − P(d'|s)).

    P(s|q) uniform, P(d|q) and P(d|s) softmax-normalised cosines (module docstring).
    """

    name = "xquad"

    def __init__(self, embedder: Any, lam: float = 0.5, subtopics: str = "steps", temperature: float = 0.1) -> None:
        if not 0 <= lam <= 1:
            raise ValueError(f"lam must lie in [0, 1], got {lam}")
        super().__init__(embedder, subtopics, temperature)
        self.lam = lam

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        n = len(candidate_record.docs)
        if n == 0:
            return []
        p_dq, p_ds = self._probabilities(candidate_record, label_record)
        m = p_ds.shape[0]
        p_sq = np.full(m, 1.0 / m)
        not_covered = np.ones(m, dtype=np.float64)  # Π_{d'∈S}(1 − P(d'|s))
        available = np.ones(n, dtype=bool)
        out: list[int] = []
        for _ in range(min(k, n)):
            div = (p_sq * not_covered) @ p_ds
            i = _first_argmax((1 - self.lam) * p_dq + self.lam * div, available)
            out.append(i)
            available[i] = False
            not_covered *= 1.0 - p_ds[:, i]
        return out


class IASelect(XQuAD):
    """IA-Select (Agrawal et al. 2009): argmax_d Σ_s U(s)·V(d|q,s), U(s) = P(s|q)·Π_{d'∈S}(1 − V(d'|q,s)).

    P(s|q) uniform, V(d|q,s) the softmax-normalised cosine P(d|s) (module docstring). This is
    xQuAD's diversity term alone, i.e. xQuAD with λ = 1.
    """

    name = "ia_select"

    def __init__(self, embedder: Any, subtopics: str = "steps", temperature: float = 0.1) -> None:
        super().__init__(embedder, lam=1.0, subtopics=subtopics, temperature=temperature)


class LancerAggregation:
    """LANCER aggregation `method` (see `purecover.teacher.lancer_rank`) over the label's ``ratings``."""

    def __init__(self, method: str, **params: Any) -> None:
        if method not in LANCER_METHODS:
            raise ValueError(f"unknown LANCER method {method!r}; expected one of {sorted(LANCER_METHODS)}")
        self.method = method
        self.params = params
        self.name = "lancer_" + method.replace("-", "_")

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        qid = candidate_record.qid
        n = len(candidate_record.docs)
        if label_record is None or label_record.ratings is None:
            raise ValueError(f"question {qid}: {self.name} needs LANCER 'ratings' in the label record, "
                             f"but {'there is no label record' if label_record is None else 'it has none'}")
        _check_same_qid(candidate_record, label_record, "label")
        R = np.asarray(label_record.ratings, dtype=np.float64)
        if R.ndim != 2 or R.shape[0] != n:
            raise ValueError(f"question {qid}: ratings have shape {R.shape}, expected ({n}, n_subquestions)")
        try:
            return lancer_rank(R, self.method, **self.params).order[:k]
        except ValueError as exc:
            raise ValueError(f"question {qid}: {exc}") from None


class GoldSupporting:
    """The gold supporting paragraphs among the candidates (``gold_doc_ids``), in retrieval order, first k."""

    name = "gold_support"

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        gold = set(candidate_record.gold_doc_ids)
        return [i for i, d in enumerate(candidate_record.docs) if d.doc_id in gold][:k]


class _StoredSelection:
    """A subset stored in a record (teacher label or student selection), truncated to k."""

    name = ""
    source = ""  # "label" or "selection"

    def _record(self, label_record: LabelRecord | None,
                selection_record: StoredSelection | None) -> StoredSelection | None:
        return label_record if self.source == "label" else selection_record

    def select(self, candidate_record: CandidateRecord, label_record: LabelRecord | None = None,
               selection_record: StoredSelection | None = None, k: int = 5) -> list[int]:
        k = _check_k(k)
        qid = candidate_record.qid
        record = self._record(label_record, selection_record)
        what = "label record" if self.source == "label" else "selections record"
        if record is None:
            raise ValueError(f"question {qid}: the {self.name} baseline needs a {what}")
        _check_same_qid(candidate_record, record, self.source)
        return _positions(record.selected, len(candidate_record.docs), qid, f"{self.source} 'selected'")[:k]


class TeacherLabels(_StoredSelection):
    """The teacher's ``selected`` positions (label record), truncated to k."""

    name = "teacher"
    source = "label"


class StudentSelections(_StoredSelection):
    """The student's ``selected`` positions (selections record, thresholded by the student), truncated to k."""

    name = "student"
    source = "selection"


# ----------------------------------------------------------------------------- registry

def _lancer(method: str) -> Callable[..., LancerAggregation]:
    def make(**params: Any) -> LancerAggregation:
        return LancerAggregation(method, **params)

    return make


_REGISTRY: dict[str, Callable[..., BaselineSelector]] = {
    "retrieval": RetrievalTopK,
    "cross_encoder": CrossEncoderRerank,
    "icr": ICRRerank,
    "icr_fused": ICRFusedRerank,
    "mmr": MMR,
    "xquad": XQuAD,
    "ia_select": IASelect,
    "lancer_sum": _lancer("sum"),
    "lancer_rrf": _lancer("rrf"),
    "lancer_greedy_sum": _lancer("greedy-sum"),
    "lancer_greedy_cov": _lancer("greedy-cov"),
    "lancer_greedy_alpha": _lancer("greedy-alpha"),
    "gold_support": GoldSupporting,
    "teacher": TeacherLabels,
    "student": StudentSelections,
}

BASELINE_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def make_baseline(name: str, **kwargs: Any) -> BaselineSelector:
    """Build the baseline `name` (one of `BASELINE_NAMES`) with constructor `kwargs`.

    mmr/xquad/ia_select need ``embedder=``; cross_encoder takes ``model_name=``, ``batch_size=``; icr and
    icr_fused take ``model_name=``, ``layers=``, ``max_passage_tokens=`` (icr_fused also ``fusion_weight=``);
    the lancer_* names take the method's parameters (``tau``, ``kappa``, ``alpha``).
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown baseline {name!r}; expected one of {list(BASELINE_NAMES)}") from None
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"bad arguments {sorted(kwargs)} for baseline {name!r}: {exc}") from None
