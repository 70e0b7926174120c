"""selector/selector_config.json: how to prompt an exported selector and how to turn its scores into a
selection, with the passage identifiers it was trained with (`IdentifiersRecord`, also in the student's
metadata)."""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue, create_model, model_validator

from ..config.student_settings import READOUT_SETTINGS, record_fields
from ..models.readouts import pair_problem
from .base import _STRICT, DEFAULT_MAX_PASSAGE_TOKENS, Finite


class IdentifiersRecord(BaseModel):
    """The passage identifiers a selector was trained with (`IdentifierScheme.to_dict`)."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="Name of the identifier scheme, e.g. 'letters' (A..Z).")
    separator: str = Field(min_length=1, description="Text between identifiers in the reply (a newline).")
    labels: list[str] = Field(min_length=1, description="The identifiers in candidate order: passage k is "
                                                        "introduced by labels[k].")


class _SelectorConfigFields(BaseModel):
    """``selector_config.json`` of an exported selector: how to prompt it and how to turn its scores into a
    selection. Written by ``purecover export``; read by `purecover.models.selector.read_selector_config`.

    Optional keys (``tau3_logprob``, ``max_passage_tokens``, ``purecover_version``, ``adapter``) are absent
    from files written by earlier versions; reading such a file fills the documented defaults. `SelectorConfig`
    adds the readout last (``readout``, ``passage_score``: the student's settings as declared in
    `purecover.config.student_settings`, absent at their defaults, the paper's readout).
    """

    model_config = _STRICT

    base_model: str = Field(min_length=1, description="Hub id or path of the model the selector was fine-tuned "
                                                      "from (an adapter export is loaded on top of it).")
    identifiers: IdentifiersRecord = Field(description="The identifier scheme (name, separator, labels).")
    prompt_template: dict[str, str] = Field(description="What defines the selection prompt (system, instructions, "
                                                        "layout, hash); the hash must match this purecover's.")
    k1: int = Field(ge=1, description="The most candidates one prompt may hold (the identifiers trained for).")
    tau3: Finite = Field(description="Threshold on the candidates' scores, the logits its readout reads (each "
                                     "identifier's at the first reply position, or each passage's at its "
                                     "marker): passages scoring above it are kept.")
    tau3_logprob: Finite | None = Field(
        default=None, description="The same threshold on log-probabilities renormalised over the present "
                                  "identifiers (vLLM log-prob modes); absent in exports made before it existed.")
    k_max: int | None = Field(ge=1, description="At most this many passages are kept; null for no limit.")
    min_select: int = Field(ge=0, description="At least this many passages are kept, even below the threshold.")
    purecover_version: str | None = Field(default=None, description="The purecover version that exported it.")
    max_passage_tokens: int = Field(default=DEFAULT_MAX_PASSAGE_TOKENS, ge=1,
                                    description="Each passage (title and text) is cut to this many tokens in the "
                                                "prompt, as in training.")
    adapter: bool = Field(default=False, description="True when the directory holds a LoRA adapter to load on "
                                                     "base_model instead of merged weights.")

    @model_validator(mode="after")
    def _min_select_within_k_max(self) -> SelectorConfig:
        if self.k_max is not None and self.min_select > self.k_max:
            raise ValueError(f"min_select ({self.min_select}) is above k_max ({self.k_max})")
        problem = pair_problem(self.readout, self.passage_score)
        if problem:
            raise ValueError(f"passage_score {problem}")
        return self

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The file's content: optional keys at their 'absent' value (no tau3_logprob, no adapter, the identifier
        readout, the token passage score) left out."""
        data = self.model_dump(mode="json")
        if data.get("tau3_logprob") is None:
            data.pop("tau3_logprob", None)
        if not data.get("adapter"):
            data.pop("adapter", None)
        for key in ("readout", "passage_score"):  # at the default: the paper's readout, as files before the keys
            if data.get(key) == type(self).model_fields[key].default:
                data.pop(key, None)
        return data


SelectorConfig = create_model(
    "SelectorConfig", __base__=_SelectorConfigFields, __module__=__name__,
    __doc__=_SelectorConfigFields.__doc__, **record_fields(READOUT_SETTINGS))
