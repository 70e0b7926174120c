"""What the evaluate stage reads (its registry ``inputs`` hook), without torch: the pipeline's plan and its dry
run read it for every stage."""

from __future__ import annotations

from pathlib import Path

from ..config import Recipe
from ..rundir import RunDir
from .methods import parse_methods

__all__ = ["evaluation_inputs"]


def evaluation_inputs(recipe: Recipe) -> dict[str, Path]:
    """What the evaluate stage reads, by name: the candidates, labels and selections of run_dir and of the test
    set (`RunDir.test_set`), and every other run's labels or selections and every selections file eval.methods
    names, and eval.prompt_file. A complete evaluation is redone when one of them changed."""
    rd = RunDir.of(recipe)
    places = [rd] + ([rd.test_set()] if recipe.eval.path else [])
    found: dict[str, Path] = {}
    for place in places:
        for key in ("candidates", "labels", "selections"):
            path = place.path_of(key)
            found[str(path.relative_to(rd.path))] = path
    for spec in parse_methods(recipe.eval.methods):
        if spec.source is None:
            continue
        if spec.kind == "selections":
            found[f"eval.methods[{spec.name}]"] = spec.source
        else:
            need = "labels.jsonl" if spec.kind == "teacher" else "selections.jsonl"
            found[f"eval.methods[{spec.name}]"] = spec.source / need
    if recipe.eval.prompt_file:  # an answer prompt edited in place redoes the evaluation
        found["eval.prompt_file"] = Path(recipe.eval.prompt_file)
    if recipe.data.qrels:  # a coverage collection's nuggets: what its subtopic metrics count
        found["data.qrels"] = Path(recipe.data.qrels)
    if recipe.eval.judgments:
        found["eval.judgments"] = Path(recipe.eval.judgments)
    return found
