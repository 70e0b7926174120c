"""bfloat16 against float32 on a CPU, and the teacher's batch: what the HotpotQA real_cpu recipe's speed settings buy
and what they change, each setting on the same questions, one after another, under the same load. (JSON)

    python benchmarks/cpu_precision.py [--parts label,answer,select] [--questions 40] [--busy 0,2]
                                       [--selector build/answers/hotpotqa/seed2/selector]
                                       [--work build/cpu_precision] [--out benchmarks/results/cpu_precision.json]
    python benchmarks/cpu_precision.py --merge A.json B.json --out benchmarks/results/cpu_precision.json
    python benchmarks/cpu_precision.py --rows-only --out benchmarks/results/cpu_precision.json

Questions: a seeded random ``--questions`` of the HotpotQA dev sample (``data.sample``, seed 0), retrieved as the
recipe retrieves them (BM25 over each question's own paragraphs). Every setting runs the real CLI in a process of
its own (`purecover <stage> configs/recipes/real_cpu/hotpotqa.yaml --set ...`), in a run directory of its own;
seconds are the stage's manifest (start to end, the model's loading included). The settings chosen by the
recipe were chosen on these development questions for speed alone: what they change is the figure here.

Parts
  label   The label stage as the recipe runs it (SmolLM2-135M-Instruct's attention in layers 18 and 23 over the
          oracle steps, position bias calibrated), at each of teacher.dtype float32 / bfloat16 x teacher.batch_size
          2 / 1 (`LABEL_GRID`): seconds a question; the share of questions whose label subset equals float32 at a
          batch of 2's (the setting before the change); label F1 against the gold passages.
  answer  The evaluate stage with Qwen2.5-Coder-0.5B-Instruct answering each question from its gold passages and
          from retrieval's top 5 (methods gold_support and retrieval, budget 5) at eval.dtype float32 and bfloat16:
          seconds a prompt, EM of each method, the share of answers identical to float32's.
  select  The exported passage-readout selector of a benchmarks/answers.py run (``--selector``: that run's
          ``selector`` directory) over the first ``--questions`` (by qid) of that run's own held-out questions
          (the qids of its ``selections.jsonl``, their candidates from its ``candidates.jsonl``), through
          ``purecover select --selector DIR --input FILE --out FILE --dtype D`` at float32 and bfloat16
          (``student.dtype``, which the select stage and the export use): seconds a question (the command's own
          throughput, ``questions_per_second``, as answers.py's ``select_ms``), the share of selected sets
          identical to float32's, support F1 against the gold passages.
``--busy N``: N processes spin on the CPU meanwhile (``make test`` beside a run is about 2), every setting of that
load timed under it; each N its own rows.

Targets (the recipe's settings, idle cores): the teacher at bfloat16 and a batch of 1 at least 1.5x faster than
float32 at 2, with at least 95 % of the label subsets identical and label F1 no more than 0.01 lower; bfloat16
answering at least 1.5x faster than float32, with at least 90 % of the answers identical; the selector in bfloat16
at least 1.5x faster than float32, with at least 95 % of the selected sets identical and support F1 no more than
0.01 lower. Rows: `rows`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import busy, stamp_machines
from benchlib.readout_runs import samples
from benchlib.real_runs import ROOT, prf, read_jsonl, stage_seconds
from benchlib.rows import Rows, at_least, at_most, machine_info, now

RECIPE = ROOT / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml"
DEV_FILE = "hotpotqa_dev_sample.json"
LABEL_GRID = (("float32", 2), ("float32", 1), ("bfloat16", 2), ("bfloat16", 1))
LABEL_BEFORE, LABEL_RECIPE = LABEL_GRID[0], LABEL_GRID[-1]
ANSWER_DTYPES = ("float32", "bfloat16")
ANSWER_METHODS = ("gold_support", "retrieval")
ANSWER_K = 5
SPEED_TARGET = at_least(1.5)
SAME_LABELS_TARGET = at_least(0.95)
F1_LOSS_TARGET = at_most(0.01)
SAME_ANSWERS_TARGET = at_least(0.9)


def cli(stage: str, run_dir: Path, questions: int, overrides: Sequence[str], log: Path) -> None:
    """One stage of the real CLI on the recipe, `questions` dev-sample questions, in `run_dir` (resumes)."""
    cmd = [sys.executable, "-m", "purecover", stage, str(RECIPE), "--set", f"data.path={samples() / DEV_FILE}",
           "--set", f"data.sample={questions}", "--set", f"run_dir={run_dir}", "-q"]
    for o in overrides:
        cmd += ["--set", o]
    with open(log, "ab") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})


def label_subsets(run_dir: Path) -> dict[str, list[int]]:
    return {r["qid"]: list(r.get("selected") or []) for r in read_jsonl(run_dir / "labels.jsonl")}


def label_f1(run_dir: Path) -> float:
    """Mean label F1 against the gold passages over the questions with gold."""
    cands = {c["qid"]: c for c in read_jsonl(run_dir / "candidates.jsonl")}
    f1s = []
    for r in read_jsonl(run_dir / "labels.jsonl"):
        c = cands[r["qid"]]
        if c.get("gold_doc_ids"):
            chosen = [c["docs"][k]["doc_id"] for k in r.get("selected") or []]
            f1s.append(prf(chosen, set(c["gold_doc_ids"]))[2])
    return round(sum(f1s) / len(f1s), 4) if f1s else float("nan")


def label_part(work: Path, questions: int, n_busy: int) -> dict[str, Any]:
    """Each `LABEL_GRID` setting's label stage on the same questions under `n_busy` spinners."""
    out: dict[str, Any] = {}
    with busy(n_busy):
        for dtype, batch in LABEL_GRID:
            run = work / f"label-{dtype}-b{batch}-busy{n_busy}"
            run.mkdir(parents=True, exist_ok=True)
            sets = [f"teacher.dtype={dtype}", f"teacher.batch_size={batch}"]
            for stage in ("data", "calibrate", "label"):
                cli(stage, run, questions, sets, work / "cpu_precision.log")
            seconds = round(stage_seconds(run, "label"), 1)
            n = len(label_subsets(run))
            out[key((dtype, batch))] = {"dtype": dtype, "batch_size": batch, "questions": n, "seconds": seconds,
                                        "seconds_per_question": round(seconds / n, 3), "label_f1": label_f1(run),
                                        "run": str(run)}
            harness.log(f"label {dtype} batch {batch}, {n_busy} busy: {seconds} s, label F1 {out[key((dtype, batch))]['label_f1']}")
    before = label_subsets(Path(out[key(LABEL_BEFORE)]["run"]))
    for fig in out.values():
        mine = label_subsets(Path(fig["run"]))
        fig["same_labels_as_before"] = round(sum(mine.get(q) == s for q, s in before.items()) / len(before), 4)
    return out


def key(setting: tuple[str, int]) -> str:
    return f"{setting[0]}/b{setting[1]}"


def answers_of(run_dir: Path) -> dict[str, str]:
    """(method@k, qid) → the generated answer, from the evaluation's generation records."""
    out = {}
    for path in sorted((run_dir / "eval" / "predictions").glob("*.jsonl")):
        for r in read_jsonl(path):
            out[f"{path.stem}/{r['qid']}"] = r.get("prediction")
    return out


def answer_part(work: Path, questions: int, n_busy: int) -> dict[str, Any]:
    """The evaluate stage at each `ANSWER_DTYPES` on the same questions under `n_busy` spinners."""
    out: dict[str, Any] = {}
    with busy(n_busy):
        for dtype in ANSWER_DTYPES:
            run = work / f"answer-{dtype}-busy{n_busy}"
            run.mkdir(parents=True, exist_ok=True)
            sets = [f"eval.dtype={dtype}", f"eval.methods=[{', '.join(ANSWER_METHODS)}]", f"eval.budgets=[{ANSWER_K}]",
                    f"eval.table_budget={ANSWER_K}", "eval.questions=all"]
            cli("data", run, questions, sets, work / "cpu_precision.log")
            cli("evaluate", run, questions, sets, work / "cpu_precision.log")
            seconds = round(stage_seconds(run, "evaluate"), 1)
            summary = json.loads((run / "evaluate.run.json").read_text())["summary"]
            metrics = json.loads((run / "eval" / "metrics.json").read_text())["results"]
            out[dtype] = {"dtype": dtype, "questions": summary.get("questions"), "prompts": summary.get("prompts"),
                          "seconds": seconds, "seconds_per_prompt": round(seconds / max(summary.get("prompts") or 1, 1), 3),
                          "em": {m: metrics[m][str(ANSWER_K)]["em"] for m in ANSWER_METHODS}, "run": str(run)}
            harness.log(f"answer {dtype}, {n_busy} busy: {seconds} s, EM {out[dtype]['em']}")
    before = answers_of(Path(out[ANSWER_DTYPES[0]]["run"]))
    for fig in out.values():
        mine = answers_of(Path(fig["run"]))
        fig["same_answers_as_float32"] = round(sum(mine.get(k) == a for k, a in before.items()) / max(len(before), 1), 4)
    return out


SELECT_DTYPES = ("float32", "bfloat16")


def select_input(selector: Path, questions: int, path: Path) -> list[str]:
    """Write to `path` the candidates of the first `questions` (by qid) of the held-out questions the answers.py run
    owning `selector` selected for; return their qids."""
    run = selector.parent
    if not (selector / "selector_config.json").is_file() and not any(selector.glob("*.safetensors")):
        raise SystemExit(f"no exported selector in {selector}: run benchmarks/answers.py first (its run directory's "
                         "`selector`), or name one with --selector")
    from purecover.utils.io import write_jsonl_atomic

    qids = sorted({r["qid"] for r in read_jsonl(run / "selections.jsonl")})[:questions]
    keep = set(qids)
    write_jsonl_atomic(path, [{k: c[k] for k in ("qid", "question", "docs")}
                              for c in read_jsonl(run / "candidates.jsonl") if c["qid"] in keep])
    return qids


def select_part(work: Path, selector: Path, questions: int, n_busy: int) -> dict[str, Any]:
    """The selector at each `SELECT_DTYPES` on the same held-out questions under `n_busy` spinners."""
    inp = work / f"select-input-{questions}.jsonl"
    qids = select_input(selector, questions, inp)
    gold = {c["qid"]: set(c.get("gold_doc_ids") or []) for c in read_jsonl(selector.parent / "candidates.jsonl")}
    shown = selector.resolve()
    out: dict[str, Any] = {"selector": str(shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown),
                           "questions": len(qids)}
    sets: dict[str, dict[str, list[str]]] = {}
    with busy(n_busy):
        for dtype in SELECT_DTYPES:
            dest = work / f"select-{dtype}-busy{n_busy}.jsonl"
            for stale in (dest, dest.with_name(dest.name + ".run.json")):
                stale.unlink(missing_ok=True)  # ours (this part's own output): timed afresh
            cmd = [sys.executable, "-m", "purecover", "select", "--selector", str(selector), "--input", str(inp),
                   "--out", str(dest), "--dtype", dtype, "-q"]
            with open(work / "cpu_precision.log", "ab") as log:
                subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
            summary = json.loads(dest.with_name(dest.name + ".run.json").read_text())["summary"]
            sets[dtype] = {r["qid"]: sorted(r["selected_doc_ids"]) for r in read_jsonl(dest)}
            f1s = [prf(sets[dtype][q], gold[q])[2] for q in qids if gold.get(q)]
            out[dtype] = {"dtype": dtype, "seconds_per_question": round(1.0 / summary["questions_per_second"], 3),
                          "mean_selected": summary.get("mean_selected"),
                          "support_f1": round(sum(f1s) / len(f1s), 4) if f1s else None}
            harness.log(f"select {dtype}, {n_busy} busy: {out[dtype]['seconds_per_question']} s a question, "
                        f"support F1 {out[dtype]['support_f1']}")
    for dtype in SELECT_DTYPES:
        out[dtype]["same_sets_as_float32"] = round(
            sum(sets[dtype][q] == sets["float32"][q] for q in qids) / max(len(qids), 1), 4)
    return out


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    table = Rows(result)
    for load, parts in sorted(result.get("loads", {}).items(), key=lambda kv: int(kv[0])):
        idle = load == "0"
        where = f"{load} busy processes"
        label = parts.get("label")
        if label:
            start = len(table.rows)
            base, mine = label[key(LABEL_BEFORE)], label[key(LABEL_RECIPE)]
            for name, fig in ((n, f) for n, f in label.items() if n not in ("machine", "date")):
                table.add("cpu_precision.label_seconds_per_question", fig["seconds_per_question"], "s",
                          variant=f"{name}, {where}",
                          note=f"{fig['questions']} questions, label F1 {fig['label_f1']}, same subsets as "
                               f"{key(LABEL_BEFORE)}: {fig['same_labels_as_before']}")
            table.add("cpu_precision.label_speedup", round(base["seconds"] / mine["seconds"], 3), "x",
                      SPEED_TARGET if idle else None, variant=f"{key(LABEL_RECIPE)} over {key(LABEL_BEFORE)}, {where}",
                      note=f"{mine['seconds']} s against {base['seconds']} s for {mine['questions']} questions")
            table.add("cpu_precision.label_same_subsets", mine["same_labels_as_before"], "share",
                      SAME_LABELS_TARGET if idle else None, variant=f"{key(LABEL_RECIPE)}, {where}",
                      note=f"label subsets equal to {key(LABEL_BEFORE)}'s")
            table.add("cpu_precision.label_f1_loss", round(base["label_f1"] - mine["label_f1"], 4), "F1",
                      F1_LOSS_TARGET if idle else None, variant=f"{key(LABEL_RECIPE)}, {where}",
                      note=f"label F1 {mine['label_f1']} against {base['label_f1']}")
            stamp_machines(table, start, {None: label.get("machine")}, result)
        answer = parts.get("answer")
        if answer:
            start = len(table.rows)
            f32, bf16 = answer["float32"], answer["bfloat16"]
            table.add("cpu_precision.answer_speedup", round(f32["seconds"] / bf16["seconds"], 3), "x",
                      SPEED_TARGET if idle else None, variant=f"bfloat16 over float32, {where}",
                      note=f"{bf16['seconds']} s against {f32['seconds']} s for {bf16['prompts']} prompts "
                           f"({bf16['seconds_per_prompt']} against {f32['seconds_per_prompt']} s a prompt)")
            table.add("cpu_precision.answer_same", bf16["same_answers_as_float32"], "share",
                      SAME_ANSWERS_TARGET if idle else None, variant=f"bfloat16, {where}",
                      note=f"EM bfloat16 {bf16['em']} against float32 {f32['em']}, {bf16['questions']} questions")
            stamp_machines(table, start, {None: answer.get("machine")}, result)
        select = parts.get("select")
        if select:
            start = len(table.rows)
            f32, bf16 = select["float32"], select["bfloat16"]
            where_sel = f"{where}, {select['questions']} held-out questions"
            table.add("cpu_precision.select_speedup", round(f32["seconds_per_question"] / bf16["seconds_per_question"], 3),
                      "x", SPEED_TARGET if idle else None, variant=f"bfloat16 over float32, {where_sel}",
                      note=f"{bf16['seconds_per_question']} against {f32['seconds_per_question']} s a question; "
                           f"selector {select['selector']}")
            table.add("cpu_precision.select_same_sets", bf16["same_sets_as_float32"], "share",
                      SAME_LABELS_TARGET if idle else None, variant=f"bfloat16, {where_sel}",
                      note=f"|S| {bf16['mean_selected']} against {f32['mean_selected']}")
            if f32["support_f1"] is not None and bf16["support_f1"] is not None:
                table.add("cpu_precision.select_f1_loss", round(f32["support_f1"] - bf16["support_f1"], 4), "F1",
                          F1_LOSS_TARGET if idle else None, variant=f"bfloat16, {where_sel}",
                          note=f"support F1 {bf16['support_f1']} against {f32['support_f1']}")
            stamp_machines(table, start, {None: select.get("machine")}, result)
    return table.rows


def merge(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Results of several runs as one: later files win per load and part; each part keeps the machine and date of
    the file it came from (one that records its own keeps those): bfloat16's speed depends on the CPU."""
    def combine(out: dict[str, Any], data: dict[str, Any]) -> None:
        mark = {"machine": data.get("machine"), "date": data.get("date")}
        loads = {load: {part: mark | v for part, v in parts.items()} for load, parts in data.get("loads", {}).items()}
        out["loads"] = harness.merged([out.get("loads", {}), loads], depth=2)

    return harness.merge_files(paths, combine)


def write_merged(args: Any) -> int:
    harness.write(args.out, merge(args.merge), rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "cpu_precision.json",
                            merge="combine these results files into --out (later files win per load and part)")
    parser.add_argument("--parts", default="label,answer")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--busy", default="0", help="comma-separated numbers of spinning processes")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "cpu_precision")
    parser.add_argument("--selector", type=Path, default=ROOT / "build" / "answers" / "hotpotqa" / "seed2" / "selector",
                        help="the select part's exported selector: a benchmarks/answers.py run's (default: %(default)s)")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows, write_merged)) is not None:
        return status
    parts = harness.name_list(args.parts, ("label", "answer", "select"), "part")
    args.work.mkdir(parents=True, exist_ok=True)
    from purecover.utils.cpu_features import cpu_bf16_native
    from purecover.utils.provenance import package_versions

    result: dict[str, Any] = harness.load(args.out) or {}
    result.update({"date": now(), "machine": machine_info(), "command": sys.argv, "versions": package_versions(),
                   "cpu_bf16_native": cpu_bf16_native(), "questions": args.questions, "recipe": str(RECIPE.relative_to(ROOT))})
    for n_busy in [int(x) for x in args.busy.split(",")]:
        mine = result.setdefault("loads", {}).setdefault(str(n_busy), {})
        if "label" in parts:
            mine["label"] = label_part(args.work, args.questions, n_busy)
            harness.write(args.out, result, rows)
        if "answer" in parts:
            mine["answer"] = answer_part(args.work, args.questions, n_busy)
            harness.write(args.out, result, rows)
        if "select" in parts:
            mine["select"] = select_part(args.work, args.selector, args.questions, n_busy)
            harness.write(args.out, result, rows)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
