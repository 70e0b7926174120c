"""The whole recipe is checked before any stage runs: what loading alone cannot check.

`load_recipe` checks every key, type and range of the recipe's own sections. `validate_recipe`
adds the checks that need another library's contract or span sections, whatever stage will run:

* ``eval.methods``: every entry is a method the evaluate stage knows, or a well-formed
  ``teacher:DIR`` / ``student:DIR`` / ``selections:PATH=name`` (`purecover.eval.methods`);
* ``student.training``: every key is a `transformers.TrainingArguments` field, every value
  matches the field's annotation (and its declared choices), every number is finite and in range
  (a positive learning rate, ...; `purecover.train.arguments.RANGES`), all without importing torch
  (a snapshot of the fields); and, except for ``purecover config``, TrainingArguments' own
  ``__post_init__`` accepts the whole set (built once, on the CPU, in a temporary directory,
  without touching accelerate's process state);
* ``data.k1`` fits the identifier scheme ``student.identifiers`` when the pipeline trains the student;
* ``eval.table_budget`` is one of ``eval.budgets``;
* a ``data.path`` list names local files only: no ``demo``, Hub dataset id or folder (`check_data_paths`); that
  each file exists is the data stage's check (`purecover.data.paths.check_data_files`: ``purecover pipeline``
  runs it before any stage when the data stage has work, and the data stage itself before it reads a file), so a
  run directory whose data stage is complete still trains and evaluates where the files are absent;
* every prompt file the recipe names holds the placeholders its prompt takes (`purecover.prompts`).

Every failure is a `ConfigError` naming the dotted key, the bad value and what is expected.
transformers is imported lazily (importing it takes a few seconds).
"""

from __future__ import annotations

from pathlib import Path

from .config import ConfigError, EvalConfig, Recipe, load_recipe
from .models.identifiers import SCHEMES, IdentifierScheme

__all__ = ["check_coverage_files", "check_data_paths", "check_eval_methods",
           "check_identifier_capacity", "check_prompt_files", "check_table_budget",
           "load_validated_recipe", "validate_recipe"]

def validate_recipe(recipe: Recipe, build_training: bool = True) -> None:
    """Check the whole recipe beyond its own types and ranges; raise ConfigError naming the key.

    `build_training`: also build the train stage's TrainingArguments once (its cross-field checks; imports
    transformers' trainer and torch, seconds). ``purecover config`` passes False: every ``student.training`` key,
    type and range is still checked, from a snapshot of the fields, and the stage commands build it before any
    work."""
    check_eval_methods(recipe.eval)
    check_table_budget(recipe.eval)
    check_data_paths(recipe)
    check_prompt_files(recipe)
    check_coverage_files(recipe)
    if _trains_student(recipe):
        check_identifier_capacity(recipe.data.k1, recipe.student.identifiers)
    _check_training(recipe, build_training)


def load_validated_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                          build_training: bool = True) -> Recipe:
    """`load_recipe` then `validate_recipe`; errors name the recipe source like `load_recipe`'s do."""
    recipe = load_recipe(path, overrides)
    try:
        validate_recipe(recipe, build_training)
    except ConfigError as exc:
        source = (str(path) if path is not None else "defaults") + (" + overrides" if overrides else "")
        raise ConfigError(f"{source}: {exc}") from None
    return recipe


# --------------------------------------------------------------------------- cross-section checks


def _trains_student(recipe: Recipe) -> bool:
    """Whether the pipeline trains this recipe's student (the planner's rule: `eval.methods` has `student`)."""
    from .stages import not_needed

    return not_needed(recipe, "train") is None


def check_identifier_capacity(k1: int, scheme: str) -> None:
    """``data.k1`` candidates must each get a single-token identifier of ``student.identifiers``."""
    capacity = IdentifierScheme(scheme).capacity
    if k1 <= capacity:
        return
    larger = [name for name in SCHEMES if IdentifierScheme(name).capacity >= k1]
    if larger:
        fix = (f"set student.identifiers: {larger[0]} ({IdentifierScheme(larger[0]).capacity} identifiers) "
               "or lower data.k1")
    else:
        widest = max(SCHEMES, key=lambda n: IdentifierScheme(n).capacity)
        most = IdentifierScheme(widest).capacity
        fix = (f"lower data.k1 to at most {capacity}" + (
            f", or to at most {most} with student.identifiers: {widest}" if widest != scheme else ""))
    raise ConfigError(f"data.k1: {k1} candidates but student.identifiers: {scheme} labels at most "
                      f"{capacity}; {fix}")


def check_prompt_files(recipe: Recipe) -> None:
    """Every prompt file the recipe names (``teacher.prompt_file``, ``teacher.lancer.rating_template`` /
    ``subquestion_template`` when LANCER is on, ``eval.prompt_file``, ``student.prompt_file``) exists, is UTF-8
    and holds the placeholders (and parts) its prompt takes (`purecover.prompts`)."""
    from .prompts import TemplateError, check_recipe_prompts

    try:
        check_recipe_prompts(recipe)
    except TemplateError as exc:
        raise ConfigError(str(exc)) from None


def check_eval_methods(cfg: EvalConfig) -> None:
    """``eval.methods`` parses: known method names (a misspelt one names the closest), no entry twice."""
    from .eval.methods import parse_methods  # light: no torch

    try:
        parse_methods(cfg.methods)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_coverage_files(recipe: Recipe) -> None:
    """A coverage collection's qrels (``data.qrels``) and judge file (``eval.judgments``) read, before any stage: a
    malformed line names the file, the line and the field. A file that does not exist yet is left to the stages
    (the demo's collection is written by ``python -m purecover.demo``; the dry run lists what is missing).
    ``eval.judgments`` needs ``data.dataset: coverage``."""
    from .eval.coverage_collections import read_judgments, read_nugget_qrels  # light: no torch

    if recipe.eval.judgments is not None and recipe.data.dataset != "coverage":
        raise ConfigError("eval.judgments: is for coverage collections (data.dataset: coverage), "
                          f"not {recipe.data.dataset}")
    for key, path, read in (("data.qrels", recipe.data.qrels, read_nugget_qrels),
                            ("eval.judgments", recipe.eval.judgments, read_judgments)):
        if path is None or not Path(path).is_file():
            continue
        try:
            read(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{key}: {exc}") from None


def check_data_paths(recipe: Recipe) -> None:
    """Each entry of a ``data.path`` list is a local file: not ``demo``, a Hub dataset id or a folder (those are
    read alone); a ConfigError names the entry (``data.path[1]``) and the path. That each file exists is
    `purecover.data.paths.check_data_files` (the data stage's check). One path (not a list) is left to the data
    stage, as it may be a Hub dataset id."""
    from .data.paths import check_path_list

    check_path_list(recipe.data.path, must_exist=False)


def check_table_budget(cfg: EvalConfig) -> None:
    """report.md's main table is read at ``eval.table_budget``, so the evaluation must run that budget."""
    if cfg.table_budget not in cfg.budgets:
        raise ConfigError(f"eval.table_budget: {cfg.table_budget} is not one of eval.budgets {cfg.budgets}; "
                          "the report's main table needs it (add it to eval.budgets or pick one of those)")


# --------------------------------------------------------------------------- student.training


def _check_training(recipe: Recipe, build: bool = True) -> None:
    """Keys, values and ranges of ``student.training`` (no torch), then, when `build`, a dry construction of the
    train stage's TrainingArguments."""
    from .train.arguments import check_training_section

    check_training_section(dict(recipe.student.training))
    if build:
        from .train.train_stage import build_training_arguments

        build_training_arguments(recipe, has_eval=recipe.student.eval_fraction > 0, dry_run=True)
