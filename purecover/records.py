"""Typed records of the files purecover writes into a run directory, checked when they are read back.

Each record is a pydantic model: the writer builds the file through the model (``model_dump``) and
the reader validates the file into the same model, so both agree on names, types and ranges. Every
field carries a description (the source of the generated file-format docs).

`load_json_record` and `validate_record` turn pydantic's error list into ONE `RecordError` (a
`ValueError`) naming the file, the field as a dotted path (list items as ``[i]``) and the problem,
e.g. ``selector/selector_config.json: field tau3: must be a finite number (got nan)``.

Records are strict (``"3"`` is not an integer, ``true`` is not a number) and keep unknown keys, so a
file written by a newer purecover with extra keys still reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["IdentifiersRecord", "RecordError", "SelectorConfig", "load_json_record", "validate_record"]

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_PASSAGE_TOKENS = 192  # what selectors exported before the key existed were trained with


class RecordError(ValueError):
    """A run file that does not match its record; ``str(err)`` reads ``SOURCE: field F: problem[; hint]``."""

    def __init__(self, source: str, field: str | None, problem: str, hint: str | None = None) -> None:
        self.source, self.field, self.problem, self.hint = source, field, problem, hint
        what = f"field {field}: " if field else ""
        super().__init__(f"{source}: {what}{problem}" + (f"; {hint}" if hint else ""))


# --------------------------------------------------------------------------- error messages


def _dotted(loc: tuple[int | str, ...]) -> str | None:
    """``('identifiers', 'labels', 3)`` -> ``identifiers.labels[3]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
               float: "a number", type(None): "null"}


def _problem(error: Any) -> str:
    """One pydantic error as a short phrase: what the field must be and what it holds."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {_shown(value)})"
    if kind == "missing":
        return "missing"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a JSON object (got {_JSON_TYPES.get(type(value), type(value).__name__)})"
    if kind == "list_type":
        return f"must be a list (got {_JSON_TYPES.get(type(value), type(value).__name__)})"
    simple = {"finite_number": "must be a finite number", "int_type": "must be an integer",
              "float_type": "must be a number", "string_type": "must be a string", "bool_type": "must be true or false",
              "extra_forbidden": "is not a known field"}
    if kind in simple:
        return simple[kind] + got
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        bound = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {bound}{got}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length', '?')} item(s)"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    message = str(error["msg"])
    if message.startswith("Input should be"):
        message = "must be" + message[len("Input should be"):]
    return message + got


def _record_error(source: str, exc: ValidationError, hint: str | None) -> RecordError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    problem = _problem(first)
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s) in this file)"
    return RecordError(source, _dotted(tuple(first["loc"])), problem, hint)


def validate_record(model: type[M], data: Any, source: str, *, hint: str | None = None) -> M:
    """`data` (parsed JSON) as a `model`; a mismatch raises one `RecordError` naming `source` and the field.

    `hint` (what to do about a bad file) is appended to the message.
    """
    if not isinstance(data, dict):
        raise RecordError(source, None, f"expected a JSON object, got {_JSON_TYPES.get(type(data), type(data).__name__)}",
                          hint)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _record_error(source, exc, hint) from None


def load_json_record(path: str | Path, model: type[M], *, source: str | None = None, hint: str | None = None) -> M:
    """Read the JSON file `path` into a `model` (`validate_record`); `source` names it in errors (default: the path).

    A file that is not UTF-8 or not JSON raises a `RecordError` too; a missing file raises
    FileNotFoundError (the caller knows what should have written it).
    """
    path = Path(path)
    name = source or str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(name, None, f"not UTF-8 text (byte {exc.start})", hint) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(name, None, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                          hint) from None
    return validate_record(model, data, name, hint=hint)


# --------------------------------------------------------------------------- records

_STRICT = ConfigDict(strict=True, extra="allow")


class IdentifiersRecord(BaseModel):
    """The passage identifiers a selector was trained with (`IdentifierScheme.to_dict`)."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="Name of the identifier scheme, e.g. 'letters' (A..Z).")
    separator: str = Field(min_length=1, description="Text between identifiers in the reply (a newline).")
    labels: list[str] = Field(min_length=1, description="The identifiers in candidate order: passage k is "
                                                        "introduced by labels[k].")


class SelectorConfig(BaseModel):
    """``selector_config.json`` of an exported selector: how to prompt it and how to turn its scores into a
    selection. Written by ``purecover export``; read by `purecover.models.selector.read_selector_config`.

    Optional keys (``tau3_logprob``, ``max_passage_tokens``, ``purecover_version``, ``adapter``) are absent
    from files written by earlier versions; reading such a file fills the documented defaults.
    """

    model_config = _STRICT

    base_model: str = Field(min_length=1, description="Hub id or path of the model the selector was fine-tuned "
                                                      "from (an adapter export is loaded on top of it).")
    identifiers: IdentifiersRecord = Field(description="The identifier scheme (name, separator, labels).")
    prompt_template: dict[str, str] = Field(description="What defines the selection prompt (system, instructions, "
                                                        "layout, hash); the hash must match this purecover's.")
    k1: int = Field(ge=1, description="The most candidates one prompt may hold (the identifiers trained for).")
    tau3: float = Field(allow_inf_nan=False, description="Threshold on the first-token identifier logits: "
                                                         "passages scoring above it are kept.")
    tau3_logprob: float | None = Field(
        default=None, allow_inf_nan=False,
        description="The same threshold on log-probabilities renormalised over the present identifiers (vLLM "
                    "log-prob modes); absent in exports made before it existed.")
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
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The file's content: optional keys at their 'absent' value (no tau3_logprob, no adapter) left out."""
        data = self.model_dump(mode="json")
        if data.get("tau3_logprob") is None:
            data.pop("tau3_logprob", None)
        if not data.get("adapter"):
            data.pop("adapter", None)
        return data
