"""`purecover.eval.methods`: the names eval.methods accepts and how its entries parse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from purecover.eval import methods
from purecover.eval.methods import METHODS, MethodSpec, parse_methods


def test_the_method_names_are_the_baselines_and_closed_book():
    from purecover.eval.baselines import BASELINE_NAMES

    assert tuple(METHODS) == (*BASELINE_NAMES, "none")
    assert set(methods.EMBEDDING_METHODS) <= set(METHODS) and set(methods.RUN_DIR_METHODS) <= set(METHODS)


def test_the_evaluate_stage_reads_the_same_definitions():
    from purecover.eval import evaluate_stage

    assert evaluate_stage.parse_methods is parse_methods and evaluate_stage.MethodSpec is MethodSpec
    assert evaluate_stage.EMBEDDING_METHODS is methods.EMBEDDING_METHODS


def test_specs_and_their_descriptions():
    specs = parse_methods(["retrieval", " none ", "teacher:runs/abl", "selections:runs/x/bm25.trec"])
    assert [(s.name, s.kind, s.source) for s in specs] == [
        ("retrieval", "retrieval", None), ("none", "none", None), ("teacher:runs/abl", "teacher", Path("runs/abl")),
        ("bm25", "selections", Path("runs/x/bm25.trec"))]
    assert specs[1].description.startswith("closed book")
    assert "runs/abl" in specs[2].description and "runs/x/bm25.trec" in specs[3].description
    assert specs[2].slug == "teacher_runs_abl"


@pytest.mark.parametrize(("entries", "message"), [
    (["retreival"], "eval.methods: unknown method 'retreival'; did you mean 'retrieval'?"),
    (["zzz"], "eval.methods: unknown method 'zzz'; expected one of retrieval, cross_encoder"),
    (["mmr:runs/x"], "only teacher:DIR and student:DIR take a run directory"),
    (["student", "student"], "eval.methods lists a method twice"),
    ([], "eval.methods is empty"),
])
def test_errors_name_eval_methods(entries, message):
    with pytest.raises(ValueError) as info:
        parse_methods(entries)
    assert str(info.value).startswith(message) or message in str(info.value)


def test_the_module_is_light():
    """The recipe check imports it: no numpy, torch or the baselines."""
    code = ("import sys, purecover.eval.methods; "
            "print(sorted(m for m in ('numpy', 'torch', 'purecover.eval.baselines') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
