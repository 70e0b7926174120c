"""The import rules (docs/development/architecture.md#the-import-rules), checked on the source: a violation fails with the file, line and import.

`data` is the ground floor; `models` (what a deployed selector needs) imports only `data`; `teacher`,
`train` and `select` import `models` and `data` but not each other; `eval` may also use the teacher's
solvers and LANCER aggregations (its baselines) and its attention capture with its layer kinds (the ICR
baseline); `demo` is
scaffolding that no stage imports; only the command line (`cli`, and the `pipeline` it drives) may import every
stage, and nothing imports `cli`. `entry` (the stages' `python -m` command lines) is command-line level too: it
may import anything, and only command-line code imports it, which is `cli`, every `__main__` module and the code
under a module's `if __name__ == "__main__":` (run as a script, never when imported).
The shared infrastructure (`config`, `records`, `stages`, `rundir`, `contract`, `utils`, `metrics`) imports no stage except
`models` (the identifier scheme); `stages` names its runners as strings. Within it the run machinery is layered
one way: the registry (`stages`: declarations) <- the run directory (`rundir`: files, manifests, locks) <- the
contract (`contract`: `execute_stage`) <- the pipeline and the command line. `validate` is command-line level:
it may import any stage, and no stage imports it. No module of the package imports, even lazily inside a
function, a module that imports it back (directly or through others).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "purecover"
INFRA = {"config", "rundir", "records", "stages", "contract", "utils", "prompts", "metrics", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "data": {"data"} | INFRA,
    "models": {"models", "data"} | INFRA,
    "teacher": {"teacher", "models", "data"} | INFRA,
    "train": {"train", "models", "data"} | INFRA,
    "select": {"select", "models", "data"} | INFRA,
    "eval": {"eval", "models", "data", "teacher.solvers", "teacher.lancer_rank", "teacher.capture",
             "teacher.layers"} | INFRA,
    "demo": {"demo", "models", "data", "teacher", "eval"} | INFRA,
    "pipeline": {"data", "models", "teacher", "train", "select", "eval"} | INFRA,
    "serve": {"serve", "models", "data"} | INFRA,  # `purecover serve` and its remote client: a deployed selector
    "integrations": {"integrations", "models", "serve.client"} | INFRA,  # LangChain/LlamaIndex/Haystack adapters
    "publish": set(INFRA),  # `purecover publish`: reads run-directory files, imports no stage
    **{name: {"models"} | INFRA for name in INFRA},
    # below the run machinery: files, provenance, locks (the stages' command lines are `entry`)
    "utils": (INFRA - {"stages", "rundir", "contract"}) | {"models"},
}
# `cli`, `entry`, every `__main__` and `validate` (the recipe check the command line runs first) may import anything.
COMMAND_LINE = {"cli", "entry"}

# The run machinery's layers, bottom first: a module may import only those below it.
LAYERS = ("stages", "rundir", "contract")


def _unit(parts: list[str]) -> str:
    """The rule unit of module path `parts` (below purecover): its sub-package or top-level module."""
    return parts[0]


def _is_module(parts: list[str]) -> bool:
    """Whether `parts` (below the package) name a module or sub-package of it."""
    return PACKAGE.joinpath(*parts).with_suffix(".py").is_file() or PACKAGE.joinpath(*parts, "__init__.py").is_file()


def _is_main_guard(node: ast.AST) -> bool:
    """Whether `node` is ``if __name__ == "__main__":`` (its body runs only when the module is run as a script)."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and len(node.test.comparators) == 1 and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value == "__main__")


def _nodes(tree: ast.AST, script: bool) -> list[ast.AST]:
    """The nodes of `tree` outside any `if __name__ == "__main__":` block (`script` False), or inside one (True)."""
    out, stack = [], [(tree, False)]
    while stack:
        node, inside = stack.pop()
        if inside == script:
            out.append(node)
        for child in ast.iter_child_nodes(node):
            stack.append((child, inside or _is_main_guard(node)))
    return out


def _imports(path: Path, script: bool = False) -> list[tuple[int, str]]:
    """(line, imported purecover module path below the package, e.g. 'teacher.solvers') of `path`; with `script`,
    those under its `if __name__ == "__main__":` block instead (command-line code)."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    package = list(rel.parts[:-1])
    out = []
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8")), script):
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
            else:  # `from x import y` names module x.y when y is one (`from . import y` always does)
                out.extend((node.lineno, ".".join([*target, n]) if node.module is None or _is_module([*target, n])
                            else ".".join(target)) for n in names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "purecover" and alias.name != "purecover":
                    out.append((node.lineno, ".".join(alias.name.split(".")[1:])))
    return sorted(out)


def _allowed(unit: str, target: str) -> bool:
    rules = ALLOWED.get(unit)
    if rules is None:  # the command line: everything
        return True
    if target.split(".")[0] in COMMAND_LINE:  # only command-line code imports the command line
        return False
    return any(target == r or target.startswith(r + ".") for r in rules) or target.split(".")[0] == unit


def _violations() -> list[str]:
    found = []
    found += _layer_violations()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        unit = _unit(list(rel.parts))
        if rel.parts[-1] == "__main__":  # `python -m purecover[.x]` is the command line
            continue
        for line, target in _imports(path):
            if target.split(".")[0] == "cli" and unit != "cli":
                found.append(f"purecover/{rel}.py:{line}: imports cli (nothing imports it)")
            elif not _allowed(unit, target):
                found.append(f"purecover/{rel}.py:{line}: {unit} imports purecover.{target}")
    return found


def _layer_violations() -> list[str]:
    """Imports that go up the run machinery's `LAYERS` (the registry importing the run directory, ...)."""
    found = []
    for name in LAYERS:
        path = PACKAGE / f"{name}.py"
        if not path.is_file():
            continue
        above = LAYERS[LAYERS.index(name) + 1:]
        for line, target in _imports(path):
            if target.split(".")[0] in above:
                found.append(f"purecover/{name}.py:{line}: {name} imports purecover.{target}, a layer above it")
    return found


def _module_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported purecover module: first line}, for every import of the package (function-level ones too).

    Module names are dotted below the package (``teacher.calibration``; a package is its ``__init__``'s name,
    ``records``; the package itself ``__init__``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"] = path
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for line, target in _imports(path):
            while target not in modules and "." in target:  # `from x.y import name`: module x.y
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles of `graph`: each strongly connected component of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_imports_a_module_that_imports_it_back():
    """No import cycle among the package's modules, lazy (function-level) imports included."""
    graph = _module_graph()
    cycles = _cycles(graph)
    shown = ["; ".join(f"{a} imports {b} (line {graph[a][b]})" for a in c for b in c if b in graph[a]) for c in cycles]
    assert shown == []


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path, monkeypatch):
    fake = tmp_path / "purecover"
    fake.mkdir()
    (fake / "rundir.py").write_text("def f():\n    from .stages import get_stage\n")
    (fake / "stages.py").write_text("from .rundir import FILES\n")
    (fake / "contract.py").write_text("from . import rundir, stages\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _cycles(_module_graph()) == [["rundir", "stages"]]
    assert _layer_violations() == ["purecover/stages.py:1: stages imports purecover.rundir, a layer above it"]


def test_the_package_follows_the_import_rules():
    assert _violations() == []


def test_the_checker_catches_a_violation(tmp_path, monkeypatch):
    """The rule test itself fails on a violating module (so a passing run means something)."""
    fake = tmp_path / "purecover"
    (fake / "models").mkdir(parents=True)
    (fake / "models" / "bad.py").write_text("from ..teacher import prompts\nfrom ..data import corpus\n")
    (fake / "data").mkdir()
    (fake / "data" / "worse.py").write_text("import purecover.eval.evaluate_stage\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _violations() == ["purecover/data/worse.py:1: data imports purecover.eval.evaluate_stage",
                             "purecover/models/bad.py:1: models imports purecover.teacher"]


def test_only_command_line_code_imports_the_command_line(tmp_path, monkeypatch):
    """`entry` may be imported by a `__main__` module and under `if __name__ == "__main__":`, not by a module's
    code that runs on import; utils imports neither the run machinery nor validate."""
    fake = tmp_path / "purecover"
    for sub in ("data", "select", "utils"):
        (fake / sub).mkdir(parents=True)
    (fake / "select" / "__main__.py").write_text("from ..entry import stage_main\nfrom ..validate import x\n")
    (fake / "data" / "ok.py").write_text("import sys\nif __name__ == '__main__':\n    from ..entry import encode_main\n")
    (fake / "data" / "bad.py").write_text("def main():\n    from ..entry import encode_main\n")
    (fake / "utils" / "up.py").write_text("from ..contract import run_stage\nfrom ..validate import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _violations() == ["purecover/data/bad.py:2: data imports purecover.entry",
                             "purecover/utils/up.py:1: utils imports purecover.contract",
                             "purecover/utils/up.py:2: utils imports purecover.validate"]


@pytest.mark.parametrize("unit", ["data", "models", "teacher", "train", "select", "eval"])
def test_no_stage_imports_the_demo_scaffolding(unit):
    assert "demo" not in ALLOWED[unit]


def test_the_architecture_page_draws_the_package_as_it_is():
    """docs/development/architecture.md: its package tree names every top-level module and sub-package, and its
    layers list the run machinery's rooms in the order `LAYERS` enforces."""
    page = (PACKAGE.parent / "docs" / "development" / "architecture.md").read_text(encoding="utf-8")
    tree = page.split("```text", 1)[1].split("```", 1)[0]
    drawn = {line.split()[0] for line in tree.splitlines() if line.startswith("  ") and line.split()}
    on_disk = {p.name + "/" if p.is_dir() else p.name for p in PACKAGE.iterdir()
               if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.stem != "__init__")}
    drawn |= {name.strip(",") for line in tree.splitlines() for name in line.split() if name.endswith((".py", ".py,"))}
    assert sorted(on_disk - drawn - {"__main__.py"}) == []
    layers = page.split("## Layers", 1)[1].split("### The import rules", 1)[0]
    rooms = [layers.index(f"`{name}`, the **") for name in LAYERS]
    assert rooms == sorted(rooms)
