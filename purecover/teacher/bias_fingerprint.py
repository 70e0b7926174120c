"""The calibrate stage's config-hash extra (`purecover.stages`: ``hash_extra``): what a position bias depends on
besides the ``teacher`` section. Apart from `purecover.teacher.calibration` (the fixed procedure) and
`purecover.teacher.in_context_calibration` (which builds on it) so that both are read from here, one way."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import JsonValue

from ..rundir import RunDir
from .calibration import length_source, weights_fingerprint
from .in_context_calibration import procedure_for
from .layers import resolved_layers_fingerprint
from .prompts import ReasoningPrompt

__all__ = ["bias_inputs_fingerprint"]


def bias_inputs_fingerprint(recipe: Any) -> str:
    """What the calibrate stage's config hash adds to the teacher section (`purecover.stages`): the teacher
    weights' identity, the reasoning prompt's wording, the document-length source (the candidates'
    fingerprint when lengths come from them) and, for ``teacher.layers: full_attention``, the layers it resolves
    to on the teacher's config (`purecover.teacher.layers.resolved_layers_fingerprint`: only a local config.json
    is read, so a change of the layers read, e.g. through another transformers' layer types, recomputes the
    bias; ``all`` and index lists depend only on the layer count, which the weights fingerprint covers). No model
    or tokenizer is loaded; a missing candidates file reads as ``missing`` (the stage itself then says how to
    make it)."""
    t = recipe.teacher
    source: JsonValue
    try:
        source = length_source(recipe.data.k1, t.calibration_lengths,
                               RunDir.of(recipe).path_of("candidates")).to_json_dict()
    except (OSError, ValueError):
        source = "missing"
    parts = {"weights": weights_fingerprint(t.model), "prompt": ReasoningPrompt.from_config(t).record().to_json_dict(),
             "lengths": source}
    if t.calibration_procedure != "fixed":  # the in-context bias depends on the questions it is measured on
        try:
            parts["procedure"] = procedure_for(t, recipe.data.k1, RunDir.of(recipe).path_of("candidates"))
        except (OSError, ValueError):
            parts["procedure"] = "missing"
    if t.layers == "full_attention":  # `all` and index lists resolve through num_hidden_layers alone (in `weights`)
        parts["layers"] = resolved_layers_fingerprint(t.model, t.layers, t.trust_remote_code)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
