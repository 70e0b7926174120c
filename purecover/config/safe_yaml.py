"""Safe YAML reading of recipe text and its limits: YAML 1.2 scalars, duplicate keys refused (file, dotted
key, both lines), at most `MAX_RECIPE_BYTES` of UTF-8 and `MAX_RECIPE_VALUES` values once aliases are
expanded; every problem a one-line `ConfigError` naming its source."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .base import ConfigError


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: `1e-5` is a float, and only true/false are booleans
    (YAML 1.1 would turn `eval_strategy: no` into False)."""


_RecipeLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _check_duplicate_keys(node: yaml.Node | None, source: str, lines: bool = True) -> None:
    """Raise ConfigError for a key given twice in one mapping, at any depth.

    PyYAML keeps the last value silently; here the message names the file, the dotted key and the
    line of each occurrence. Merge keys (``<<: *base``) may still be overridden by an explicit key.
    """
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(node, "")] if node is not None else []
    while stack:
        current, path = stack.pop()
        if id(current) in seen_nodes:  # an alias of a node already checked
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, value_node in current.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    stack.append((value_node, path))
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                dotted = f"{path}.{key}" if path else str(key)
                line = key_node.start_mark.line + 1
                if key is not None:
                    if key in first_line:
                        where = f" at line {first_line[key]} and line {line}" if lines else " given twice"
                        raise ConfigError(f"{source}: duplicate key {dotted!r}{where}; YAML would silently keep "
                                          "only the second value: remove one of them")
                    first_line[key] = line
                stack.append((value_node, dotted))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(current.value))


# A recipe is a few hundred values; aliases that repeat aliases (a "billion laughs" document) would make the
# loaded recipe exponentially large for everything that walks it: refused by counting values, aliases expanded.
MAX_RECIPE_VALUES = 100_000
MAX_RECIPE_BYTES = 1_000_000


def _check_expanded_size(node: yaml.Node | None, source: str) -> None:
    """ConfigError when the document, with every alias expanded, holds more than `MAX_RECIPE_VALUES` values
    (computed on the node graph, each node once, so the check itself stays linear)."""
    if node is None:
        return
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, ready = stack.pop()
        if id(current) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(current, yaml.MappingNode):
            children = [n for pair in current.value for n in pair]
        elif isinstance(current, yaml.SequenceNode):
            children = list(current.value)
        if not ready:
            stack.append((current, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(current)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_RECIPE_VALUES + 1)
    if sizes[id(node)] > MAX_RECIPE_VALUES:
        raise ConfigError(f"{source}: the YAML expands to more than {MAX_RECIPE_VALUES:,} values (anchors and "
                          "aliases that repeat each other); a recipe holds a few hundred: write the values out")


def _yaml_load(text: str, source: str, lines: bool = True) -> Any:
    loader = None
    try:
        loader = _RecipeLoader(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        _check_duplicate_keys(node, source, lines)
        _check_expanded_size(node, source)
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _read_yaml_text(path: Path, shown: str, kind: str) -> str:
    """The text of recipe file `path` (UTF-8, at most `MAX_RECIPE_BYTES`); a ConfigError naming it otherwise."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read {kind} ({exc.strerror or exc})") from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{shown}: {kind} is larger than {MAX_RECIPE_BYTES:,} bytes; is it really a recipe?")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: {kind} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None

