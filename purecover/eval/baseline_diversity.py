"""The baselines that trade relevance against redundancy or cover subtopics on embedding cosines: `MMR`,
`XQuAD` and `IASelect` (probabilities and tie rule in `purecover.eval.baselines`' docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from purecover.records import CandidateRecord, LabelRecord

from .baseline_common import (
    StoredSelection,
    _check_k,
    _check_same_qid,
    _EmbeddingCache,
    _first_argmax,
    _softmax,
    doc_text,
)


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
