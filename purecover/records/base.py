"""What every record module shares: the errors, the readers that turn pydantic's error list into one of
them, the `_Written` base of the records purecover writes, and the field types and checks used across
records. Every other module of `purecover.records` imports from this one (and this one from none of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

M = TypeVar("M", bound=BaseModel)

DEFAULT_MAX_PASSAGE_TOKENS = 192  # what selectors exported before the key existed were trained with


class RecordError(ValueError):
    """A run file that does not match its record; ``str(err)`` reads ``SOURCE: field F: problem[; hint]``."""

    def __init__(self, source: str, field: str | None, problem: str, hint: str | None = None) -> None:
        self.source, self.field, self.problem, self.hint = source, field, problem, hint
        super().__init__(self._message())

    def _field_text(self) -> str:
        return f"field {self.field}: "

    def _message(self) -> str:
        what = self._field_text() if self.field else ""
        return f"{self.source}: {what}{self.problem}" + (f"; {self.hint}" if self.hint else "")


class LineRecordError(RecordError):
    """A JSONL line that does not match its record; ``str(err)`` reads ``PATH:LINE: field 'F': problem[; hint]``
    (the style of every JSONL reader's errors)."""

    def __init__(self, path: str | Path, lineno: int, field: str | None, problem: str,
                 hint: str | None = None) -> None:
        self.path, self.lineno = Path(path), lineno
        super().__init__(f"{path}:{lineno}", field, problem, hint)

    def _field_text(self) -> str:
        return f"field {self.field!r}: "


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


def _json_type(value: Any) -> str:
    """What `value` is in JSON's words: ``an object``, ``a list``, ``null``... (a Python type name otherwise)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _problem(error: Any) -> str:
    """One pydantic error as a short phrase: what the field must be and what it holds."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {_shown(value)})"
    if kind == "missing":
        return "missing"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a JSON object (got {_json_type(value)})"
    if kind == "list_type":
        return f"must be a list (got {_json_type(value)})"
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


def _first_problem(exc: ValidationError, where: str) -> tuple[str | None, str]:
    """(dotted field, problem) of the first error, with a count of the others found in `where`."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    problem = _problem(first)
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s) in {where})"
    return _dotted(tuple(first["loc"])), problem


def _validated(model: type[M], data: Any, where: str, error: Callable[[str | None, str], RecordError]) -> M:
    """`data` as a `model`; a mismatch raises ``error(dotted field or None, problem)``, the problem counting the
    others found in `where` ('this file', 'this record')."""
    if not isinstance(data, dict):
        raise error(None, f"expected a JSON object, got {_json_type(data)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(*_first_problem(exc, where)) from None


def validate_record(model: type[M], data: Any, source: str, *, hint: str | None = None) -> M:
    """`data` (parsed JSON) as a `model`; a mismatch raises one `RecordError` naming `source` and the field.

    `hint` (what to do about a bad file) is appended to the message.
    """
    return _validated(model, data, "this file", lambda field, problem: RecordError(source, field, problem, hint))


def validate_line(model: type[M], data: Any, path: str | Path, lineno: int, *, hint: str | None = None) -> M:
    """One JSONL line's value (`data`) as a `model`; a mismatch raises one `LineRecordError` naming
    ``path:lineno`` and the field."""
    return _validated(model, data, "this record",
                      lambda field, problem: LineRecordError(path, lineno, field, problem, hint))


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


# --------------------------------------------------------------------------- the base of written records

_STRICT = ConfigDict(strict=True, extra="allow")


class _Written(BaseModel):
    """A record purecover writes: `to_json_dict` is exactly the dict it has always written."""

    model_config = _STRICT

    # Fields written only when given (absent from the file otherwise, rather than written as null).
    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    def to_json_dict(self) -> dict[str, JsonValue]:
        """The file's content: every field in declaration order (then any unknown key kept from a file read
        back), the `WRITTEN_WHEN_SET` ones only when given; nested records follow their own rule."""
        data = self.model_dump(exclude={k for k in self.WRITTEN_WHEN_SET if k not in self.model_fields_set})
        for name in data.keys() & type(self).model_fields.keys():
            value = getattr(self, name)
            if _holds_record(value):
                data[name] = _as_written(value)
        return data


def _holds_record(value: Any) -> bool:
    """Whether `value` is, or contains (in lists and dicts), a `_Written` record."""
    if isinstance(value, _Written):
        return True
    if isinstance(value, dict):
        return any(_holds_record(v) for v in value.values())
    return isinstance(value, list) and any(_holds_record(v) for v in value)


def _as_written(value: Any) -> Any:
    """`value` with every record in it replaced by its `to_json_dict`."""
    if isinstance(value, _Written):
        return value.to_json_dict()
    if isinstance(value, dict):
        return {k: _as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_written(v) for v in value]
    return value


# --------------------------------------------------------------------------- shared field types and checks

NonNegativeInt = Annotated[int, Field(ge=0)]  # a count
PositiveInt = Annotated[int, Field(ge=1)]  # a budget K, a size that cannot be zero
Finite = Annotated[float, Field(allow_inf_nan=False)]  # a threshold or a difference: never nan or inf
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # a share or a probability, in [0, 1]
Stored = Annotated[float | None, Field(description="6 significant digits; null for a non-finite value.")]

R = TypeVar("R", bound=BaseModel)


def check_same_lengths(record: R, *fields: str) -> R:
    """`record` when its list `fields` (two or more) have one length; else a ValueError naming them and their
    lengths, e.g. ``selected and doc_ids differ in length (2, 1)``: the body of a record's ``model_validator``."""
    lengths = [len(getattr(record, name)) for name in fields]
    if len(set(lengths)) > 1:
        named = f"{', '.join(fields[:-1])} and {fields[-1]}"
        raise ValueError(f"{named} differ in length ({', '.join(map(str, lengths))})")
    return record
