"""Do the questions carry what the recipe needs from them: gold passages, and oracle steps when the teacher
reads them (``teacher.steps: oracle``)?

Without gold passages the run still works, but label-report's P/R/F1, the ``gold_support`` method and
Coverage@K/Purity@K are empty: a warning. With ``teacher.steps: oracle`` and no oracle steps every label falls
back (``no_oracle_steps``): a warning from ``purecover config`` and ``pipeline --dry-run`` (which read the first
`PROBE_QUESTIONS` questions of a local file), and an error when the label stage starts, before the teacher loads.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Recipe
from .errors import DataFormatError
from .paths import data_path_entries, show_data_path

__all__ = ["PROBE_QUESTIONS", "gold_problems", "oracle_steps_error", "probe_gold"]

PROBE_QUESTIONS = 200
GUIDE = "docs/guides/own-data.md"


def _reads_oracle_steps(recipe: Recipe) -> bool:
    from ..stages import not_needed

    return recipe.teacher.steps == "oracle" and not_needed(recipe, "label") is None


def gold_problems(recipe: Recipe, questions: int, with_gold: int, with_steps: int, scope: str = "") -> list[str]:
    """Warnings for `questions` questions of which `with_gold` have gold passages and `with_steps` oracle steps.
    `scope` says which questions were looked at (e.g. "of the first 200"); empty: all of them."""
    if questions == 0:
        return []
    where = f"{scope} " if scope else ""
    out = []
    if with_gold == 0:
        out.append(
            f"data.path {show_data_path(recipe.data.path)}: none of {where}{questions} questions has gold passages, so label-report's "
            "P/R/F1, the gold_support method and Coverage@K/Purity@K will be empty. Gold comes from supporting "
            "facts (HotpotQA/2Wiki supporting_facts, MuSiQue is_supporting, FlashRAG metadata.supporting_facts "
            f"mapped to the corpus passages of those titles): see {GUIDE}.")
    if _reads_oracle_steps(recipe) and with_steps < questions:
        missing = questions - with_steps
        if with_steps == 0:
            out.append(
                f"teacher.steps is oracle but none of {where}{questions} questions has oracle steps: every label "
                "would fall back (no_oracle_steps). Set teacher.steps: auto or model (the teacher writes its own "
                "reasoning, as configs/recipes/real_cpu/own_data.yaml does), see {GUIDE}.")
        else:
            out.append(f"teacher.steps is oracle but {missing} of {where}{questions} questions have no oracle steps: "
                       "their labels fall back (no_oracle_steps)")
    return out


def oracle_steps_error(recipe: Recipe, questions: int, with_steps: int, candidates: Path) -> str | None:
    """The label stage's refusal when ``teacher.steps: oracle`` meets candidates without any oracle steps."""
    if recipe.teacher.steps != "oracle" or questions == 0 or with_steps > 0:
        return None
    return (f"teacher.steps is oracle but none of the {questions} questions in {candidates} has oracle steps, so "
            "every label would fall back (no_oracle_steps). Set teacher.steps: auto or model (the teacher writes its "
            f"own reasoning), or give the questions oracle steps (supporting sentences, 2Wiki evidences, a "
            f"decomposition); see {GUIDE}.")


def probe_gold(recipe: Recipe, limit: int = PROBE_QUESTIONS) -> list[str]:
    """`gold_problems` over the first `limit` questions of a local data.path (of the union of a data.path list,
    in list order; the demo set and Hub datasets are not read here). Malformed records are left for the data stage
    to report with its own options."""
    from .loaders import ExampleSource
    from .loaders.hub import is_hub_name

    cfg = recipe.data
    files = [value for _, value in data_path_entries(cfg.path)]
    if not files or any(f == "demo" or not Path(f).expanduser().is_file() or is_hub_name(f) for f in files):
        return []
    external = cfg.corpus not in ("per_question", "shared")
    try:
        source = ExampleSource(cfg.dataset, [Path(f).expanduser() for f in files], split=cfg.split, limit=limit,
                               skip_invalid=True, require_paragraphs=not external)
    except (ValueError, OSError):
        return []
    questions = with_gold = with_steps = 0
    try:
        for example in source:
            questions += 1
            gold = example.supporting_titles if external else example.supporting_paragraphs
            with_gold += bool(gold)
            with_steps += bool(example.oracle_steps)
    except (DataFormatError, ValueError, OSError):
        return []
    scope = f"the first {questions}" if questions == limit else "the"
    return gold_problems(recipe, questions, with_gold, with_steps, scope)
