"""The import check shared by the package tests (tests/test_records_package.py, tests/test_config_package.py): which
sibling modules a module of one purecover sub-package imports."""

from __future__ import annotations

import ast
from pathlib import Path


def sibling_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, sibling module) of every import of `path` from within `package` (e.g. ``purecover.config``),
    relative or absolute; ``__init__`` for the package itself."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                out.extend((node.lineno, n.split(".")[0]) for n in names)
            elif node.level == 0 and (node.module == package or (node.module or "").startswith(package + ".")):
                out.append((node.lineno, node.module.removeprefix(package).lstrip(".") or "__init__"))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name.removeprefix(package).lstrip(".") or "__init__")
                       for a in node.names if a.name.startswith(package))
    return out
