"""Permutation-invariant loss vs one ordering vs naive enumeration: time per training step (JSON).

    python benchmarks/perm_loss.py [--out benchmarks/results/perm_loss.json] [--repeats 7] [--prompt-len 1024]

Tiny Qwen2 (4 layers, hidden 256, 8 heads, 2 key/value heads, intermediate 512, vocabulary 2048,
sdpa attention, float32, all weights trainable, train mode), one prompt of `--prompt-len` random
token ids, reply format as in tests/train/test_losses.py (identifiers = ids 10..19, separator 5,
end 6; K1 = 10). For |S| = 1..5 one training step (zero grads, forward, backward) of:

  exact        purecover.train.losses.selector_loss, m_exact = 5: all |S|! orderings scored without
               gradient on the prompt's key/value cache, then one training forward/backward on
               prompt + best reply (L_CL + L_LM)
  score_order  selector_loss with m_exact = 0: the ordering by descending first-position logits
               (still one no-grad scoring forward of the prompt), then the same training step
  one_order    the reference: a single forward/backward on prompt + reply in one fixed ordering,
               plain mean cross-entropy over the reply tokens (logits kept at the reply positions
               only, as in selector_loss), no scoring
  naive        one full forward with gradient per ordering (|S|! forwards), min over their losses,
               backward through the min

Time: median of `--repeats` steps after one warm-up; exact, score_order, one_order and the probes
are interleaved within each repeat so that load changes on the machine hit them alike; naive runs
after them (its |S|! retained graphs churn memory and would disturb the others). Naive keeps one
autograd graph per ordering (about 90 MB each here) and its backward runs through every graph
(the min passes zero gradients to the others), so at |S| = 5 (120 orderings, ~10 GB, minutes per
step) it is measured only with `--naive-max 5`; by default its |S| = 5 time is extrapolated from
|S| = 4 per ordering and flagged ``"estimated": true``. `--threads` (default 1) fixes the torch
thread count, which keeps the ratios stable on a shared machine. Also reported: the no-grad scoring
part of `exact` alone (best_ordering) and the no-grad prompt forward it starts with, so the ratio
can be split into "scoring" and "training step". Target (issue 13): exact <= 1.25x one_order at
|S| = 5, i.e. scoring every ordering of the selected set costs at most a quarter of a training step.
Rows (see rows.py): exact / one_order per |S|, the target at |S| = 5.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from benchlib import harness
from benchlib.rows import Rows, at_most, machine_info, now

from purecover.demo.tiny import tiny_causal_lm
from purecover.train.losses import ReplyFormat, best_ordering, selector_loss
from purecover.utils.provenance import package_versions

VOCAB = 2048
FMT = ReplyFormat(identifier_ids=tuple(range(10, 20)), separator_id=5, end_id=6)
N_DOCS = 10
SIZES = (1, 2, 3, 4, 5)
TARGET_RATIO = 1.25
TARGET_SIZE = 5
SUBSETS = {1: [3], 2: [7, 1], 3: [2, 8, 5], 4: [0, 6, 3, 9], 5: [4, 1, 8, 2, 6]}


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    model = tiny_causal_lm("qwen2", VOCAB, hidden_size=256, intermediate_size=512, num_layers=4, num_heads=8,
                           num_kv_heads=2, max_position_embeddings=8192, seed=0)
    model.set_attn_implementation("sdpa")
    if args.lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    return model.train()


def one_order_loss(model: torch.nn.Module, prompt: torch.Tensor, order: list[int]) -> torch.Tensor:
    """Mean NLL of the reply in `order` after `prompt` (one forward with gradient)."""
    target = torch.tensor(FMT.target(order))
    ids = torch.cat([prompt, target[:-1]])[None]
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=target.shape[0]).logits[0].float()
    return F.cross_entropy(logits, target)


def make_steps(model: torch.nn.Module, prompt: torch.Tensor, selected: list[int]) -> dict[str, Callable[[], None]]:
    def exact() -> None:
        selector_loss(model, [prompt], [selected], [N_DOCS], FMT, m_exact=5).loss.backward()

    def score_order() -> None:
        selector_loss(model, [prompt], [selected], [N_DOCS], FMT, m_exact=0).loss.backward()

    def one_order() -> None:
        one_order_loss(model, prompt, selected).backward()

    def naive() -> None:
        losses = [one_order_loss(model, prompt, list(o)) for o in itertools.permutations(selected)]
        torch.stack(losses).min().backward()

    return {"exact": exact, "score_order": score_order, "one_order": one_order, "naive": naive}


def make_probes(model: torch.nn.Module, prompt: torch.Tensor, selected: list[int]) -> dict[str, Callable[[], None]]:
    """The no-grad parts of `exact`, timed alone (eval mode, as selector_loss scores)."""

    def scoring() -> None:
        model.eval()
        try:
            best_ordering(model, prompt, selected, N_DOCS, FMT, m_exact=5)
        finally:
            model.train()

    def prompt_forward() -> None:
        model.eval()
        try:
            with torch.no_grad():
                model(input_ids=prompt[None], use_cache=True, logits_to_keep=1)
        finally:
            model.train()

    return {"scoring": scoring, "scoring_prompt_forward": prompt_forward}


def time_interleaved(fns: dict[str, Callable[[], None]], model: torch.nn.Module, repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for rep in range(repeats + 1):  # the first round is a warm-up
        for name, fn in fns.items():
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if rep:
                times[name].append(elapsed)
    model.zero_grad(set_to_none=True)
    return times


def summarize(samples: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(samples), 5), "min_s": round(min(samples), 5),
            "max_s": round(max(samples), 5), "n": len(samples)}


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(0)
    model = build_model(args)
    prompt = torch.randint(30, VOCAB, (args.prompt_len,))
    results: dict[str, dict] = {}
    for size in SIZES:
        selected = SUBSETS[size]
        fns = make_steps(model, prompt, selected)
        naive = fns.pop("naive")
        fns.update(make_probes(model, prompt, selected))
        started = time.perf_counter()
        times = time_interleaved(fns, model, args.repeats)
        row: dict = {name: summarize(t) for name, t in times.items()}
        n_orders = len(list(itertools.permutations(selected)))
        if size <= args.naive_max:
            row["naive"] = summarize(time_interleaved({"naive": naive}, model, args.repeats)["naive"])
            row["naive"]["estimated"] = False
            naive_per_order = row["naive"]["median_s"] / n_orders
        else:  # |S|! graphs: extrapolated from the largest measured size, per ordering
            row["naive"] = {"median_s": round(naive_per_order * n_orders, 3), "estimated": True,
                            "from_size": args.naive_max}
        ref = row["one_order"]["median_s"]
        row["orderings"] = n_orders
        row["ratio_exact_vs_one_order"] = round(row["exact"]["median_s"] / ref, 3)
        row["ratio_score_order_vs_one_order"] = round(row["score_order"]["median_s"] / ref, 3)
        row["ratio_naive_vs_one_order"] = round(row["naive"]["median_s"] / ref, 3)
        row["ratio_naive_vs_exact"] = round(row["naive"]["median_s"] / row["exact"]["median_s"], 3)
        row["scoring_share_of_exact"] = round(row["scoring"]["median_s"] / row["exact"]["median_s"], 3)
        results[str(size)] = row
        print(f"|S|={size}: exact {row['exact']['median_s']:.4f}s  score_order {row['score_order']['median_s']:.4f}s  "
              f"one_order {ref:.4f}s  naive {row['naive']['median_s']:.4f}s{'*' if row['naive']['estimated'] else ''}  "
              f"exact/one {row['ratio_exact_vs_one_order']:.2f}  "
              f"scoring {row['scoring']['median_s']:.4f}s  ({time.perf_counter() - started:.0f}s)", flush=True)
    ratio5 = results[str(TARGET_SIZE)]["ratio_exact_vs_one_order"]
    return {
        "benchmark": "perm_loss",
        "date": now(),
        "setting": {
            "model": "qwen2 (random init): 4 layers, hidden 256, 8 heads, 2 kv heads, intermediate 512, vocab 2048",
            "attention": "sdpa", "dtype": "float32", "trainable": "LoRA r=16 all-linear" if args.lora else "all weights",
            "prompt_tokens": args.prompt_len, "k1": N_DOCS, "subsets": {str(k): v for k, v in SUBSETS.items()},
            "repeats": args.repeats, "warmup": 1, "naive_measured_up_to": args.naive_max,
            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "machine": platform.machine(),
            "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "results": results,
        "target": {"metric": f"exact / one_order at |S| = {TARGET_SIZE}", "max_ratio": TARGET_RATIO, "value": ratio5,
                   "pass": ratio5 <= TARGET_RATIO},
        "machine": machine_info(),
        "versions": package_versions(),
    }


def rows(result: dict) -> list[dict]:
    """The summary rows: exact / one fixed ordering time per step for each |S| (the target at TARGET_SIZE)."""
    table = Rows(result)
    for size, r in sorted(result["results"].items(), key=lambda kv: int(kv[0])):
        naive = f"; naive {r['ratio_naive_vs_one_order']:.1f}×{' estimated' if r['naive'].get('estimated') else ''}"
        table.add("perm_loss.exact_over_one_order_step_time", r["ratio_exact_vs_one_order"], "x",
                  at_most(TARGET_RATIO) if int(size) == TARGET_SIZE else None, variant=f"|S|={size}",
                  note=f"{r['exact']['median_s']:.3f} s vs {r['one_order']['median_s']:.3f} s{naive}")
    return table.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/perm_loss.json")
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per method (>= 5), after one warm-up")
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--naive-max", type=int, default=4, choices=SIZES,
                        help="largest |S| where naive enumeration is measured (larger: extrapolated)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters instead of all weights")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    if args.repeats < 5:
        parser.error("--repeats must be at least 5")
    if args.threads:
        torch.set_num_threads(args.threads)
    report = harness.write(args.out, run(args), rows)
    print(f"target exact/one_order at |S|={TARGET_SIZE}: {report['target']['value']} (<= {TARGET_RATIO}: "
          f"{'pass' if report['target']['pass'] else 'FAIL'}) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
