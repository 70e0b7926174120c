"""Which questions the evaluate stage scores, and at which budgets.

With ``eval.path`` the test set's questions (built by the data stage into the test set's run directory,
`purecover.rundir.RunDir.test_set`); otherwise the student's held-out split of run_dir/candidates.jsonl
(``eval.questions: heldout``) or every question (``all``); then ``eval.limit`` and the seeded
``eval.sample``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..config import Recipe
from ..data.data_stage import read_candidate_records
from ..records import CandidateRecord, QuestionSample
from ..rundir import RunDir

__all__ = ["check_budgets", "evaluation_questions"]


def check_budgets(budgets: Sequence[int]) -> list[int]:
    if not budgets:
        raise ValueError("eval.budgets is empty")
    for k in budgets:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"eval.budgets: {k!r} is not an integer ≥ 1")
    return sorted(set(budgets))


# --------------------------------------------------------------------------- inputs


def evaluation_questions(recipe: Recipe, test_dir: Path,
                         show_progress: bool) -> tuple[list[CandidateRecord], str, QuestionSample | None]:
    """The evaluation questions (their candidates), a description of where they came from, and the
    record of the seeded sample (None without ``eval.sample``).

    Order: the held-out filter (without ``eval.path``), then ``eval.limit`` (the first N), then
    ``eval.sample`` (`purecover.data.splits.sample_questions`). With ``eval.path`` the data stage
    already drew the sample before retrieval (`purecover.data.data_stage.evaluation_recipe`); drawing it again here is a no-op
    (samples are nested) that guards against a candidates file of another sample.
    """
    from ..data.splits import sample_questions

    cfg = recipe.eval
    if cfg.path:
        from ..data.data_stage import evaluation_recipe, run_data_stage

        run_data_stage(evaluation_recipe(recipe), show_progress=show_progress)
        rd = RunDir(test_dir)
        path = rd.path_of("candidates")
        records = read_candidate_records(path)
        source = f"{cfg.path} (split {cfg.split}) → {path}"
        data_manifest = rd.manifest("data")
        population = (getattr(data_manifest.summary, "sampled_from", None) if data_manifest else None) or len(records)
        population_source = f"{cfg.path} (split {cfg.split}" + (f", first {cfg.limit}" if cfg.limit else "") + ")"
    else:
        path = RunDir.of(recipe).path_of("candidates")
        records = read_candidate_records(path)
        source = f"{path} (all questions)"
        if cfg.questions == "heldout":
            from ..data.splits import question_split  # the student's own split rule

            frac, share = recipe.student.eval_fraction, recipe.student.calibration_share
            records = [r for r in records if question_split(r.qid, frac, share, recipe.seed) == "test"]
            source = (f"{path} (the student's test split: held out from training and from τ3, "
                      f"student.eval_fraction={frac}, student.calibration_share={share})")
            if not records:
                raise ValueError(f"no question of {path} falls in the student's test split (student.eval_fraction="
                                 f"{frac}, student.calibration_share={share}); set eval.questions=all, raise "
                                 "student.eval_fraction, lower student.calibration_share, or set eval.path to a "
                                 "test set")
        if cfg.limit is not None:
            records = records[: cfg.limit]
            source += f", first {cfg.limit}"
        population, population_source = len(records), source
    if cfg.sample is None:
        return records, source, None
    if cfg.sample > population:
        raise ValueError(f"eval.sample: cannot sample {cfg.sample} questions from the {population} of "
                         f"{population_source}; lower eval.sample or set it to null (every question)")
    records = sample_questions(records, cfg.sample, cfg.seed, key="eval.sample", qid=lambda r: r.qid)
    sample = QuestionSample(size=len(records), seed=cfg.seed, population=population,
                            population_source=population_source)
    return records, f"a random sample of {len(records)} (eval.seed {cfg.seed}) of {population} questions: {source}", sample
