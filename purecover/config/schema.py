"""Look-ups in the recipe's JSON schema and the error messages built from them: a pydantic
`ValidationError` becomes one line per dotted key (closest valid key or value suggested, the range in
words); the type and range texts are also those of the recipe reference (`purecover.config.reference`)."""

from __future__ import annotations

import copy
import difflib
import functools
from typing import Any

from pydantic import JsonValue, TypeAdapter, ValidationError

from .base import _NOT_BLANK, _SectionError
from .recipe import Recipe


@functools.cache
def _adapter() -> TypeAdapter[Recipe]:
    return TypeAdapter(Recipe)


def recipe_json_schema() -> dict[str, JsonValue]:
    """The JSON schema of a recipe: every section, key, type, range, default and description (a copy)."""
    return copy.deepcopy(_json_schema())


@functools.cache
def _json_schema() -> dict[str, JsonValue]:
    return _adapter().json_schema()


def _resolve(node: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """`node` with its ``$ref`` followed (a section's schema)."""
    defs = _json_schema().get("$defs", {})
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _schema_at(parts: list[str]) -> dict[str, JsonValue] | None:
    """The schema of the key `parts` names (``["teacher", "lancer"]``), or None when there is no such key."""
    node = _resolve(_json_schema())
    for part in parts:
        props = node.get("properties")
        if props is None or part not in props:
            return None
        node = _resolve(props[part])
    return node


_NAMES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "null",
          "object": "mapping", "array": "list"}
_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
          "null": "null", "object": "a mapping", "array": "a list"}
_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")
# pydantic error types of a value of the right type outside its field's range.
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_pattern_mismatch"}


def _members(node: dict[str, JsonValue]) -> list[dict[str, JsonValue]]:
    return [_resolve(m) for m in node["anyOf"]] if "anyOf" in node else [node]


def _literals(node: dict[str, JsonValue]) -> list[JsonValue]:
    """The values of the Literal alternatives of `node`."""
    out: list[JsonValue] = []
    for m in _members(node):
        out += [m["const"]] if "const" in m else list(m.get("enum", ()))
    return out


def _type_name(node: dict[str, JsonValue]) -> str:
    """Short name of a type, as in ``int | null`` or ``'all' | list of int``."""
    if "anyOf" in node:
        return " | ".join(_type_name(m) for m in _members(node))
    if "const" in node or "enum" in node:
        return " | ".join(repr(v) for v in _literals(node))
    if node.get("type") == "array":
        return f"list of {_type_name(_resolve(node.get('items', {})))}"
    if "properties" in node:
        return "mapping"
    return _NAMES.get(node.get("type", ""), "value")


def _expected(node: dict[str, JsonValue]) -> str:
    """What a key accepts, in words: ``an integer``, ``list of str``, ``float | null``."""
    if "anyOf" in node or node.get("type") == "array":
        return _type_name(node)
    if "properties" in node:
        return "a mapping"
    return _WORDS.get(node.get("type", ""), "a valid value")


def _bounds(node: dict[str, JsonValue]) -> str | None:
    """The range a number must lie in, as ``>= 1``, ``> 0`` or ``in [0, 1)``; None without one."""
    low = ("[", node["minimum"]) if "minimum" in node else ("(", node["exclusiveMinimum"]) \
        if "exclusiveMinimum" in node else None
    high = ("]", node["maximum"]) if "maximum" in node else (")", node["exclusiveMaximum"]) \
        if "exclusiveMaximum" in node else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    if high:
        return f"{'<=' if high[0] == ']' else '<'} {high[1]}"
    return None


def _range_text(node: dict[str, JsonValue]) -> str:
    """What a key's range allows, as in ``>= 1 or null`` or ``'candidates' or an integer >= 1``."""
    members = _members(node)
    has_literal = any("const" in m or "enum" in m for m in members)
    parts: list[str] = []
    for m in members:
        word = _WORDS.get(m.get("type", ""), "a value")
        bounds = _bounds(m)
        if "const" in m or "enum" in m:
            parts += [repr(v) for v in _literals(m)]
        elif m.get("pattern") == _NOT_BLANK:
            parts.append("a non-blank string")
        elif bounds is None or m.get("type") == "null":
            parts.append(word)
        else:
            parts.append(f"{word} {bounds}" if has_literal else bounds)
    return " or ".join(parts)


def _shown(value: Any, node: dict[str, JsonValue]) -> str:
    """`value` as a message shows it: an integer given for a number is the float it becomes."""
    types = {m.get("type") for m in _members(node)}
    if isinstance(value, int) and not isinstance(value, bool) and "number" in types and "integer" not in types:
        value = float(value)
    return repr(value)


_MISSING = object()


def _child(value: Any, item: str | int) -> Any:
    if isinstance(value, dict):
        return value.get(item, _MISSING)
    if isinstance(value, list) and isinstance(item, int) and -len(value) <= item < len(value):
        return value[item]
    return getattr(value, str(item), _MISSING)


def _error_message(exc: ValidationError, tree: Any) -> str:
    """Every problem of `exc`, raised validating `tree`: one line naming the dotted key when there is one, else
    their count and a line each (two typos are reported in one run, not one per run). A key's several errors
    (a union's alternatives) give one line; misspelt keys come first, as they explain the most."""
    errors = exc.errors(include_url=False)
    ordered = [e for e in errors if e["type"] in _UNKNOWN_KEY] + [e for e in errors if e["type"] not in _UNKNOWN_KEY]
    lines: dict[str, str] = {}
    for error in ordered:
        key, message = _error_line(error, errors, tree)
        lines.setdefault(key, message)
    if len(lines) == 1:
        return next(iter(lines.values()))
    return f"{len(lines)} problems:\n" + "\n".join(f"  - {m}" for m in lines.values())


def _error_line(first: Any, errors: list[Any], tree: Any) -> tuple[str, str]:
    """(the dotted key error `first` of `errors` is about, its one-line message)."""
    loc = tuple(first["loc"])
    node, value, dotted, used = _resolve(_json_schema()), tree, "", 0
    for item in loc:  # follow the location through sections and list items; stop at a union's branch name
        if isinstance(item, str) and item in node.get("properties", {}):
            node, dotted = _resolve(node["properties"][item]), f"{dotted}.{item}" if dotted else item
        elif isinstance(item, int) and node.get("type") == "array":
            node, dotted = _resolve(node.get("items", {})), f"{dotted}[{item}]"
        else:
            break
        value, used = _child(value, item), used + 1
    if used == len(loc) or value is _MISSING:
        value = first.get("input")
    kind, label, prefix = first["type"], dotted or "recipe", f"{dotted}." if dotted else ""
    if kind in _UNKNOWN_KEY and used == len(loc) - 1:
        key, names = str(loc[-1]), list(node.get("properties", {}))
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        return prefix + key, f"unknown key {prefix + key!r}{hint} (valid keys of {label}: {', '.join(names)})"
    error = (first.get("ctx") or {}).get("error")
    if isinstance(error, _SectionError):
        return f"{prefix}{error.key}", f"{prefix}{error.key}: {error}"
    if "properties" in node:  # a section given as something else than a mapping
        return label, f"{label}: expected a mapping, got {value!r}"
    if loc[used + 1:used + 2] == ("[key]",):
        return label, f"{label}: key {loc[used]!r} is not a string"
    literals = _literals(node)  # a Literal key, or a union with Literal alternatives: name the close one
    close = difflib.get_close_matches(value, [str(v) for v in literals], n=1) if isinstance(value, str) else []
    if close or (literals and "anyOf" not in node):
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return label, f"{label}: {value!r} is not one of {', '.join(map(repr, literals))}{hint}"
    field_errors = {e["type"] for e in errors if tuple(e["loc"][:used]) == loc[:used]}
    if field_errors & _RANGE_ERRORS:
        return label, f"{label}: must be {_range_text(node)}, got {_shown(value, node)}"
    if kind == "value_error":
        return label, f"{label}: {first['msg'].removeprefix('Value error, ')}"
    return label, f"{label}: expected {_expected(node)}, got {value!r}"

