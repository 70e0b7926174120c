"""The readouts registry (purecover.models.readouts): one module per readout, what each owns, the pair the recipe
names it by, and the rule that code outside the package asks a readout instead of branching on its name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from purecover.models import readouts
from purecover.models.readouts import (
    PASSAGE_SCORES,
    READOUT_VALUES,
    REGISTRY,
    Readout,
    get_readout,
    pair_problem,
    prompt_readout,
)

PACKAGE = Path(readouts.__file__).resolve().parents[2]
READOUTS_DIR = Path(readouts.__file__).resolve().parent
TEMPLATES = PACKAGE / "train" / "templates"


def test_each_readout_is_its_own_module_and_one_registry_entry():
    modules = sorted(p.stem for p in READOUTS_DIR.glob("*.py") if p.stem not in ("__init__", "base"))
    assert sorted(REGISTRY) == modules == ["identifier", "passage", "passage_head"]
    for name, r in REGISTRY.items():
        assert isinstance(r, Readout) and r.name == name
        assert getattr(importlib.import_module(f"purecover.models.readouts.{name}"), name.upper()) is r  # its module
        assert get_readout(r.readout, r.passage_score) is r
        assert (TEMPLATES / r.usage_template).is_file(), r.usage_template
    assert READOUT_VALUES == ("identifier", "passage") and PASSAGE_SCORES == ("token", "head")


def test_what_each_readout_owns():
    ident, passage, head = REGISTRY["identifier"], REGISTRY["passage"], REGISTRY["passage_head"]
    assert not ident.reads_at_markers and ident.vllm and not ident.has_head
    assert passage.reads_at_markers and not passage.vllm and not passage.has_head
    assert head.reads_at_markers and not head.vllm and head.has_head
    assert passage.layout == head.layout != ident.layout  # the head changes the score, not the prompt
    assert prompt_readout("passage") is passage and prompt_readout("identifier") is ident
    assert ident.load_head("/nonexistent") is None and passage.new_head(object(), 5) is None
    assert len({r.card_sentence for r in REGISTRY.values()}) == len(REGISTRY)


def test_pairs_no_readout_has_are_refused_with_the_reason():
    assert pair_problem("passage", "head") is None and pair_problem("identifier", "token") is None
    assert pair_problem("identifier", "head") == "head scores the passage readout's markers: needs readout: passage"
    assert "unknown selector readout 'letters'" in pair_problem("letters", "token")
    assert "unknown passage_score 'mlp'" in pair_problem("passage", "mlp")
    with pytest.raises(ValueError, match="readout identifier, passage_score head: head scores"):
        get_readout("identifier", "head")
    with pytest.raises(ValueError, match="unknown selector readout"):
        prompt_readout("letters")


class _Backend:
    """Records which of a selector backend's two score reads a readout calls (the readouts' own dispatch)."""

    def __init__(self, head: bool = False) -> None:
        self.calls: list[tuple] = []
        self.head_readout = object() if head else None

    def identifier_logits(self, prompts, idents):
        self.calls.append(("identifier", prompts, idents))
        return [[0.0] * len(i) for i in idents]

    def passage_logits(self, prompts, reads, token):
        self.calls.append(("passage", prompts, reads, token))
        return [[1.0] * len(r) for r in reads]


def test_each_readout_reads_its_scores_from_the_backend():
    prompts, idents, reads = [[1, 2, 3]], [[7, 8]], [[0, 2]]
    b = _Backend()
    assert REGISTRY["identifier"].scores(b, prompts, idents, reads, None) == [[0.0, 0.0]]
    assert b.calls == [("identifier", prompts, idents)]
    b = _Backend()
    assert REGISTRY["passage"].scores(b, prompts, idents, reads, 42) == [[1.0, 1.0]]
    assert b.calls == [("passage", prompts, reads, 42)]


def test_backends_that_cannot_read_a_readout_are_refused():
    class IdentifierOnly:
        def identifier_logits(self, prompts, idents):
            return []

    REGISTRY["identifier"].check_backend(IdentifierOnly())
    with pytest.raises(ValueError, match="passage readout .* IdentifierOnly cannot read"):
        REGISTRY["passage"].check_backend(IdentifierOnly())
    REGISTRY["passage"].check_backend(_Backend())
    with pytest.raises(ValueError, match="trained head .* _Backend does not load"):
        REGISTRY["passage_head"].check_backend(_Backend(head=False))
    REGISTRY["passage_head"].check_backend(_Backend(head=True))


def test_the_registry_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; import purecover.models.readouts as r; import purecover.config; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


# ------------------------------------------------------------------ no branching on a readout's name outside

_NAMES = set(READOUT_VALUES) | set(PASSAGE_SCORES) | set(REGISTRY)
_KEYS = ("readout", "passage_score")


def _names_in(node: ast.AST) -> set[str]:
    """The readout names among the string constants of `node` (a constant, or a tuple/list/set of them)."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)} & _NAMES


def branches_on_names(source: str) -> list[tuple[int, str]]:
    """(line, code) of each comparison of a readout or passage_score value with a readout name, and each
    ``Literal[...]`` listing readout names, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            text = " ".join(ast.unparse(s) for s in sides)
            if any(k in text for k in _KEYS) and any(_names_in(s) for s in sides):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Literal", "typing.Literal") \
                and len(_names_in(node.slice) & set(READOUT_VALUES + PASSAGE_SCORES)) >= 2:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_outside_the_package_branches_on_a_readouts_name():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if READOUTS_DIR in path.parents:
            continue
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
                      for line, code in branches_on_names(path.read_text(encoding="utf-8"))]
    assert not offenders, "ask the readout (purecover.models.readouts) instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize("code", [
    'if cfg.readout == "passage":\n    pass',
    'x = "head" if config.passage_score == "head" else None',
    'ok = args.readout in ("identifier", "passage")',
    'readout: Literal["identifier", "passage"] = "identifier"',
])
def test_the_branching_check_catches_each_form(code):
    assert branches_on_names(code), code
