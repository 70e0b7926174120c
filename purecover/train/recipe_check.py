"""The train stage's recipe check (`purecover.stages.Stage.check`), light enough for a dry run.

`check_training_arguments` checks ``student.training`` key by key against transformers' TrainingArguments fields
(`purecover.train.arguments.check_training_section`, from a snapshot: no torch) and the fixed output directory.
Outside a dry run it then builds the TrainingArguments once (their own cross-field checks, which import
transformers' trainer and torch): ``purecover pipeline`` does that before any stage runs, ``--dry-run`` leaves it
to the run, so that planning imports nothing it does not run.
"""

from __future__ import annotations

from ..config import ConfigError, Recipe
from ..rundir import FILES

__all__ = ["check_training_arguments"]


def check_training_arguments(recipe: Recipe, dry_run: bool = False) -> None:
    """ConfigError naming the key for a ``student.training`` the train stage cannot use (module docstring)."""
    from .arguments import check_training_section

    user = dict(recipe.student.training)
    check_training_section(user)
    if user.get("output_dir") not in (None, str(recipe.run_path / FILES["checkpoints"])):
        raise ConfigError("student.training.output_dir is fixed to run_dir/checkpoints; change run_dir instead")
    if not dry_run:
        from .train_stage import build_training_arguments

        build_training_arguments(recipe, has_eval=recipe.student.eval_fraction > 0, dry_run=True)
