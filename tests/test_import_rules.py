"""The import rules (docs/development/architecture.md#the-import-rules), checked on the source: a violation fails with the file, line and import.

`data` is the ground floor; `models` (what a deployed selector needs) imports only `data`; `teacher`,
`train` and `select` import `models` and `data` but not each other; `eval` may also use the teacher's
solvers and LANCER aggregations (its baselines); `demo` is scaffolding that no stage imports; only the
command line (`cli`, and the `pipeline` it drives) may import every stage, and nothing imports `cli`.
The shared infrastructure (`config`, `rundir`, `records`, `stages`, `utils`) imports no stage except `models`
(the identifier scheme); `stages` names its runners as strings. `validate` is command-line level:
it may import any stage, and no stage imports it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "purecover"
INFRA = {"config", "rundir", "records", "stages", "utils", "prompts", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "data": {"data"} | INFRA,
    "models": {"models", "data"} | INFRA,
    "teacher": {"teacher", "models", "data"} | INFRA,
    "train": {"train", "models", "data"} | INFRA,
    "select": {"select", "models", "data"} | INFRA,
    "eval": {"eval", "models", "data", "teacher.solvers", "teacher.lancer_rank"} | INFRA,
    "demo": {"demo", "models", "data", "teacher", "eval"} | INFRA,
    "pipeline": {"data", "models", "teacher", "train", "select", "eval"} | INFRA,
    "serve": {"serve", "models", "data"} | INFRA,  # `purecover serve` and its remote client: a deployed selector
    "integrations": {"integrations", "models", "serve.client"} | INFRA,  # LangChain/LlamaIndex/Haystack adapters
    "publish": set(INFRA),  # `purecover publish`: reads run-directory files, imports no stage
    **{name: {"models"} | INFRA for name in INFRA},
    "utils": {"models", "validate"} | INFRA,  # utils.entry is the `python -m` command line
}
# `cli`, `__main__` and `validate` (the recipe check the command line runs first) may import anything.


def _unit(parts: list[str]) -> str:
    """The rule unit of module path `parts` (below purecover): its sub-package or top-level module."""
    return parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported purecover module path below the package, e.g. 'teacher.solvers') of `path`."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    package = list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "purecover":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            if not target:  # from the package root: `from .. import __version__`
                out.append((node.lineno, "__init__"))
            elif node.module is None:
                out.extend((node.lineno, ".".join([*target, n])) for n in names)  # from . import x
            else:
                out.append((node.lineno, ".".join(target)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "purecover" and alias.name != "purecover":
                    out.append((node.lineno, ".".join(alias.name.split(".")[1:])))
    return out


def _allowed(unit: str, target: str) -> bool:
    rules = ALLOWED.get(unit)
    if rules is None:  # cli: everything
        return True
    return any(target == r or target.startswith(r + ".") for r in rules) or target.split(".")[0] == unit


def _violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        unit = _unit(list(rel.parts))
        if rel.parts == ("__main__",):  # `python -m purecover` is the command line
            continue
        for line, target in _imports(path):
            if target.split(".")[0] == "cli" and unit != "cli" and rel.parts != ("__main__",):
                found.append(f"purecover/{rel}.py:{line}: imports cli (nothing imports it)")
            elif not _allowed(unit, target):
                found.append(f"purecover/{rel}.py:{line}: {unit} imports purecover.{target}")
    return found


def test_the_package_follows_the_import_rules():
    assert _violations() == []


def test_the_checker_catches_a_violation(tmp_path, monkeypatch):
    """The rule test itself fails on a violating module (so a passing run means something)."""
    fake = tmp_path / "purecover"
    (fake / "models").mkdir(parents=True)
    (fake / "models" / "bad.py").write_text("from ..teacher import prompts\nfrom ..data import corpus\n")
    (fake / "data").mkdir()
    (fake / "data" / "worse.py").write_text("import purecover.eval.job\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _violations() == ["purecover/data/worse.py:1: data imports purecover.eval.job",
                             "purecover/models/bad.py:1: models imports purecover.teacher"]


@pytest.mark.parametrize("unit", ["data", "models", "teacher", "train", "select", "eval"])
def test_no_stage_imports_the_demo_scaffolding(unit):
    assert "demo" not in ALLOWED[unit]
