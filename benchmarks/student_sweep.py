"""Which student settings learn on real questions? Train/calibration split only; the test split is never read.

    python benchmarks/student_sweep.py [--dataset hotpotqa] [--source oracle_proxy] [--configs NAME,...]
                                       [--steps 100] [--eval-every 50] [--seed 0]
                                       [--work build/real_models] [--out benchmarks/results/student_sweep.json]

The real_models benchmark's split (`real_models.splits_of`: qid hash, eval_fraction 0.4, calibration share 0.5).
SmolLM2-135M-Instruct (`purecover models fetch smollm2-135m-instruct`) is trained on the train split's labels of
`--source` (made by real_models' teacher part when missing) with the student's own loss
(`purecover.train.losses.selector_loss`) and prompt (`build_selector_prompt`). Each step draws `--batch`
training questions and shows each in a fresh seeded random candidate order (labels moved with their passages),
so no setting can learn positions. Every `--eval-every` steps, the first-token identifier logits of the
calibration questions (retrieval order) are scored against the gold passages:

* ``calib_auc``: the mean over questions of P(s_gold > s_other), 0.5 for a student that reads nothing;
* ``calib_top2_f1``: support F1 of the two highest-scoring passages, beside retrieval top-2 on the same questions.

Forward and backward run under bfloat16 autocast with float32 weights (`--no-autocast` for float32); the
speed-up depends on the CPU (docs/guides/real-models.md). The settings chosen here (highest calibration AUC) are the ones
real_models.py's student part is run with; its figures are on the test split. One row per configuration and
seed (the last evaluation), without a target (the sweep chooses, it claims nothing); the curves are in the JSON.
A run adds its configurations to the runs already in --out.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import log
from benchlib.rows import Rows, machine_info, now

ROOT = Path(__file__).resolve().parents[1]

# name -> (full fine-tuning?, learning rate, lm_weight, LoRA rank)
CONFIGS: dict[str, dict[str, Any]] = {
    "lora_r16_lr5e-4_lm1": {"full": False, "lr": 5e-4, "lm_weight": 1.0, "r": 16},
    "lora_r16_lr1e-4_lm0.1": {"full": False, "lr": 1e-4, "lm_weight": 0.1, "r": 16},
    "full_lr5e-5_lm0.1": {"full": True, "lr": 5e-5, "lm_weight": 0.1, "r": 0},
}


def calibration_figures(scores: Sequence[Sequence[float]], doc_ids: Sequence[Sequence[str]],
                        gold: Sequence[set[str]]) -> dict[str, float]:
    """Mean AUC (gold vs other passages, ties half) and top-2 support F1 of the scores; retrieval top-2 F1."""
    aucs, f1s, base = [], [], []
    for s, ids, g in zip(scores, doc_ids, gold):
        top = sorted(range(len(s)), key=lambda k: -s[k])[:2]
        f1s.append(2 * sum(ids[k] in g for k in top) / (2 + len(g)))
        base.append(2 * sum(ids[k] in g for k in range(min(2, len(ids)))) / (2 + len(g)))
        pos = [s[k] for k in range(len(s)) if ids[k] in g]
        neg = [s[k] for k in range(len(s)) if ids[k] not in g]
        if pos and neg:
            aucs.append(sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg)))
    return {"calib_auc": round(sum(aucs) / len(aucs), 4), "calib_top2_f1": round(sum(f1s) / len(f1s), 4),
            "retrieval_top2_f1": round(sum(base) / len(base), 4)}


def sweep_one(name: str, cfg: dict[str, Any], questions: Any, gold: dict[str, list[str]], args: argparse.Namespace
              ) -> dict[str, Any]:
    import torch
    from benchlib.real_runs import splits_of

    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.loading import check_model_path, load_causal_lm, load_tokenizer
    from purecover.models.selector_prompt import end_token_id
    from purecover.train.data import candidate_order, render_examples
    from purecover.train.losses import ReplyFormat, selector_loss
    from purecover.train.train_stage import first_position_logits

    torch.manual_seed(args.seed)
    model_dir = check_model_path(args.model)
    tok = load_tokenizer(model_dir, padding_side="left")
    model = load_causal_lm(model_dir, dtype="float32", device="cpu")
    if not cfg["full"]:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=cfg["r"], lora_alpha=2 * cfg["r"], lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    scheme = IdentifierScheme("letters").check(tok, max(len(q.docs) for q in questions))
    fmt = ReplyFormat(tuple(scheme.token_ids), int(scheme.separator_id), end_token_id(tok))
    split = splits_of([q.qid for q in questions])
    train = [q for q in questions if split[q.qid] == "train"]
    calib = [q for q in questions if split[q.qid] == "calib" and gold[q.qid]]
    calib_ex = render_examples(calib, tok, scheme, args.max_passage_tokens)
    calib_ids = [[d.doc_id for d in q.docs] for q in calib]
    calib_gold = [set(gold[q.qid]) for q in calib]

    def evaluate(step: int) -> dict[str, Any]:
        model.eval()
        with torch.no_grad():
            sc = first_position_logits(model, [e.input_ids for e in calib_ex], scheme.token_ids,
                                       [e.n_docs for e in calib_ex])
        model.train()
        fig = {"step": step, **calibration_figures(sc, calib_ids, calib_gold)}
        log(f"{name} step {step}: calibration AUC {fig['calib_auc']} top-2 F1 {fig['calib_top2_f1']} "
            f"(retrieval top-2 {fig['retrieval_top2_f1']})")
        return fig

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0)
    warmup = 10
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, 1 - s / args.steps))
    rng = random.Random(args.seed)
    curve = [evaluate(0)]
    losses: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        batch = [rng.choice(train) for _ in range(args.batch)]
        views = [q.permuted(candidate_order(q.qid, len(q.docs), args.seed, rng.randrange(10**9))) for q in batch]
        ex = render_examples(views, tok, scheme, args.max_passage_tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            out = selector_loss(model, [torch.tensor(e.input_ids) for e in ex], [e.selected for e in ex],
                                [e.n_docs for e in ex], fmt, lm_weight=cfg["lm_weight"], cl_weight=1.0,
                                pad_id=tok.pad_token_id or 0)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append((float(out.l_cl), float(out.l_lm)))
        if step % args.eval_every == 0 or step == args.steps:
            recent = losses[-args.eval_every:]
            fig = evaluate(step)
            fig.update({"l_cl": round(sum(a for a, _ in recent) / len(recent), 4),
                        "l_lm": round(sum(b for _, b in recent) / len(recent), 4),
                        "seconds_per_step": round((time.perf_counter() - t0) / step, 2)})
            curve.append(fig)
    return {"config": cfg, "seed": args.seed, "steps": args.steps, "batch": args.batch,
            "train_questions": len(train), "calib_questions": len(calib), "curve": curve}


def rows(result: dict) -> list[dict]:
    table = Rows(result)
    for run in result.get("runs", {}).values():
        last = run["curve"][-1]
        table.add(f"student_sweep.calib_auc.{run['name']}", last["calib_auc"], "AUC", None,
                  variant=result.get("dataset"), seed=run["seed"],
                  note=f"{run['steps']} steps x {run['batch']}; calibration top-2 F1 {last['calib_top2_f1']} vs "
                       f"retrieval top-2 {last['retrieval_top2_f1']}; {last.get('seconds_per_step')} s/step; "
                       f"start AUC {run['curve'][0]['calib_auc']}")
    return table.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "student_sweep.json")
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--source", default="oracle_proxy")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--max-passage-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-autocast", dest="autocast", action="store_false")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=str(ROOT / "build" / "real_models"))
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    from benchlib.real_runs import label_source, read_jsonl

    from purecover.train.data import read_labelled_questions
    from purecover.utils.provenance import package_versions

    run = Path(args.work) / args.dataset / f"teacher-{args.source}"
    if not (run / "labels.jsonl").is_file():
        label_source(args.dataset, args.source, Path(args.work), [], 0)
    questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
    gold = {c["qid"]: c["gold_doc_ids"] for c in read_jsonl(run / "candidates.jsonl")}
    result: dict[str, Any] = harness.load(args.out) or {}  # earlier configurations' runs are kept
    result.update({"date": now(), "machine": machine_info(), "command": sys.argv, "versions": package_versions(),
                   "dataset": args.dataset, "source": args.source, "model": args.model,
                   "autocast_bf16": args.autocast, "max_passage_tokens": args.max_passage_tokens,
                   "threads": args.threads})
    for name in args.configs.split(","):
        res = sweep_one(name, CONFIGS[name], questions, gold, args)
        result.setdefault("runs", {})[f"{name}-seed{args.seed}"] = {"name": name, **res}
        harness.write(args.out, result, rows)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
