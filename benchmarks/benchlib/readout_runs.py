"""The student runs on every real sample question that the readout experiments share (`student_readout.py`,
`answers.py`): the questions of each dataset as one ``data.path`` list (`FILES`), their oracle-proxy labels made once
per dataset (`LABELS`, `labelled`) and copied into each student run (`copy_labels`), a run's recipe (`load`), the
real command line's stages as subprocesses (`run_command`), and the train stage's own split (`split_of`), checked
against its summary (`check_disjoint`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .harness import log
from .real_runs import AS_MEASURED, read_jsonl, split_for_seed

ROOT = Path(__file__).resolve().parents[2]
# every real sample question of the dataset, as one data.path list
FILES = {"hotpotqa": ("hotpotqa_dev_sample.json", "hotpotqa_dev_extra.json", "hotpotqa_train_sample.json"),
         "2wiki": ("2wiki_dev_sample.json", "2wiki_train_sample.json"),
         "musique": ("musique_dev_sample.jsonl", "musique_train_sample.jsonl")}
LABELS = ["teacher.steps=oracle", "teacher.estimator=embedding"]  # the oracle proxy


def samples() -> Path:
    from purecover.data.samples import sample_data_dir

    found = sample_data_dir()
    if found is None:
        raise SystemExit("real sample data not found: set PURECOVER_SAMPLE_DATA or put ../shared/data beside the repo")
    return found


def overrides(dataset: str, run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """The ``--set`` list of a run: the dataset's files as one list, the run directory, then `extra`."""
    paths = ", ".join(str(samples() / f) for f in FILES[dataset])
    return [f"run_dir={run_dir}", f"data.path=[{paths}]", "data.sample=null", *LABELS, *AS_MEASURED, *extra]


def recipe_path(dataset: str) -> Path:
    return ROOT / "configs" / "recipes" / "real_cpu" / f"{dataset}.yaml"


def load(dataset: str, run_dir: Path, extra: Sequence[str] = ()) -> Any:
    from purecover.config import load_recipe

    return load_recipe(recipe_path(dataset), overrides(dataset, run_dir, extra))


def run_command(stage: str, dataset: str, run_dir: Path, extra: Sequence[str]) -> dict[str, Any]:
    """``purecover STAGE RECIPE --set ...`` in a subprocess (the real command line); its seconds and peak RSS.

    A stage that was already complete (its run record older than this call) skips itself: then
    ``seconds`` is the span its record holds (`reused_span`), from the run that made it, with ``reused: true``,
    and the peak RSS is this call's (the skip's)."""
    command = [sys.executable, "-m", "purecover", stage, str(recipe_path(dataset)), "-q"]
    for item in overrides(dataset, run_dir, extra):
        command += ["--set", item]
    from purecover.utils.threads import env_choosing_own_threads

    called = time.time()
    t0 = time.perf_counter()
    # each stage chooses its threads for the load at its own start (not the label stage's choice, made in this process)
    proc = subprocess.Popen(command, env={**env_choosing_own_threads(), "HF_HUB_OFFLINE": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    if (span := reused_span(run_dir / f"{stage}.run.json", called)) is not None:
        out |= {"seconds": span, "reused": True}
    return out


def reused_span(record: Path, called: float) -> float | None:
    """Seconds from ``started`` to ``finished`` of the stage run record `record` when it started before `called`
    (a Unix time: the stage was complete and skipped itself), else None."""
    if not record.is_file():
        return None
    rec = json.loads(record.read_text())
    try:
        started, finished = (datetime.fromisoformat(rec[k]).timestamp() for k in ("started", "finished"))
    except (KeyError, TypeError, ValueError):
        return None
    return round(finished - started, 1) if started < called - 1.0 else None


def labelled(dataset: str, work: Path) -> Path:
    """Data + oracle-proxy labels of every question, once per dataset (the stages skip themselves when done)."""
    from purecover.data.data_stage import run_data_stage
    from purecover.teacher.label_stage import run_label_stage

    run = work / dataset / "labels"
    recipe = load(dataset, run)
    run_data_stage(recipe, show_progress=False)
    t0 = time.perf_counter()
    summary = run_label_stage(recipe, show_progress=False)
    log(f"{dataset}: {summary.questions} questions labelled ({time.perf_counter() - t0:.0f} s)")
    return run


def copy_labels(source: Path, run: Path, keep: set[str] | None = None) -> None:
    """candidates.jsonl and labels.jsonl (only the `keep` qids' labels when given) into the student run `run`,
    rewritten only when they differ (a finished run stays finished)."""
    from purecover.utils.io import write_jsonl_atomic
    from purecover.utils.rundir_claim import mark_run_dir

    mark_run_dir(run)  # assembled here: the stages may write into it
    if not (run / "candidates.jsonl").is_file() or \
            (run / "candidates.jsonl").read_bytes() != (source / "candidates.jsonl").read_bytes():
        shutil.copyfile(source / "candidates.jsonl", run / "candidates.jsonl")
    if keep is None:
        if not (run / "labels.jsonl").is_file() or \
                (run / "labels.jsonl").read_bytes() != (source / "labels.jsonl").read_bytes():
            shutil.copyfile(source / "labels.jsonl", run / "labels.jsonl")
        return
    labels = [r for r in read_jsonl(source / "labels.jsonl") if r["qid"] in keep]
    if not (run / "labels.jsonl").is_file() or read_jsonl(run / "labels.jsonl") != labels:
        write_jsonl_atomic(run / "labels.jsonl", labels)


def split_of(run: Path, seed: int, recipe: Any) -> dict[str, str]:
    """The train stage's split of `run`'s labelled questions at `seed` (`real_models.split_for_seed`)."""
    from purecover.train.data import read_labelled_questions

    questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
    return split_for_seed([q.qid for q in questions], seed, recipe.student.eval_fraction,
                          recipe.student.calibration_share)


def check_disjoint(split: dict[str, str], train_summary: dict[str, Any], where: str) -> None:
    """The split has the train summary's counts, and no qid is in two parts (a test question never trains)."""
    counts = {k: sum(1 for v in split.values() if v == k) for k in ("train", "calib", "test")}
    recorded = {k: train_summary[f"{k}_questions"] for k in counts}
    if counts != recorded:
        raise RuntimeError(f"{where}: split {counts} is not the train stage's {recorded}")
