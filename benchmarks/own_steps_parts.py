"""The helpers of `own_steps.py` (the experiment, its targets and rows are there): the question pool and its
draws, one label run (data, calibrate and label stages) and its figures, and the selection re-solved from a run's
stored scores at the points of `SELECTION_GRID`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib.harness import log
from benchlib.readout_runs import load
from benchlib.real_runs import mean, read_jsonl, set_figures, splits_of

LANCER = ["teacher.lancer.enabled=true"]  # ratings stored with the labels (beta 0: the selection ignores them)
# Selection settings re-solved from own steps' stored scores and chosen on development questions (`dev_choice`): the
# recipes' were chosen for oracle steps, and a reply cut off at the token limit has no answer line of its own, so
# weighting its steps by the answer's attention (cot_weighting) reads an answer made of the last step. beta: the
# weight of the teacher's LANCER sub-question ratings fused in (0: own steps alone).

# Selection settings re-solved from own steps' stored scores and chosen on development questions (`dev_choice`): the
# recipes' were chosen for oracle steps, and a reply cut off at the token limit has no answer line of its own, so
# weighting its steps by the answer's attention (cot_weighting) reads an answer made of the last step. beta: the
# weight of the teacher's LANCER sub-question ratings fused in (0: own steps alone).
SELECTION_GRID: dict[str, tuple[Any, ...]] = {"cot_weighting": (True, False), "min_select": (1, 2),
                                              "beta": (0.0, 0.25, 0.5, 0.75, 1.0),
                                              "repeated_steps": ("keep", "drop")}

def recipe(dataset: str, run: Path, extra: Sequence[str]) -> Any:
    """The dataset's real_cpu recipe on every real sample question of `FILES` (readout_runs' `load`: one
    ``data.path`` list), the teacher's attention read (not the oracle proxy's embedding), then `extra`."""
    return load(dataset, run, ["teacher.estimator=attention", *extra])

def question_pool(dataset: str, work: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """The dataset's candidates (qid -> candidate record) and their split (`splits_of`), from one data stage."""
    from purecover.data.data_stage import run_data_stage

    probe = recipe(dataset, work / dataset / "pool", [])
    run_data_stage(probe, show_progress=False)
    cands = {c["qid"]: c for c in read_jsonl(probe.run_path / "candidates.jsonl")}
    return cands, splits_of(list(cands))

def draw_questions(test: Sequence[str], n: int, draw: int) -> list[str]:
    """`n` of the test qids `test` (sorted first), drawn with `random.Random(draw)`; all of them when fewer."""
    pool = sorted(test)
    return sorted(random.Random(draw).sample(pool, min(n, len(pool))))

TIMING_FILE = "label_timing.json"  # a label run's seconds a question as this benchmark measured them


def label_run(dataset: str, run: Path, extra: Sequence[str], qids: Sequence[str]) -> dict[str, Any]:
    """Data, calibrate and label stages for the questions `qids` in `run` (resumed when done already): the labels
    (qid -> record) and the stage's seconds a question: None when the stage was resumed from an earlier process's
    replies or labels (its time is then not the whole run's), said by ``resumed`` and kept in `TIMING_FILE`."""
    from purecover.data.data_stage import run_data_stage
    from purecover.teacher.calibrate_stage import run_calibrate_stage
    from purecover.teacher.label_stage import run_label_stage
    from purecover.utils.io import write_jsonl_atomic

    r = recipe(dataset, run, extra)
    run_data_stage(r, show_progress=False)
    cands = read_jsonl(run / "candidates.jsonl")
    keep = set(qids)
    if {c["qid"] for c in cands} != keep:
        write_jsonl_atomic(run / "candidates.jsonl", [c for c in cands if c["qid"] in keep])
        (run / "data.run.json").unlink(missing_ok=True)  # not the data stage's output any more
    if r.teacher.calibrate:
        run_calibrate_stage(r, show_progress=False)
    state = label_state(run)
    if state != "done":  # hours for a pool: the stage's own progress bars (questions done, questions a second)
        log(f"label {run.name}: {len(keep)} questions ({state}; progress on stderr)")
    run_label_stage(r, show_progress=state != "done")
    labels = {x["qid"]: x for x in read_jsonl(run / "labels.jsonl")}
    per, resumed = label_timing(run, state, len(labels))
    return {"labels": labels, "seconds_per_question": per, "resumed": resumed,
            "layers": (json.loads((run / "label.run.json").read_text()).get("summary") or {}).get("layers"),
            "recipe": r}

def label_state(run: Path) -> str:
    """Before the label stage runs in `run`: ``done`` (complete already), ``resumed`` (an earlier process left
    replies or labels in its shards) or ``fresh``."""
    manifest = run / "label.run.json"
    if manifest.is_file() and (json.loads(manifest.read_text()).get("summary") or {}).get("status") == "complete":
        return "done"
    shards = (run / "label_shards").glob("*.jsonl")
    return "resumed" if any(p.stat().st_size > 0 for p in shards) else "fresh"

def label_timing(run: Path, state: str, questions: int) -> tuple[float | None, bool]:
    """(seconds a question, resumed) of the label run in `run`, which was `state` (`label_state`) before the stage
    ran: a stage that ran now is timed from its manifest's start and end and the result kept in `TIMING_FILE`,
    except a resumed one (its manifest times only its last part: None); a stage complete before reads what was
    kept (runs made before the file existed: their manifest)."""
    from purecover.utils.io import atomic_write_json

    timing = run / TIMING_FILE
    if state == "done" and timing.is_file():
        kept = json.loads(timing.read_text())
        return kept["seconds_per_question"], kept["resumed"]
    manifest = json.loads((run / "label.run.json").read_text())
    seconds = (dt.datetime.fromisoformat(manifest["finished"]) - dt.datetime.fromisoformat(manifest["started"])
               ).total_seconds()
    resumed = state == "resumed"
    per = None if resumed else round(float(seconds) / max(questions, 1), 2)
    if state != "done":
        atomic_write_json(timing, {"seconds_per_question": per, "resumed": resumed})
    return per, resumed

def reparsed(run: Any, cands: dict[str, dict]) -> dict[str, dict]:
    """qid -> {"reply_issue": ...} of the stored replies (label_shards/replies.*.jsonl, with ``finished``) of the
    label run whose recipe is `run`, parsed again by today's parser with the run's ``teacher.max_steps`` and its
    worked example when it showed one: the figures follow the parser, not the one the labels were made with (the
    labels' own ``reply_issue`` is what they were made from)."""
    from purecover.prompts import load_prompt
    from purecover.teacher.parsing import parse_reply

    example = load_prompt("reasoning_example").text if run.teacher.format_example else None
    out = {}
    for path in sorted((run.run_path / "label_shards").glob("replies.*.jsonl")):
        for r in read_jsonl(path):
            parsed = parse_reply(r["reply"], cands[r["qid"]]["question"], run.teacher.max_steps,
                                 finished=r.get("finished"), example=example)
            out[r["qid"]] = {"reply_issue": parsed.code}
    return out

def reply_figures(labels: dict[str, dict], qids: Sequence[str]) -> dict[str, Any]:
    """Usable-reply rate and fallbacks by code (``reply_issue``) over `qids`."""
    issues = Counter(labels[q].get("reply_issue") or "none" for q in qids)
    usable = sum(labels[q].get("reply_issue") in (None, "unclosed") for q in qids)
    return {"replies": len(qids), "usable_rate": round(usable / len(qids), 4) if qids else None,
            "issues": dict(sorted(issues.items()))}

def repeating(labels: dict[str, dict], qids: Sequence[str]) -> int:
    """How many of `qids`' label records have a step that repeats an earlier one (what teacher.repeated_steps: drop
    weighs 0; `purecover.teacher.estimation.step_key`)."""
    from purecover.teacher.estimation import step_key

    keys = [[step_key(s) for s in labels[q].get("steps") or []] for q in qids]
    return sum(len(set(k)) < len(k) for k in keys)

def label_figures(labels: dict[str, dict], cands: dict[str, dict], qids: Sequence[str]) -> dict[str, Any]:
    """`set_figures` of the labels' selected sets over `qids` (retrieval top-2 and top-|S| beside them)."""
    chosen = {q: [cands[q]["docs"][k]["doc_id"] for k in labels[q].get("selected") or []] for q in qids}
    fig = set_figures(chosen, cands, qids)
    fig["fallback_rate"] = mean([float(labels[q].get("status") == "fallback") for q in qids])
    return fig

def setting_name(setting: dict[str, Any]) -> str:
    """``cot_weighting=False,min_select=2,beta=0.5``: a grid point as rows and results name it (repeated_steps
    only when drop: the names, and the run directories named after them, of the points before it stay)."""
    return ",".join(f"{k}={v}" for k, v in setting.items() if (k, v) != ("repeated_steps", "keep"))

def selection_points(lancer: bool) -> list[dict[str, Any]]:
    """The points of `SELECTION_GRID` (the last key varying fastest); without `lancer`, beta 0 only."""
    grid = {k: (v if k != "beta" or lancer else (0.0,)) for k, v in SELECTION_GRID.items()}
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]

def resolved_figures(run: Any, cands: dict[str, dict], qids: Sequence[str],
                     settings: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`setting_name` -> `set_figures` over `qids` of the selections re-solved from the label run `run`'s stored
    attention (and LANCER ratings) at each of `settings` (`resolve_params` changes: cot_weighting, min_select,
    beta, ...), as `purecover tune` does; the run's own setting reproduces its labels. A question the label stage
    could not label (an error record) keeps its stored selection."""
    from purecover.teacher.defaults import resolve_params
    from purecover.teacher.selection import solve
    from purecover.teacher.tune import labels_bias, load_questions, setting_estimates

    if any(float(x.get("beta") or 0) > 0 for x in settings) and not run.teacher.lancer.enabled:
        raise ValueError(f"{run.run_path}: not a LANCER run (teacher.lancer.enabled is false), so beta must be 0")
    path = run.run_path / "labels.jsonl"
    stored = {x["qid"]: x for x in read_jsonl(path)}
    wanted = set(qids)
    questions = [q for q in load_questions(path, run.run_path / "candidates.jsonl") if q.qid in wanted]
    kept = {q: [cands[q]["docs"][k]["doc_id"] for k in stored[q].get("selected") or []] for q in qids}
    bias = labels_bias(run, path) if run.teacher.calibrate else None  # the grid does not vary calibration
    out = {}
    for setting in settings:
        params = resolve_params(run.teacher, **setting)
        result = solve(setting_estimates(questions, params, bias if params.calibrate else None), params)
        chosen = {**kept, **{q.qid: [q.doc_ids[k] for k in result.order(i)] for i, q in enumerate(questions)}}
        out[setting_name(setting)] = set_figures(chosen, cands, qids)
    return out

def choose_setting(f1: dict[str, float], points: Sequence[dict[str, Any]], fused: bool) -> dict[str, Any]:
    """The point of `points` with the best label F1 of `f1` (`setting_name` -> F1) among those with LANCER
    ratings fused in (beta above 0) when `fused`, else among those without (ties: the earlier point)."""
    among = [p for p in points if (float(p.get("beta") or 0) > 0) == fused]
    if not among:
        raise ValueError(f"no grid point {'with' if fused else 'without'} LANCER ratings fused in")
    return max(among, key=lambda p: (f1[setting_name(p)], -among.index(p)))

def dev_questions(cands: dict[str, dict], split: dict[str, str], dev: int) -> list[str]:
    """The first `dev` calibration qids (sorted) with gold passages: the development questions."""
    return sorted(q for q, s in split.items() if s == "calib" and cands[q]["gold_doc_ids"])[:dev]

def selection_overrides(setting: dict[str, Any] | None) -> list[str]:
    """The recipe overrides of a selection setting (`SELECTION_GRID` keys; beta 0 adds nothing: no ratings)."""
    out = []
    for key, value in (setting or {}).items():
        if key == "beta":
            if float(value) > 0:
                raise ValueError("the student part labels without LANCER ratings: beta must be 0")
            continue
        out.append(f"teacher.{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out
