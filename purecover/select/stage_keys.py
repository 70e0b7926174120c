"""What the select stage's hash and inputs are made of (its registry hooks), without loading a selector.

`purecover pipeline --dry-run` plans every stage from these; they read the exported selector's config and the
names and sizes of its weight files, never the weights, and import no torch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config import Recipe
from ..rundir import FILES, RunDir, test_set_directory

__all__ = ["heldout_split", "selection_inputs", "selector_fingerprint"]

SELECTOR_CONFIG = Path(FILES["selector_config"]).name  # selector_config.json (`purecover.models.selector`)


def selector_fingerprint(recipe: Recipe) -> str:
    """What the select stage's hash adds to the data section: the exported selector's fingerprint
    (run_dir/selector; "none" before export) and the questions it selects for: the test set (eval.path,
    hub_config, split, limit, sample, seed), or without one ``all-questions`` for eval.questions all (heldout, the
    default, selects the student's test split: `heldout_split`)."""
    sel_dir = RunDir.of(recipe).path_of("selector")
    fp = _selector_fingerprint(sel_dir) if (sel_dir / SELECTOR_CONFIG).is_file() else "none"
    e = recipe.eval
    if e.path:
        return f"{fp}:{e.path}:{e.hub_config}:{e.split}:{e.limit}:{e.sample}:{e.seed}"
    # heldout (the default) keeps the hash runs recorded when every question was selected: such a file is a superset
    # of the test split, and the split's keys (student section, seed) already move the selector's fingerprint
    return fp if heldout_split(recipe) is not None else f"{fp}:all-questions"


def heldout_split(recipe: Recipe) -> tuple[float, float, int] | None:
    """(student.eval_fraction, student.calibration_share, seed) when the select stage selects only the student's
    test split (eval.questions heldout, no eval.path: the only questions evaluation scores), else None (every
    question of the candidates file)."""
    if recipe.eval.path or recipe.eval.questions != "heldout":
        return None
    return recipe.student.eval_fraction, recipe.student.calibration_share, recipe.seed


def _selector_fingerprint(selector_dir: Path) -> str:
    """What identifies the selector: its config and the names and sizes of its weight files."""
    h = hashlib.sha256((selector_dir / SELECTOR_CONFIG).read_bytes())
    for p in sorted(selector_dir.glob("*.safetensors")):
        h.update(f"{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def selection_inputs(recipe: Recipe) -> dict[str, Path]:
    """The select stage's inputs: the evaluation questions' candidates (the selector is in its config hash, by
    its config and weights: a refreshed model card is not a new selector)."""
    return {"candidates.jsonl": RunDir(test_set_directory(recipe)).path_of("candidates")}
