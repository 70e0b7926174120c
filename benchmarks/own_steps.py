"""Labels without gold: a Qwen2.5-Coder teacher writes its own reasoning steps (issue 54). (JSON)

    python benchmarks/own_steps.py [--dataset hotpotqa] [--teacher qwen2.5-coder-0.5b-instruct]
                                   [--parts parse,labels,student] [--variants plain,prefix,...] [--dev 16]
                                   [--questions 24] [--draws 0,1,2] [--seeds 0,1,2]
                                   [--layers full_attention] [--variant NAME] [--lancer-draws 0|none]
                                   [--work build/own_steps] [--out benchmarks/results/own_steps.json]
    python benchmarks/own_steps.py --rows-only --out benchmarks/results/own_steps.json
    python benchmarks/own_steps.py --merge A.json B.json --out benchmarks/results/own_steps.json

The questions: the real sample files of `FILES` (as answers.py), split by the real_models benchmark's split
(`splits_of`, seed 0: about 60 % train, 20 % calibration, 20 % test). Development questions are the first
``--dev`` calibration questions (by qid); the reported questions are test questions, drawn at random
(``--questions`` of them per draw, `draw_questions`). Every run is the label stage of the dataset's real_cpu recipe
(`label_run`: data, calibrate, label, through purecover's own functions) with the teacher (``teacher.model``),
``teacher.estimator: attention`` and ``--layers`` (the teacher's layers chosen on calibration questions by
benchmarks/teacher_layers.py; `full_attention`: all of them).

Parts
  parse   Each reply format of `VARIANTS` (the prompt's worked example, the reply prefix, the token limit) on the
          development questions: the share of replies whose steps are usable (`ParsedReply.usable`: the reply's own
          step lines or numbered list), the fallbacks by code (empty, language, no_steps, unclosed), the seconds a
          question (reply + attention capture, 2 cores). The variant with the most usable replies (then the fastest)
          is chosen for the labels part (``--variant`` names one instead).
  labels  Each draw's test questions, labelled per source in the draw's own run directories (`label_dirs`:
          ``own_steps-VARIANT/drawN`` and so on, so another draw or variant never meets a finished run of other
          questions): ``own_steps`` (the chosen variant), ``oracle_steps`` (the dataset's gold decomposition drives
          the same teacher's attention) and, at ``--lancer-draws``, ``own_steps_lancer`` (own steps fused with the
          same teacher's LANCER sub-question ratings). Per draw: label precision / recall / F1 against the gold
          passages and mean |S| of each source, retrieval top-2 and top-|S| on the same questions, own steps'
          usable-reply rate and fallbacks by code, each source's seconds a question. Draws of an earlier run in
          ``--out`` are kept.
          Selection settings: the label runs store their scores (attention; LANCER runs the teacher's sub-question
          ratings too, at beta 0), and the selection is re-solved from them at each point of `SELECTION_GRID`
          (`resolved_figures`, as `purecover tune` does). The points are chosen on the ``--dev`` development
          questions (an own-steps run of their own, ``own_steps[_lancer]-VARIANT/dev``, with ratings when a draw
          has LANCER): the best without ratings (``own_steps_tuned``, the setting the own-steps recipes take) and
          the best with them fused in (``own_steps_lancer``); each draw reports its F1 at the chosen points
          (``own_steps`` stays the labels as the label stage made them, at the recipe's setting).

  student Own-step labels of every question of the pool (the chosen variant; at ``--selection``, by default the
          selection setting the labels part chose on development questions; resumable, ``all_own_steps[-SETTING]``), then the
          passage-readout student of benchmarks/student_readout.py (its `STUDENT` settings, its questions and its
          split at each seed) trained on them at each of ``--seeds`` (the real ``purecover train`` and ``export``
          commands) and scored on its seed's test questions: support F1, |S| and AUC in retrieval order, beside
          retrieval top-2 on the same questions and the student trained on oracle-step labels, quoted from
          benchmarks/results/student_readout.json (the oracle proxy: the dataset's oracle steps + all-MiniLM-L6-v2
          cosines) only where that row's test questions are these (the same qid digest).

Targets (issue 54): own steps' usable replies >= 90 % on the test questions; own-step label F1 above retrieval top-2
at each draw (rows per draw, mean and worst); the student trained on own-step labels above retrieval top-2 at each
seed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import log, seed_rows, stamp_machines
from benchlib.readout_runs import FILES, load, split_of
from benchlib.real_runs import ROOT, set_figures
from benchlib.rows import Rows, above, at_least, machine_info, now
from own_steps_parts import (
    LANCER,
    choose_setting,
    dev_questions,
    draw_questions,
    label_figures,
    label_run,
    question_pool,
    reparsed,
    repeating,
    reply_figures,
    resolved_figures,
    selection_overrides,
    selection_points,
    setting_name,
)

TEACHER = "qwen2.5-coder-0.5b-instruct"
# Reply formats tried on development questions (issue 54, item 1): our reasoning prompt as it is, with the reply
# started on a step marker, with our worked example of the format, and both; 160 new tokens (5 brief steps and an
# answer fit in about 120) and 256 for the last. The prefix_batch variants are the prefix with 4 or 8 questions
# generated (and captured) together instead of the recipe's 2, prefix_bf16 the prefix with the teacher in bfloat16
# (a CPU with AVX512-BF16 or AMX multiplies it faster) and prefix_batch8_bf16 both: the speed of the chosen format.
VARIANTS: dict[str, list[str]] = {
    "plain": ["teacher.max_new_tokens=160"],
    "prefix": ["teacher.reply_prefix='[Step 1]:'", "teacher.max_new_tokens=160"],
    "example": ["teacher.format_example=true", "teacher.max_new_tokens=160"],
    "example_prefix": ["teacher.format_example=true", "teacher.reply_prefix='[Step 1]:'",
                       "teacher.max_new_tokens=160"],
    "example_prefix_256": ["teacher.format_example=true", "teacher.reply_prefix='[Step 1]:'",
                           "teacher.max_new_tokens=256"],
    "prefix_batch4": ["teacher.reply_prefix='[Step 1]:'", "teacher.max_new_tokens=160", "teacher.batch_size=4"],
    "prefix_batch8": ["teacher.reply_prefix='[Step 1]:'", "teacher.max_new_tokens=160", "teacher.batch_size=8"],
    "prefix_bf16": ["teacher.reply_prefix='[Step 1]:'", "teacher.max_new_tokens=160", "teacher.dtype=bfloat16"],
    "prefix_batch8_bf16": ["teacher.reply_prefix='[Step 1]:'", "teacher.max_new_tokens=160", "teacher.batch_size=8",
                           "teacher.dtype=bfloat16"],
}
USABLE_TARGET = at_least(0.9)
def dev_choice(dataset: str, run: Path, extra: Sequence[str], cands: dict[str, dict], qids: Sequence[str],
               lancer: bool) -> dict[str, Any]:
    """The selection settings chosen on the development questions `qids` (an own-steps label run in `run`, with
    `LANCER` ratings when `lancer`): every `selection_points` point's label F1 there, the best without ratings
    (``own``) and, with `lancer`, the best with them fused in (``fused``)."""
    got = label_run(dataset, run, extra, qids)
    points = selection_points(lancer)
    figs = resolved_figures(got["recipe"], cands, qids, points)
    f1 = {name: f["f1"] for name, f in figs.items()}
    return {"questions": list(qids), "seconds_per_question": got["seconds_per_question"], "machine": machine_info(),
            "lancer": lancer, "f1": f1, "mean_size": {name: f["mean_size"] for name, f in figs.items()},
            "own": choose_setting(f1, points, False), "fused": choose_setting(f1, points, True) if lancer else None}


def parse_part(dataset: str, teacher: str, layers: str, work: Path, dev: int,
               variants: Sequence[str] = tuple(VARIANTS)) -> dict[str, Any]:
    cands, split = question_pool(dataset, work)
    qids = dev_questions(cands, split, dev)
    out: dict[str, Any] = {"dev_questions": qids, "variants": {}}
    for name in variants:
        overrides = VARIANTS[name]
        extra = [f"teacher.model={teacher}", "teacher.steps=model", f"teacher.layers={layers}", *overrides]
        run = work / dataset / teacher / f"dev-{name}"
        got = label_run(dataset, run, extra, qids)
        fig = reply_figures(reparsed(got["recipe"], cands), qids)
        fig.update(seconds_per_question=got["seconds_per_question"], overrides=overrides,
                   label_f1=label_figures(got["labels"], cands, qids)["f1"])
        out["variants"][name] = fig
        log(f"{dataset} {teacher} {name}: usable {fig['usable_rate']} {fig['issues']}, "
            f"{fig['seconds_per_question']} s a question")
    out["chosen"] = max(out["variants"], key=lambda n: (out["variants"][n]["usable_rate"] or 0.0,
                                                       -(out["variants"][n]["seconds_per_question"] or 0.0)))
    return out


def label_dirs(work: Path, dataset: str, teacher: str, variant: str, draw: int) -> dict[str, Path]:
    """The labels part's run directory of each source at draw `draw`: one per draw (another draw's questions
    would be another ``candidates.jsonl``, which a finished label stage refuses to mix in), and for the sources the
    reply format changes, one per variant (another variant is another configuration)."""
    base = work / dataset / teacher
    return {"own_steps": base / f"own_steps-{variant}" / f"draw{draw}",
            "oracle_steps": base / "oracle_steps" / f"draw{draw}",
            "own_steps_lancer": base / f"own_steps_lancer-{variant}" / f"draw{draw}"}


def labels_part(dataset: str, teacher: str, layers: str, variant: str, work: Path, n: int, draws: Sequence[int],
                lancer_draws: Sequence[int], dev: int = 16) -> dict[str, Any]:
    """The selection settings chosen on the `dev` development questions (`dev_choice`; with LANCER ratings when a
    draw of `draws` is one of `lancer_draws`), then per draw of `draws`: its `n` test questions labelled by each
    source in the draw's own run directories (`label_dirs`), resumed where a run is there already, and re-solved
    at the chosen settings (module docstring)."""
    cands, split = question_pool(dataset, work)
    test = [q for q, s in split.items() if s == "test" and cands[q]["gold_doc_ids"]]
    base = [f"teacher.model={teacher}", f"teacher.layers={layers}"]
    sources = {"own_steps": [*base, "teacher.steps=model", *VARIANTS[variant]],
               "oracle_steps": [*base, "teacher.steps=oracle"],
               "own_steps_lancer": [*base, "teacher.steps=model", *VARIANTS[variant], *LANCER]}
    lancer = bool(set(draws) & set(lancer_draws))
    source = "own_steps_lancer" if lancer else "own_steps"
    out: dict[str, Any] = {"questions_per_draw": n, "draws": {}, "dev": dev_choice(
        dataset, work / dataset / teacher / f"{source}-{variant}" / "dev", sources[source], cands,
        dev_questions(cands, split, dev), lancer)}
    chosen = out["dev"]
    log(f"{dataset} {teacher}, {dev} development questions: own steps at {setting_name(chosen['own'])} (F1 "
        f"{chosen['f1'][setting_name(chosen['own'])]})" + (f", LANCER at {setting_name(chosen['fused'])} (F1 "
                                                           f"{chosen['f1'][setting_name(chosen['fused'])]})"
                                                           if lancer else ""))
    for d in draws:
        qids = draw_questions(test, n, d)
        per: dict[str, Any] = {"variant": variant, "questions": qids, "sources": {}}
        dirs = label_dirs(work, dataset, teacher, variant, d)
        runs = {}
        for source, extra in sources.items():
            if source == "own_steps_lancer" and d not in lancer_draws:
                continue
            runs[source] = got = label_run(dataset, dirs[source], extra, qids)
            per["sources"][source] = {"overrides": extra, "questions": len(qids),
                                      "seconds_per_question": got["seconds_per_question"], "layers": got["layers"]}
            if source == "own_steps_lancer":
                fused = chosen["fused"]
                per[source] = {**resolved_figures(got["recipe"], cands, qids, [fused])[setting_name(fused)],
                               "setting": fused}
            else:
                per[source] = label_figures(got["labels"], cands, qids)
        # own steps at every point without ratings: the chosen one is the recipes' candidate, the rest only reported
        every = resolved_figures(runs["own_steps"]["recipe"], cands, qids, selection_points(False))
        per["own_steps_tuned"] = {**every[setting_name(chosen["own"])], "setting": chosen["own"]}
        per["own_steps_f1_by_setting"] = {name: f["f1"] for name, f in every.items()}
        per["own_steps_replies"] = {**reply_figures(reparsed(runs["own_steps"]["recipe"], cands), qids),
                                    "repeating": repeating(runs["own_steps"]["labels"], qids)}
        out["draws"][str(d)] = per
        log(f"{dataset} {teacher} draw {d}: own-step F1 {per['own_steps']['f1']}, at the chosen setting "
            f"{per['own_steps_tuned']['f1']} (usable {per['own_steps_replies']['usable_rate']}), oracle "
            f"{per['oracle_steps']['f1']}, retrieval top-2 {per['own_steps']['retrieval_top2_f1']}"
            + (f", LANCER {per['own_steps_lancer']['f1']}" if "own_steps_lancer" in per else ""))
    return out


def per_draw(part: dict[str, Any]) -> dict[str, Any]:
    """A labels part in today's shape: results written before the run directories were per draw kept ``variant``
    and ``sources`` once for all draws (then one run over the draws' union); they move into each draw."""
    if "sources" not in part and "variant" not in part:
        return part
    def moved(r: dict[str, Any]) -> dict[str, Any]:  # the sources that labelled this draw's questions
        return {"variant": part.get("variant"),
                "sources": {s: f for s, f in (part.get("sources") or {}).items() if s in r}, **r}

    return {**{k: v for k, v in part.items() if k not in ("variant", "sources")},
            "draws": {d: moved(r) for d, r in part["draws"].items()}}


def student_part(dataset: str, teacher: str, layers: str, variant: str, work: Path, seeds: Sequence[int],
                 reference: dict[str, Any] | None, selection: dict[str, Any] | None = None,
                 so_far: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Own-step labels of the whole pool at the selection setting `selection` (None: the recipe's), then a
    passage-readout student on them at each seed (module docstring). `reference`: student_readout.json's result
    (the oracle-step students), or None. `so_far` gets the part so far once the pool is labelled and after each
    seed (a kill later loses neither the pool's label figures nor a finished seed's)."""
    from benchlib.students import settings, student

    cands, _ = question_pool(dataset, work)
    # the labels' teacher, also written into the student runs' recipes (readout_runs' load names the oracle proxy)
    teacher_set = [f"teacher.model={teacher}", f"teacher.layers={layers}", "teacher.steps=model",
                   "teacher.estimator=attention", *VARIANTS[variant], *selection_overrides(selection)]
    # another setting is another configuration, so another run directory
    source = work / dataset / teacher / ("all_own_steps" + (f"-{setting_name(selection)}" if selection else ""))
    got = label_run(dataset, source, teacher_set, sorted(cands))
    pool = label_figures(got["labels"], cands, sorted(q for q in got["labels"] if cands[q]["gold_doc_ids"]))
    out: dict[str, Any] = {"variant": variant, "selection": selection, "labels": {
        "questions": len(got["labels"]), "seconds_per_question": got["seconds_per_question"],
        "resumed": got["resumed"],
        "replies": {**reply_figures(reparsed(got["recipe"], cands), sorted(got["labels"])),
                    "repeating": repeating(got["labels"], sorted(got["labels"]))},
        "label_f1": pool["f1"], **{k: pool[k] for k in ("precision", "recall", "mean_size", "retrieval_top2_f1",
                                                        "retrieval_top_s_f1")}}, "seeds": {}}
    if so_far is not None:
        so_far(out)
    ref = ((reference or {}).get("datasets") or {}).get(dataset) or {}
    for seed in seeds:
        settings_ = [*teacher_set, *settings("passage")]
        trained = student(dataset, "passage", seed, work / "students", source, settings_, tag="_own_steps")
        run = work / "students" / dataset / f"passage_own_steps-seed{seed}"
        split = split_of(run, seed, load(dataset, run, [f"seed={seed}", *settings_]))
        test = sorted(q for q, part in split.items() if part == "test" and cands[q]["gold_doc_ids"])
        fig = trained["orders"]["retrieval"]
        oracle = ((ref.get("students") or {}).get("passage") or {}).get(str(seed)) or {}
        same = oracle.get("test_qids_sha") == trained["test_qids_sha"]
        per = {**{k: fig[k] for k in ("f1", "precision", "mean_size", "auc", "coverage@2")},
               "questions": trained["questions"],
               "calib_subset_f1": trained["calib_subset_f1"],  # agreement with its labels where tau3 was chosen
               "test_qids_sha": trained["test_qids_sha"], "train_seconds": trained["train"]["seconds"],
               # every candidate order: a student that reads keeps its F1 with the passages reversed or shuffled
               "orders": {o: {k: f[k] for k in ("f1", "auc", "mean_size")} for o, f in trained["orders"].items()},
               "retrieval_top2_f1": set_figures({q: [] for q in test}, cands, test)["retrieval_top2_f1"],
               "oracle_steps_f1": ((oracle.get("orders") or {}).get("retrieval") or {}).get("f1") if same else None}
        out["seeds"][str(seed)] = per
        log(f"{dataset} student on own-step labels, seed {seed}: F1 {per['f1']} (|S| {per['mean_size']}); the "
            f"oracle-step student {per['oracle_steps_f1']}, retrieval top-2 {per['retrieval_top2_f1']}")
        if so_far is not None:
            so_far(out)
    return out


# ------------------------------------------------------------------------------------------------ rows


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of every part; each carries the machine its entry was measured on (runs merged from different
    sessions may differ)."""
    table = Rows(result)
    for key, part in sorted(result.get("parse", {}).items()):
        start = len(table.rows)
        for name, fig in part["variants"].items():
            chosen = " (chosen)" if name == part["chosen"] else ""
            table.add(f"own_steps.{key}.dev_usable_rate", fig["usable_rate"], "share", variant=name + chosen,
                      note=f"{fig['replies']} development (calibration) questions; fallbacks {fig['issues']}; "
                           f"{fig['seconds_per_question']} s a question on 2 cores")
        stamp_machines(table, start, {None: part.get("machine")}, result)
    for key, part in sorted(result.get("labels", {}).items()):
        start = len(table.rows)
        draws = {int(d): r for d, r in per_draw(part)["draws"].items()}
        name = f"own_steps.{key}"
        variant = ",".join(sorted({r["variant"] for r in draws.values()}))
        seed_rows(table, f"{name}.usable_rate", {d: r["own_steps_replies"]["usable_rate"] for d, r in draws.items()},
                  "share", USABLE_TARGET, variant=variant,
                  note="test questions of each draw whose reply gives usable steps")
        repeats = {d: r["own_steps_replies"]["repeating"] for d, r in draws.items()
                   if "repeating" in r["own_steps_replies"]}
        if repeats:
            seed_rows(table, f"{name}.repeating_replies", repeats, "questions", variant=variant, with_worst=False,
                      note="test questions of each draw whose own steps repeat a step (what teacher.repeated_steps: "
                           "drop weighs 0)")
        # the target reads the own-step labels at the setting chosen on development questions where a draw has them
        own = {d: r.get("own_steps_tuned") or r["own_steps"] for d, r in draws.items()}
        settings = sorted({setting_name(f["setting"]) if "setting" in f else "the recipe's" for f in own.values()})
        seed_rows(table, f"{name}.own_minus_retrieval_top2_f1",
                  {d: round(f["f1"] - f["retrieval_top2_f1"], 4) for d, f in own.items()}, "F1", above(0.0),
                  variant=", ".join(settings),
                  note="own-step label F1 (at the selection setting chosen on development questions, `variant`) "
                       "minus retrieval top-2's on the same test questions")
        for source in ("own_steps", "own_steps_tuned", "oracle_steps", "own_steps_lancer"):
            values = {d: (r.get(source) or {}).get("f1") for d, r in draws.items()}
            if any(v is not None for v in values.values()):
                seed_rows(table, f"{name}.label_f1", {d: v for d, v in values.items() if v is not None}, "F1",
                          variant=source)
        seed_rows(table, f"{name}.label_f1", {d: r["own_steps"]["retrieval_top2_f1"] for d, r in draws.items()},
                  "F1", variant="retrieval_top2")
        switched = {d: flipped for d, r in draws.items() if (flipped := repeats_switched(r)) is not None}
        if switched:
            seed_rows(table, f"{name}.label_f1", {d: f for d, (_, f) in switched.items()}, "F1",
                      variant="own_steps at " + ", ".join(sorted({n for n, _ in switched.values()})) + " (not chosen)",
                      note="the setting chosen on development questions with teacher.repeated_steps switched: "
                           "reported, never used to choose")
        fused = {d: r for d, r in draws.items() if "setting" in (r.get("own_steps_lancer") or {})}
        if fused:
            seed_rows(table, f"{name}.lancer_minus_own_steps_f1",
                      {d: round(r["own_steps_lancer"]["f1"] - own[d]["f1"], 4) for d, r in fused.items()}, "F1",
                      note="label F1 of own steps fused with the teacher's LANCER ratings minus own steps alone, each "
                           "at its setting chosen on development questions, on the same questions")
        for source in ("own_steps", "oracle_steps", "own_steps_lancer"):
            values = {d: r["sources"][source]["seconds_per_question"] for d, r in draws.items()
                      if source in r["sources"]}
            if values:
                seed_rows(table, f"{name}.seconds_per_question", values, "s", variant=source, lower_is_better=True,
                          note="the label stage's seconds a question over the draw's questions, on 2 cores")
        stamp_machines(table, start, {d: r.get("machine") for d, r in draws.items()}, result)
        if dev := part.get("dev"):
            start = len(table.rows)
            marks = {setting_name(dev["own"]): " (chosen: own steps)"}
            if dev.get("fused"):
                marks[setting_name(dev["fused"])] = " (chosen: LANCER)"
            for setting, f1 in dev["f1"].items():
                table.add(f"{name}.dev_label_f1", f1, "F1", variant=setting + marks.get(setting, ""),
                          note=f"{len(dev['questions'])} development (calibration) questions, own steps re-solved "
                               f"at each selection setting; {dev['seconds_per_question']} s a question"
                               f"{' with LANCER ratings' if dev['lancer'] else ''}, on 2 cores")
            stamp_machines(table, start, {None: dev.get("machine")}, result)
    for key, part in sorted(result.get("student", {}).items()):
        start = len(table.rows)
        name, seeds = f"own_steps.{key}", {int(d): r for d, r in part["seeds"].items()}
        lab = part["labels"]
        selection = setting_name(part["selection"]) if part.get("selection") else "the recipe's selection"
        table.add(f"{name}.pool_label_f1", lab["label_f1"], "F1", variant=f"{part['variant']}, {selection}",
                  note=f"own-step labels of all {lab['questions']} questions the students train on, against the gold "
                       f"passages; usable replies {lab['replies']['usable_rate']}, "
                       f"{lab['replies'].get('repeating', 'not counted')} repeating a step, "
                       + (f"{lab['seconds_per_question']} s/question on 2 cores" if lab["seconds_per_question"]
                          is not None else "time not measured (labelled over several sessions: the draws time it)"))
        if (top2 := lab.get("retrieval_top2_f1")) is not None:  # absent from results written before it was stored
            table.add(f"{name}.pool_label_minus_retrieval_top2_f1", round(lab["label_f1"] - top2, 4), "F1",
                      above(0.0), variant=f"{part['variant']}, {selection}",
                      note=f"the pool's own-step labels minus retrieval top-2's ({top2}) on the same questions")
        seed_rows(table, f"{name}.student_minus_retrieval_top2_f1",
                  {d: round(r["f1"] - r["retrieval_top2_f1"], 4) for d, r in seeds.items()}, "F1", above(0.0),
                  note="held-out support F1 of the passage-readout student trained on own-step labels minus "
                       "retrieval top-2's on the same test questions")
        for variant, field in (("own_steps", "f1"), ("oracle_steps", "oracle_steps_f1"),
                               ("retrieval_top2", "retrieval_top2_f1")):
            values = {d: r.get(field) for d, r in seeds.items() if r.get(field) is not None}
            if values:
                seed_rows(table, f"{name}.student_f1", values, "F1", variant=variant,
                          note=None if variant != "oracle_steps" else "student_readout.json's passage student "
                          "(oracle-proxy labels) on the same test questions")
        for order in ("reversed", "shuffled"):
            values = {d: r["orders"][order]["f1"] for d, r in seeds.items() if order in (r.get("orders") or {})}
            if values:
                seed_rows(table, f"{name}.student_f1", values, "F1", variant=f"own_steps, {order} order",
                          note="the same students with each question's candidates in another order (retrieval "
                               "order above): a student that reads passages, not positions, keeps its F1")
        if any("train_seconds" in r for r in seeds.values()):
            seed_rows(table, f"{name}.student_train_seconds",
                      {d: r["train_seconds"] for d, r in seeds.items() if "train_seconds" in r}, "s",
                      variant="2 cores", lower_is_better=True, note="the train command, one pass over the "
                      "training questions (student_readout.py's settings)")
        stamp_machines(table, start, {None: part.get("machine")} | {d: r.get("machine") for d, r in seeds.items()}, result)
    return table.rows


def repeats_switched(draw: dict[str, Any]) -> tuple[str, float] | None:
    """(setting name, F1) of a draw's own steps at its chosen setting with ``repeated_steps`` switched (keep <->
    drop), from the F1 it stored at every grid point; None when it has no such point."""
    tuned = (draw.get("own_steps_tuned") or {}).get("setting")
    if not tuned:
        return None
    flipped = {**tuned, "repeated_steps": "keep" if tuned.get("repeated_steps") == "drop" else "drop"}
    f1 = (draw.get("own_steps_f1_by_setting") or {}).get(setting_name(flipped))
    return None if f1 is None else (setting_name(flipped), f1)


# ------------------------------------------------------------------------------------------------ main


def merge(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Results of several runs as one: later files win per part and ``dataset.teacher`` key, the student part's
    seeds are combined; every run's file and command kept, and each parse entry, draw and seed keeps the machine and
    date of the file it came from (one that records its own keeps those)."""
    def combine(out: dict[str, Any], data: dict[str, Any]) -> None:
        mark = {"machine": data.get("machine"), "date": data.get("date")}  # what an entry without its own came from
        labels = {k: per_draw(v) for k, v in (data.get("labels") or {}).items()}
        labels = {k: v | {"draws": {d: mark | r for d, r in v.get("draws", {}).items()}} for k, v in labels.items()}
        data = data | {"parse": {k: mark | v for k, v in (data.get("parse") or {}).items()},
                       "student": {k: mark | v | {"seeds": {d: mark | r for d, r in v.get("seeds", {}).items()}}
                                   for k, v in (data.get("student") or {}).items()}}
        for part, depth, new in (("parse", 1, data.get("parse")), ("labels", 3, labels),  # key -> "draws" -> draw
                                 ("student", 3, data.get("student"))):  # key -> "seeds" -> seed
            out[part] = harness.merged([out.get(part) or {}, new or {}], depth=depth)

    out = harness.merge_files(paths, combine, keep=("date", "machine", "versions"))
    out.pop("datasets")  # merge_files' default section: this benchmark keys its parts instead
    return out


def write_merged(args: Any) -> int:
    harness.write(args.out, merge(args.merge), rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "own_steps.json",
                            merge="combine these results files into --out (later files win per part and dataset; "
                                  "the labels part's draws and the student part's seeds combined); nothing "
                                  "is measured")
    parser.add_argument("--dataset", default="hotpotqa", choices=sorted(FILES))
    parser.add_argument("--teacher", default=TEACHER)
    parser.add_argument("--parts", default="parse,labels",
                        type=lambda t: harness.name_list(t, ("parse", "labels", "student"), "parts"))
    parser.add_argument("--seeds", type=harness.seed_list, default=[0, 1, 2], help="the student part's seeds")
    parser.add_argument("--dev", type=int, default=16,
                        help="development questions of the parse part and of the labels part's selection settings")
    parser.add_argument("--questions", type=int, default=24, help="test questions per draw")
    parser.add_argument("--draws", type=harness.seed_list, default=[0, 1, 2])
    parser.add_argument("--lancer-draws", type=lambda t: [] if t == "none" else harness.seed_list(t), default=[0],
                        help="the draws whose questions also get LANCER-fused labels ('none': no LANCER run)")
    parser.add_argument("--layers", default="full_attention", help="teacher.layers (default: %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        type=lambda t: harness.name_list(t, tuple(VARIANTS), "variants"),
                        help="the reply formats the parse part tries (default: %(default)s)")
    parser.add_argument("--variant", default=None, choices=sorted(VARIANTS),
                        help="the reply format of the labels part (default: the parse part's choice)")
    parser.add_argument("--selection", choices=("dev", "recipe"), default="dev",
                        help="the student part's selection setting: the one the labels part chose on development "
                             "questions (--out's, else the committed results'), or the recipe's")
    parser.add_argument("--work", default=str(ROOT / "build" / "own_steps"))
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows, write_merged)) is not None:
        return status
    from purecover.utils.provenance import package_versions

    work = Path(args.work)
    key = f"{args.dataset}.{args.teacher}"
    previous = harness.load(args.out) or {}
    result: dict[str, Any] = {"date": now(), "machine": machine_info(),
                              "parse": dict(previous.get("parse") or {}), "labels": dict(previous.get("labels") or {}),
                              "student": dict(previous.get("student") or {}),
                              "commands": [*(previous.get("commands") or []), " ".join(sys.argv)]}
    if "parse" in args.parts:
        result["parse"][key] = {**parse_part(args.dataset, args.teacher, args.layers, work, args.dev, args.variants),
                                "layers": args.layers}
        harness.write(args.out, {**result, "versions": package_versions()}, rows)
    if "labels" in args.parts:
        variant = args.variant or (result["parse"].get(key) or {}).get("chosen")
        if variant is None:
            raise SystemExit(f"no reply format chosen for {key}: run the parse part first, or name --variant")
        got = labels_part(args.dataset, args.teacher, args.layers, variant, work, args.questions, args.draws,
                          args.lancer_draws, args.dev)
        earlier = per_draw(result["labels"].get(key) or {"draws": {}})
        got["draws"] = {**earlier["draws"], **got["draws"]}  # draws of earlier sessions kept
        result["labels"][key] = {**got, "layers": args.layers}
        harness.write(args.out, {**result, "versions": package_versions()}, rows)
    if "student" in args.parts:
        variant = args.variant or (result["parse"].get(key) or {}).get("chosen")
        if variant is None:
            raise SystemExit(f"no reply format chosen for {key}: run the parse part first, or name --variant")
        previous_seeds = ((result["student"].get(key) or {}).get("seeds") or {})
        committed = harness.load(ROOT / "benchmarks" / "results" / "own_steps.json") or {}
        chosen = [((r.get("labels") or {}).get(key) or {}).get("dev", {}).get("own") for r in (result, committed)]
        selection = None if args.selection == "recipe" else next((c for c in chosen if c), None)
        if args.selection == "dev" and selection is None:
            raise SystemExit(f"no selection setting chosen on development questions for {key}: run the labels part "
                             "first, or name --selection recipe")
        def written(got: dict[str, Any]) -> None:
            got = {**got, "seeds": {**previous_seeds, **got["seeds"]}}  # seeds of earlier sessions kept
            result["student"][key] = {**got, "layers": args.layers}
            harness.write(args.out, {**result, "versions": package_versions()}, rows)

        student_part(args.dataset, args.teacher, args.layers, variant, work, args.seeds,
                     harness.load(ROOT / "benchmarks" / "results" / "student_readout.json"), selection,
                     so_far=written)  # written once labelled and after each seed
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
