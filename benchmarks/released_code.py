"""The paper text's labelling rule against the authors' released code's, switch by switch, measured.

    python benchmarks/released_code.py [--datasets hotpotqa,2wiki,musique] [--work build/real_models]
                                       [--out benchmarks/results/released_code.json]
    python benchmarks/released_code.py --student 0,1,2     # the students; merged into --out, seed by seed

Labels of `real_models.py`'s label runs are re-solved from their stored scores (`purecover.teacher.tune`'s
machinery, so a row computed for a run's own setting reproduces its labels): the oracle proxy (oracle steps +
all-MiniLM-L6-v2 cosines) on the HotpotQA, 2Wiki and MuSiQue samples, and on HotpotQA also the real models'
attention (SmolLM2-135M through its chosen layers, Gemma-3-270M through its full-attention layers; test split
only, as real_models labels them). A run directory that is missing is labelled first (`real_models.label_source`).
Variants, each over the run's own recipe (docs/paper/released-code.md):

  paper            the run's own setting (Eq. 8): the reference
  objective        teacher.objective: released_code alone (its 2 x steps cap included; budget and λ as the run)
  stopping         the code's stopping alone: budget 20, min_select 0, paper objective
  lam              λ 0.3 alone (the code's --lbd)
  temperature      the code's W temperature alone: absolute scale, τ2 1e-5 (attention sources only)
  released_code    all of them: the released-code recipe's teacher settings

Figures on the test split (questions with gold passages; no setting is chosen here, and no figure has a
target: the comparison is the result): label P/R/F1 against the gold passages, mean |S|, the share of questions whose set equals the paper form's. And on 1,000 synthetic
coverage matrices (20 documents x 2-5 steps, column softmax as the code's calibration makes them, e a softmax
too) at λ 0.1 / 0.3 / 0.5: how often the two greedy rules pick the same set, and their mean sizes.

``--student SEEDS`` (HotpotQA; about 25 min a seed on 2 cores): the LoRA student of `real_models.py`
(SmolLM2-135M-Instruct, same training settings) trained on the released-code form end to end, the oracle proxy
labelled with the released recipe's teacher settings and trained with its student settings (`STUDENT_RELEASED`:
top-5 target by gain, reply in that order, 0.01 · SFT + BPR on 5 negatives sampled from the last 10, exactly 5
at inference), scored like `real_models.py`'s students on the test split; the paper-form students of the same
seeds are read from ``benchmarks/results/real_models.json`` (same sample, split and model). Each seed is merged
into --out as it finishes, so seeds can be run in separate sessions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import harness
from benchlib.real_runs import label_source, log, read_jsonl, recipe_for, splits_of
from benchlib.rows import Rows, machine_info, now

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"hotpotqa": ("oracle_proxy", "smollm2_attention_layers", "gemma_attention", "smollm2_attention",
                        "smollm2_plain", "smollm2_in_context", "smollm2_plain_in_context"),
           "2wiki": ("oracle_proxy",), "musique": ("oracle_proxy",)}
IN_CONTEXT_QUESTIONS = 20  # the code's 100 would be 2,000 capture passes a run; 20 are 400 (see the docs page)
# The released code's attention-side switches on SmolLM2 (all 30 layers, as the code averages; oracle steps, test
# split): each alone over `real_models.py`'s smollm2_attention (chat layout, fixed calibration), then both.
ATTENTION_SOURCES: dict[str, tuple[list[str], str]] = {
    "smollm2_plain": (["teacher.attention_layout=plain"], "the plain layout's separate pass alone"),
    "smollm2_in_context": (["teacher.calibration_procedure=in_context",
                            f"teacher.calibration_questions={IN_CONTEXT_QUESTIONS}"],
                           "the in-context calibration alone"),
    "smollm2_plain_in_context": (["teacher.attention_layout=plain", "teacher.calibration_procedure=in_context",
                                  f"teacher.calibration_questions={IN_CONTEXT_QUESTIONS}"],
                                 "the plain layout and the in-context calibration"),
}


def register_attention_sources() -> None:
    """`ATTENTION_SOURCES` as `real_models.py` sources over its smollm2_attention."""
    from benchlib.real_runs import SOURCES as RM_SOURCES

    base = RM_SOURCES["smollm2_attention"]
    for name, (overrides, what) in ATTENTION_SOURCES.items():
        RM_SOURCES[name] = {**base, "overrides": [*base["overrides"], "teacher.layers=all", *overrides],
                            "what": f"SmolLM2-135M-Instruct's attention, all layers, oracle steps: {what}"}
RELEASED = ["teacher.objective=released_code"]
VARIANTS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "paper": ([], {}),
    "objective": (RELEASED, {}),
    "stopping": ([], {"budget": 20, "min_select": 0}),
    "lam": ([], {"lam": 0.3}),
    "temperature": ([], {"normalize": "absolute", "tau2": 1e-5}),
    "released_code": (RELEASED, {"budget": 20, "min_select": 0, "tau_stop": 0.0, "lam": 0.3,
                                 "normalize": "absolute", "tau2": 1e-5}),
}


STUDENT_SOURCE = "oracle_proxy_released_code"
STUDENT_RELEASED = ["student.target=top_k", "student.target_k=5", "student.lm_weight=0.01",
                    "student.reply_order=target", "student.negatives=sampled", "student.negative_sample=5",
                    "student.negative_pool=10", "student.candidate_shuffles=1", "student.k_max=5",
                    "student.min_select=5"]
STUDENT_TAG = "-loss"  # the run directory of these settings (an earlier one trained the paper loss on top-5)


def register_student_source() -> None:
    """The oracle proxy labelled with the released recipe's teacher settings, as a `real_models.py` source."""
    from benchlib.real_runs import SOURCES as RM_SOURCES

    teacher = dict(VARIANTS["released_code"][1])
    teacher.pop("normalize")
    teacher.pop("tau2")  # the code's τ is an attention temperature: the oracle proxy keeps its own
    RM_SOURCES[STUDENT_SOURCE] = {
        "overrides": [*RM_SOURCES["oracle_proxy"]["overrides"], *RELEASED,
                      *(f"teacher.{k}={v}" for k, v in teacher.items())],
        "what": "oracle steps + MiniLM cosines, labelled with the released code's greedy"}


def student_figures(seeds: list[int], work: Path, test: list[str]) -> dict[str, Any]:
    from benchlib.real_runs import label_source, student_part

    register_student_source()
    label_source("hotpotqa", STUDENT_SOURCE, work, test, own_steps=0)
    return {str(seed): student_part("hotpotqa", STUDENT_SOURCE, seed, work, STUDENT_RELEASED, tag=STUDENT_TAG)
            for seed in seeds}


def paper_students(path: Path = ROOT / "benchmarks" / "results" / "real_models.json") -> dict[str, Any]:
    """The paper-form students of `real_models.py` (oracle proxy, HotpotQA), by seed; {} without the file."""
    data = harness.load(path) or {}
    return data.get("datasets", {}).get("hotpotqa", {}).get("student", {}).get("oracle_proxy", {})


def variant_figures(dataset: str, source: str, work: Path, test: list[str]) -> dict[str, Any]:
    from benchlib.real_runs import SOURCES as RM_SOURCES

    from purecover.teacher.defaults import resolve_params
    from purecover.teacher.selection import solve
    from purecover.teacher.tune import evaluate_setting, labels_bias, setting_estimates
    from purecover.teacher.tune import load_questions as tune_questions

    register_attention_sources()
    run = label_source(dataset, source, work, test, own_steps=0)
    questions = {q.qid: q for q in tune_questions(run / "labels.jsonl", run / "candidates.jsonl")}
    tq = [questions[q] for q in test if q in questions and questions[q].gold]
    out: dict[str, Any] = {"questions": len(tq)}
    reference: list[list[int]] | None = None
    for name, (overrides, changes) in VARIANTS.items():
        recipe = recipe_for(dataset, run, [*RM_SOURCES[source]["overrides"], *overrides])
        base = resolve_params(recipe.teacher)
        if name == "temperature" and base.w_source != "attention":
            continue
        if name == "released_code" and base.w_source != "attention":  # the code's τ is an attention temperature
            changes = {k: v for k, v in changes.items() if k not in ("normalize", "tau2")}
        params = resolve_params(recipe.teacher, **changes)
        bias = labels_bias(recipe, run / "labels.jsonl") if params.w_source == "attention" else None
        pairs = setting_estimates(tq, params, bias)
        fig = dict(evaluate_setting(tq, params, pairs=pairs))
        result = solve(pairs, params)
        sets = [sorted(result.order(b)) for b in range(len(tq))]
        if reference is None:
            reference = sets
        fig["same_set_as_paper"] = round(float(np.mean([a == b for a, b in zip(sets, reference)])), 4)
        fig["settings"] = {"objective": params.objective, "budget": params.budget, "min_select": params.min_select,
                           "lam": params.lam, "normalize": params.normalize, "tau_w": params.tau_w}
        out[name] = fig
        log(f"{dataset} {source} {name}: F1 {fig['f1']} P {fig['precision']} |S| {fig['mean_size']} "
            f"same set {fig['same_set_as_paper']}")
    return out


def synthetic(n: int = 1000, seed: int = 0) -> dict[str, Any]:
    from purecover.teacher.solvers import greedy_select, released_code_greedy

    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        steps = int(rng.integers(2, 6))
        logits = rng.normal(size=(20, steps)) * rng.uniform(0.5, 4)
        W = np.exp(logits) / np.exp(logits).sum(axis=0, keepdims=True)
        z = rng.normal(size=steps)
        cases.append((np.exp(z) / np.exp(z).sum(), W))
    out = {}
    for lam in (0.1, 0.3, 0.5):
        same, paper_size, code_size = 0, [], []
        for e, W in cases:
            a = greedy_select(e, W, lam, 5, min_select=1).order()
            b = released_code_greedy(W, lam, 20).order()
            same += sorted(a) == sorted(b)
            paper_size.append(len(a))
            code_size.append(len(b))
        out[str(lam)] = {"same_set": round(same / n, 4), "paper_mean_size": round(float(np.mean(paper_size)), 3),
                         "released_mean_size": round(float(np.mean(code_size)), 3)}
        log(f"synthetic λ {lam}: same set {out[str(lam)]['same_set']}, |S| paper "
            f"{out[str(lam)]['paper_mean_size']} vs released {out[str(lam)]['released_mean_size']}")
    return {"matrices": n, "seed": seed, "by_lambda": out}


def rows(result: dict) -> list[dict]:
    table = Rows(result)
    for dataset, by_source in result["datasets"].items():
        for source, figs in by_source.items():
            if "error" in figs:
                continue
            for name in VARIANTS:
                if name not in figs:
                    continue
                f = figs[name]
                table.add(f"released_code.label_f1.{source}.{name}", f["f1"], "F1", variant=dataset,
                          note=f"P {f['precision']}, |S| {f['mean_size']}, same set as paper {f['same_set_as_paper']}, "
                               f"{figs['questions']} test questions")
    for form, by_seed in (("released_code", result.get("student", {})), ("paper", paper_students())):
        seeds = sorted(by_seed, key=int)
        f1 = [by_seed[s]["orders"]["retrieval"]["f1"] for s in seeds]
        if not f1 or (form == "paper" and not result.get("student")):
            continue
        top5 = by_seed[seeds[0]]["orders"]["retrieval"]["retrieval_top5_f1"]
        shuffled = [by_seed[s]["orders"]["shuffled"]["f1"] for s in seeds]
        table.add(f"released_code.student_test_f1.{form}", round(float(np.mean(f1)), 4), "F1", variant="hotpotqa",
                  note=f"seeds {','.join(seeds)}: worst {min(f1)}, shuffled order mean "
                       f"{round(float(np.mean(shuffled)), 4)}; retrieval top-5 {top5}; |S| "
                       f"{by_seed[seeds[0]]['orders']['retrieval']['mean_size']}")
    for lam, f in result["synthetic"]["by_lambda"].items():
        table.add("released_code.synthetic_same_set", f["same_set"], "share", variant=f"λ {lam}",
                  note=f"|S| paper {f['paper_mean_size']} vs released {f['released_mean_size']}; "
                       f"{result['synthetic']['matrices']} matrices")
    return table.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/released_code.json")
    parser.add_argument("--datasets", default="hotpotqa,2wiki,musique")
    parser.add_argument("--work", default="build/real_models")
    parser.add_argument("--student", default=None, metavar="SEEDS",
                        help="train and score the released-code students of these seeds (comma-separated) and merge "
                             "them into --out; the label part is not rerun")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    from purecover.data.data_stage import run_data_stage

    work = Path(args.work)
    if args.student is not None:
        if not args.out.is_file():
            raise SystemExit(f"{args.out} does not exist: run the label part first (without --student)")
        probe = recipe_for("hotpotqa", work / "hotpotqa" / "split-probe")
        run_data_stage(probe, show_progress=False)
        split = splits_of([c["qid"] for c in read_jsonl(probe.run_path / "candidates.jsonl")])
        test = sorted(q for q, s in split.items() if s == "test")
        for seed in (int(s) for s in args.student.split(",")):
            figs = student_figures([seed], work, test)
            result = harness.load(args.out)  # reread: another part may have written meanwhile
            result.setdefault("student", {}).update(figs)
            result.setdefault("student_commands", []).append(" ".join(sys.argv))
            harness.write(args.out, result, rows)
        return 0
    datasets: dict[str, Any] = {}
    for dataset in args.datasets.split(","):
        probe = recipe_for(dataset, work / dataset / "split-probe")
        run_data_stage(probe, show_progress=False)
        split = splits_of([c["qid"] for c in read_jsonl(probe.run_path / "candidates.jsonl")])
        test = sorted(q for q, s in split.items() if s == "test")
        datasets[dataset] = {}
        for source in SOURCES[dataset]:
            try:
                datasets[dataset][source] = variant_figures(dataset, source, work, test)
            except ValueError as exc:  # e.g. labels made with an earlier bias file: say so, measure the rest
                log(f"{dataset} {source}: not measured: {exc}")
                datasets[dataset][source] = {"error": str(exc)}
    result = {"date": now(), "machine": machine_info(), "command": " ".join(sys.argv), "datasets": datasets,
              "synthetic": synthetic()}
    old = harness.load(args.out)
    if old is not None:  # keep the students measured so far
        for key in ("student", "student_commands"):
            if key in old:
                result[key] = old[key]
        kept = {d: figs for d, figs in old.get("datasets", {}).items() if d not in datasets}
        if kept:  # datasets not measured this time keep their figures and the command that made them
            result["datasets"] = {**kept, **datasets}
            result["earlier_commands"] = [*old.get("earlier_commands", []), old.get("command")]
    harness.write(args.out, result, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
