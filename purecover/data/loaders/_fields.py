"""Typed access to one raw record with errors that name file, location and field."""

from __future__ import annotations

from typing import Any

from ..errors import DataFormatError

_KIND_NAMES = {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "an integer"}


class RecordView:
    """Wraps a raw record; `get` checks presence and type, `fail` raises a located DataFormatError."""

    def __init__(self, record: Any, source: str, location: str) -> None:
        self.source = source
        self.location = location
        if not isinstance(record, dict):
            raise DataFormatError(source, location, None, f"expected a JSON object, got {type(record).__name__}")
        self.record = record

    def fail(self, field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(self.source, self.location, field, problem)

    def has(self, name: str) -> bool:
        return self.record.get(name) is not None

    def get(self, name: str, kind: type | tuple[type, ...], *, optional: bool = False, default: Any = None,
            nonempty: bool = False, numbers_as_text: bool = False) -> Any:
        if name not in self.record or self.record[name] is None:
            if optional:
                return default
            raise self.fail(name, "missing")
        return self.check(self.record[name], name, kind, nonempty=nonempty, numbers_as_text=numbers_as_text)

    def first(self, names: tuple[str, ...], kind: type, **kw: Any) -> Any:
        """The first of `names` present (e.g. `_id` or `id`); missing all is an error naming them."""
        for name in names:
            if self.has(name):
                return self.get(name, kind, **kw)
        raise self.fail(" or ".join(names), "missing")

    def check(self, value: Any, field: str, kind: type | tuple[type, ...], *, nonempty: bool = False,
              numbers_as_text: bool = False) -> Any:
        """`value` if it is of `kind`; `numbers_as_text` accepts a number for a string (ids, answers)."""
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if numbers_as_text and kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            value, ok = str(value), True
        if not ok:
            kinds = kind if isinstance(kind, tuple) else (kind,)
            expected = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
            raise self.fail(field, f"expected {expected}, got {type(value).__name__}")
        if nonempty and (len(value) == 0 or (kind is str and not value.strip())):
            raise self.fail(field, "is empty")
        return value


def join_sentences(sentences: list[str]) -> str:
    """Join a sentence list into one text, adding a space only where neither side has one."""
    out = ""
    for s in sentences:
        if out and s and not out[-1].isspace() and not s[0].isspace():
            out += " "
        out += s
    return out.strip()
