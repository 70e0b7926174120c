"""Loading a recipe: its file and its bases merged, ``--set`` overrides applied, the whole validated; and the
resolved recipe's plain form (`recipe_to_dict`), YAML text (`dump_recipe_yaml`) and section hashes
(`section_fingerprint`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import JsonValue, ValidationError

from .base import ConfigError
from .recipe import Recipe
from .safe_yaml import _read_yaml_text, _yaml_load
from .schema import _adapter, _error_message, _schema_at

# Bases nest at most this deep: a deeper chain is refused, naming its first recipes and the last one read.
MAX_BASE_DEPTH = 32


def parse_override(item: str) -> tuple[str, Any]:
    """Split ``section.key=value`` into the dotted key and its YAML-typed value."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected section.key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r}: empty key")
    value = _yaml_load(raw, f"override {key}", lines=False) if raw.strip() else None
    return key, value


def _check_section_override(item: str, key: str, value: Any) -> None:
    """``--set data=null`` or ``--set teacher=3`` would replace a whole section: refuse it by name."""
    section = _schema_at(key.split("."))
    if section is None or "properties" not in section or isinstance(value, dict):
        return
    shown = "null" if value is None else repr(value)
    raise ConfigError(
        f"override {item!r}: {key}: expected a mapping, got {shown}; {key} is a whole section, not a single "
        f"value: set one of its keys instead ({key}.KEY=VALUE; keys: {', '.join(section['properties'])})")


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    node[parts[-1]] = value


def recipe_from_dict(tree: dict[str, Any] | None, source: str = "recipe") -> Recipe:
    """Validate a recipe mapping and build the `Recipe`; `source` prefixes error messages."""
    tree = tree or {}
    try:
        return _adapter().validate_python(tree)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_error_message(exc, tree)}") from None


def _merge(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper` merged over `lower` (neither is changed): mappings merge key by key, any other value of
    `upper` (a list, a scalar, null) replaces `lower`'s."""
    out = dict(lower)
    for key, value in upper.items():
        below = out.get(key)
        out[key] = _merge(below, value) if isinstance(value, dict) and isinstance(below, dict) else value
    return out


def _read_recipe_file(path: Path, shown: str, base_of: str | None = None) -> dict[str, Any]:
    """The YAML mapping of one recipe file (its ``base`` key not followed); `shown` names it in messages,
    `base_of` is the recipe that names it as a base (None for the recipe itself)."""
    if base_of is not None:
        kind, where = "a base recipe", f" (a base of {base_of})"
    else:
        kind, where = "a recipe", ""
    loaded = _yaml_load(_read_yaml_text(path, shown, kind), shown)
    if loaded is None:
        if base_of is not None:
            raise ConfigError(f"base recipe {shown}{where} is empty (no keys, only comments or null): write keys "
                              "into it or remove it from the base list")
        raise ConfigError(f"recipe {shown} is empty (no keys, only comments or null): write the recipe's "
                          "sections into it, or leave out the recipe file to start from the defaults")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{shown}: {kind} must be a YAML mapping, got {type(loaded).__name__}{where}")
    return loaded


def _base_entries(value: Any, shown: str) -> list[tuple[str, str]]:
    """The ``base`` value of recipe `shown` as (key, path) pairs: ``("base", p)`` or ``("base[i]", p)``."""
    if value is None:
        return []
    if isinstance(value, str) and value.strip():
        return [("base", value)]
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [(f"base[{i}]", v) for i, v in enumerate(value)]
    raise ConfigError(f"{shown}: base: expected a path or a non-empty list of paths (relative to the recipe's "
                      f"folder), got {value!r}")


def _load_tree(path: Path, shown: str, chain: tuple[tuple[Path, str], ...] = (),
               base_of: str | None = None) -> dict[str, Any]:
    """The mapping of recipe `path` with its bases merged underneath (recursively), without the ``base`` key.

    `chain` holds the recipes (resolved path, shown name) that led here, to refuse a cycle by naming it.
    """
    key = path.resolve()
    if len(chain) >= MAX_BASE_DEPTH:
        raise ConfigError(f"{chain[0][1]}: base recipes nest deeper than {MAX_BASE_DEPTH} ({chain[0][1]} -> "
                          f"{chain[1][1]} -> ... -> {shown}); fold some of them into one")
    for i, (seen, _) in enumerate(chain):
        if seen == key:
            cycle = " -> ".join([name for _, name in chain[i:]] + [shown])
            raise ConfigError(f"{chain[0][1]}: base recipes form a cycle: {cycle}")
    tree = _read_recipe_file(path, shown, base_of)
    entries = _base_entries(tree.pop("base", None), shown)
    merged: dict[str, Any] = {}
    for dotted, name in entries:
        base_path = path.parent / name
        base_shown = os.path.normpath(Path(shown).parent / name)
        if not base_path.is_file():
            raise ConfigError(f"{shown}: {dotted}: base recipe {name!r} does not exist (looked for {base_shown}; "
                              "a base is relative to the folder of the recipe that names it)")
        merged = _merge(merged, _load_tree(base_path, base_shown, (*chain, (key, shown)), shown))
    return _merge(merged, tree) if entries else tree


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (or start from defaults when `path` is None) and apply overrides.

    A recipe may start with a ``base`` key: a path, or a list of paths, to other recipes, relative to
    the folder of the file that names them. Each base is loaded the same way (its own bases first)
    and the recipe is merged over it: mappings (sections, ``student.training``, ...) merge key by key,
    and any other value the recipe gives (a list, a scalar, null) replaces the base's. In a list,
    later bases override earlier ones, and the recipe overrides them all. A cycle of bases, a base file
    that does not exist and a base that is not a mapping are `ConfigError` s naming the recipe (and the
    cycle, or the ``base`` entry). The ``base`` key itself is not part of the resolved recipe.
    ``section.key=value`` overrides apply after the merge, then the whole recipe is validated.
    """
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"recipe {str(p)!r} does not exist")
        source = str(p)
        tree = _load_tree(p, source)
    for item in overrides:
        key, value = parse_override(item)
        _check_section_override(item, key, value)
        _set_dotted(tree, key, value)
    if overrides:
        source += " + overrides"
    return recipe_from_dict(tree, source)


def recipe_to_dict(recipe: Recipe) -> dict[str, JsonValue]:
    """Plain-data form of a recipe (what is written next to every stage's output), keys in declaration order."""
    return dataclasses.asdict(recipe)


def section_fingerprint(recipe: Recipe, *keys: str, exclude: tuple[str, ...] = ()) -> str:
    """Stable hash of the named top-level recipe keys (e.g. "data", "seed"): 16 hex chars. `exclude`:
    dotted keys left out (e.g. ``student.launch.main_process_port``)."""
    tree = recipe_to_dict(recipe)
    for dotted in exclude:
        *parents, leaf = dotted.split(".")
        node: Any = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    blob = json.dumps({k: tree[k] for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dump_recipe_yaml(recipe: Recipe) -> str:
    """The resolved recipe as YAML text."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)
