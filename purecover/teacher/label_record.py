"""What a labels.jsonl record holds besides the selection: values at stored precision, and the
``teacher`` block (the recipe's teacher keys, the resolved estimation parameters, template hashes).

The record itself is `purecover.records.LabelRecord`; the label stage builds it in
`purecover.teacher.label_stage`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config import TeacherConfig
from ..records import EmbeddingSource, LancerSettings, PromptWording, TeacherSettings
from .defaults import EstimationParams

__all__ = ["lancer_templates", "stored", "stored_array", "stored_nested", "teacher_meta"]


def stored(x: float) -> float | None:
    """`x` at the precision labels.jsonl stores: 6 significant digits; non-finite values become None (null)."""
    x = float(x)
    return float(f"{x:.6g}") if np.isfinite(x) else None


def stored_nested(value: Any) -> Any:
    """`stored` applied to every number of a nested list."""
    return [stored_nested(v) for v in value] if isinstance(value, list) else stored(value)


def stored_array(values: np.ndarray) -> np.ndarray:
    """`values` at the stored precision (non-finite -> NaN), so that re-solving from the file (`purecover tune`)
    reproduces the labels exactly."""
    out = np.array(stored_nested(np.asarray(values, dtype=np.float64).tolist()), dtype=np.float64)
    return out.reshape(np.shape(values))


def teacher_meta(cfg: TeacherConfig, params: EstimationParams, templates: tuple[str | None, str | None] = (None, None),
                 prompt: PromptWording | None = None, layers_read: Sequence[int] | None = None) -> TeacherSettings:
    """The recipe's teacher keys as given (null = default) plus `estimation`, the resolved values used; the sha256
    of LANCER's custom (rating, sub-question) `templates` (`lancer_templates`), the reasoning `prompt`'s
    wording and `layers_read` (the attention layers ``teacher.layers`` resolved to, sorted indices) when given."""
    embedding = None
    if params.w_source == "similarity":  # where the embedding model's files came from (bundled copies are verified)
        from ..data.retrieval.dense import embedding_model_source

        source = embedding_model_source(cfg.embedding_model)
        embedding = EmbeddingSource(id=source["id"], source=source["source"],
                                    **({"weights_sha256": source["sha256"]["model.safetensors"]}
                                       if "sha256" in source else {}))
    shas = {f"{kind}_template_sha256": hashlib.sha256(text.encode()).hexdigest()[:16]
            for kind, text in zip(("rating", "subquestion"), templates) if text is not None}
    lancer = LancerSettings(enabled=cfg.lancer.enabled, beta=cfg.lancer.beta, n_subquestions=cfg.lancer.n_subquestions,
                            expected_rating=cfg.lancer.expected_rating, **shas)
    optional: dict[str, Any] = {"prompt": prompt} if prompt is not None else {}
    if layers_read is not None:
        optional["layers_read"] = [int(i) for i in layers_read]
    return TeacherSettings(
        model=cfg.model, backend=cfg.backend, steps=cfg.steps, estimator=cfg.estimator,
        embedding_model=cfg.embedding_model if params.w_source == "similarity" else None,
        embedding_source=embedding,
        layers=cfg.layers, calibrate=cfg.calibrate, cot_weighting=cfg.cot_weighting,
        normalize=params.normalize, tau1=cfg.tau1, tau2=cfg.tau2, embedding_tau=cfg.embedding_tau,
        embedding_tau_e=cfg.embedding_tau_e, lam=params.lam,
        budget=cfg.budget, tau_stop=cfg.tau_stop, min_select=cfg.min_select, selection=cfg.selection,
        lancer=lancer, estimation=params.to_record(), **optional)


def lancer_templates(cfg: TeacherConfig) -> tuple[str | None, str | None]:
    """LANCER's (rating, sub-question) custom template texts, read once per run (None: ours, or LANCER off)."""
    from .lancer import load_template

    texts: list[str | None] = []
    for kind, path in (("rating", cfg.lancer.rating_template), ("subquestion", cfg.lancer.subquestion_template)):
        texts.append(load_template(path, kind) if (cfg.lancer.enabled and path) else None)
    return texts[0], texts[1]
