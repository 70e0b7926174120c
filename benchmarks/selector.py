"""Selector latency: one forward pass vs generating identifiers, JSON output.

    python benchmarks/selector.py [--out benchmarks/results/selector.json] [--questions 12] [--threads 1]

One tiny random Qwen2 (4 layers, hidden 256, 4 heads / 2 kv heads, intermediate 1024) with the
real Qwen2 tokenizer (its 151k vocabulary, so the LM head costs what it costs in a real Qwen2
per generated token), saved as a selector directory and loaded with
`Selector.from_pretrained(..., backend="hf")`. Each question has K1 = 20 candidates of
~60 tokens (HotpotQA sample paragraphs of ≥ 60 tokens, cut to 60 by the prompt builder; the
bundled demo set when the sample folder is absent). Batch size 1, greedy, same model and the
same prompt token ids for every method; per question the three methods run back to back, after
`--warmup` untimed questions; medians over `--questions` questions:

(a) one pass: the selector's forward (left-padded batch of one, ``logits_to_keep=1``, logits of
    all 20 identifiers); the full `Selector.select` call (prompt rendering and tokenisation
    included) is reported next to it;
(b) generate 5: ``model.generate`` of exactly 10 new tokens (min_new_tokens = max_new_tokens = 10),
    the length of the |S| = 5 reply ``A\\nB\\nC\\nD\\nE<end>``;
(c) full ranking: exactly 40 new tokens, a listwise ranking of all 20 identifiers with
    separators and the end token, as generative listwise rerankers produce.

Target: full ranking ≥ 3× slower than the one pass. Also checked: the one-pass identifier
logits equal the first-step logits of `generate` (max abs diff). Rows (see rows.py): the one-pass
latency and both slow-downs.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from benchlib import harness
from benchlib.rows import Rows, at_least, machine_info, now

import purecover
from purecover.data.samples import SAMPLE_FILES, sample_data_dir
from purecover.demo.tiny import build_tiny_model
from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector import Selector, hf_identifier_logits
from purecover.models.selector_prompt import build_selector_prompt, prompt_template
from purecover.utils.io import atomic_write_json
from purecover.utils.provenance import package_versions

K1 = 20
PASSAGE_TOKENS = 60
GEN5_TOKENS = 10  # A \n B \n C \n D \n E <end>
FULL_TOKENS = 2 * K1  # 20 identifiers, 19 separators, <end>
TARGET_RATIO = 3.0
MODEL = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 1024}


def _questions(tokenizer: Any, n: int) -> tuple[list[tuple[str, list[dict[str, str]]]], str]:
    """`n` questions with K1 candidates of ≥ PASSAGE_TOKENS tokens each (own paragraphs first)."""
    sample = sample_data_dir()
    if sample is not None:
        source = str(sample / SAMPLE_FILES["hotpotqa"])
    else:
        source = str(Path(purecover.__file__).parent / "data" / "demo" / "demo_hotpot.json")
    records = json.loads(Path(source).read_text(encoding="utf-8"))

    def long_enough(title: str, text: str) -> bool:
        return len(tokenizer(f"{title}\n{text}", add_special_tokens=False)["input_ids"]) >= PASSAGE_TOKENS

    per_question = []
    for rec in records:
        paras = [{"title": t, "text": "".join(s).strip()} for t, s in rec["context"]]
        per_question.append((rec["question"], [p for p in paras if long_enough(p["title"], p["text"])]))
    pool = [p for _, ps in per_question for p in ps]
    if len(pool) < K1:
        raise RuntimeError(f"{source}: only {len(pool)} paragraphs of >= {PASSAGE_TOKENS} tokens")
    out = []
    for i, (question, own) in enumerate(per_question[:n]):
        docs = list(own[:K1])
        j = (i + 1) * 7
        while len(docs) < K1:  # fill with other questions' paragraphs, deterministically
            cand = pool[j % len(pool)]
            j += 1
            if cand not in docs:
                docs.append(cand)
        out.append((question, docs))
    if len(out) < n:
        raise RuntimeError(f"{source}: only {len(out)} questions")
    return out, source


def _selector_dir(root: Path, tokenizer_dir: Path, seed: int) -> Path:
    model_dir = build_tiny_model(root / "selector", tokenizer_dir, "qwen2", seed=seed, **MODEL)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    scheme = IdentifierScheme("letters").check(tok, K1)
    config = {"base_model": "tiny-random-qwen2", "identifiers": scheme.to_dict(), "prompt_template": prompt_template(),
              "k1": K1, "tau3": 0.0, "k_max": 5, "min_select": 1, "purecover_version": purecover.__version__,
              "max_passage_tokens": PASSAGE_TOKENS}
    atomic_write_json(model_dir / "selector_config.json", config)
    return model_dir


def _time(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(1e3 * s for s in seconds)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1],
            "mean_ms": statistics.fmean(ms)}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/selector.json")
    parser.add_argument("--questions", type=int, default=12, help="timed questions (>= 10)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    if args.questions < 10:
        parser.error("--questions must be >= 10")
    sample = sample_data_dir()
    tokenizer_dir = (sample / "qwen2_tokenizer") if sample is not None else None
    if tokenizer_dir is None or not tokenizer_dir.is_dir():
        raise SystemExit("the real Qwen2 tokenizer is needed: set PURECOVER_SAMPLE_DATA to the sample data folder "
                         "(with qwen2_tokenizer/)")
    load_at_start = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="purecover-bench-selector-") as tmp:
        sel_dir = _selector_dir(Path(tmp), tokenizer_dir, args.seed)
        selector = Selector.from_pretrained(sel_dir, device="cpu", dtype="float32", batch_size=1)
        model, tok = selector.backend.model, selector.tokenizer
        n_params = sum(p.numel() for p in model.parameters())
        questions, source = _questions(tok, args.warmup + args.questions)
        prompts = [build_selector_prompt(tok, q, d, selector.scheme, PASSAGE_TOKENS).input_ids for q, d in questions]
        ident = selector.scheme.token_ids[:K1]
        pad = tok.pad_token_id

        def one_pass(ids: list[int]) -> list[list[float]]:
            return hf_identifier_logits(model, [ids], [ident], batch_size=1, pad_id=pad)

        @torch.no_grad()
        def generate(ids: list[int], n_new: int, **extra: Any) -> Any:
            x = torch.tensor([ids])
            return model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n_new,
                                  min_new_tokens=n_new, do_sample=False, num_beams=1, pad_token_id=pad,
                                  temperature=None, top_p=None, top_k=None, **extra)

        # Correctness: the one-pass logits are the first generated position's logits; lengths are forced.
        check = generate(prompts[0], GEN5_TOKENS, output_logits=True, return_dict_in_generate=True)
        first = check.logits[0][0, ident].float()
        diff = float((first - torch.tensor(one_pass(prompts[0])[0])).abs().max())
        lengths = {GEN5_TOKENS: check.sequences.shape[1] - len(prompts[0]),
                   FULL_TOKENS: generate(prompts[0], FULL_TOKENS).shape[1] - len(prompts[0])}
        if lengths != {GEN5_TOKENS: GEN5_TOKENS, FULL_TOKENS: FULL_TOKENS}:
            raise RuntimeError(f"generation lengths not forced: {lengths}")

        times: dict[str, list[float]] = {"one_pass": [], "selector_select": [], "generate5": [], "full_ranking": []}
        for i, ((question, docs), ids) in enumerate(zip(questions, prompts)):
            sample_times = {
                "one_pass": _time(lambda ids=ids: one_pass(ids)),
                "selector_select": _time(lambda q=question, d=docs: selector.select(q, d)),
                "generate5": _time(lambda ids=ids: generate(ids, GEN5_TOKENS)),
                "full_ranking": _time(lambda ids=ids: generate(ids, FULL_TOKENS)),
            }
            if i >= args.warmup:
                for k, v in sample_times.items():
                    times[k].append(v)
            print(f"[{'warmup' if i < args.warmup else 'timed'} {i}] prompt {len(ids)} tokens: "
                  + "  ".join(f"{k} {1e3 * v:.1f} ms" for k, v in sample_times.items()))

    timed_prompts = prompts[args.warmup :]
    results = {k: _summary(v) for k, v in times.items()}
    one = results["one_pass"]["median_ms"]
    ratio5 = results["generate5"]["median_ms"] / one
    ratio_full = results["full_ranking"]["median_ms"] / one
    result = {
        "benchmark": "selector",
        "date": now(),
        "seed": args.seed,
        "setting": {
            "model": {"arch": "qwen2 (random weights)", **MODEL, "vocab_size": model.config.vocab_size,
                      "parameters": n_params, "dtype": "float32", "attn_implementation": "sdpa"},
            "tokenizer": "Qwen2 (real)",
            "k1": K1, "passage_tokens": PASSAGE_TOKENS, "questions_source": source,
            "questions": args.questions, "warmup": args.warmup, "batch_size": 1,
            "prompt_tokens_median": statistics.median(len(p) for p in timed_prompts),
            "prompt_tokens_min": min(len(p) for p in timed_prompts),
            "prompt_tokens_max": max(len(p) for p in timed_prompts),
            "generate5_new_tokens": GEN5_TOKENS, "full_ranking_new_tokens": FULL_TOKENS,
            "device": "cpu", "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "processor": platform.processor() or platform.machine(),
        },
        "latency_per_question": results,
        "ratios": {"generate5_over_one_pass": ratio5, "full_ranking_over_one_pass": ratio_full,
                   "selector_select_over_one_pass": results["selector_select"]["median_ms"] / one},
        "target": {"full_ranking_over_one_pass_min": TARGET_RATIO, "pass": ratio_full >= TARGET_RATIO},
        "checks": {"one_pass_vs_generate_first_logits_max_abs_diff": diff, "forced_lengths": True},
        "total_seconds": time.perf_counter() - t_start,
        "machine": machine_info(),
        "versions": package_versions(),
    }
    harness.write(args.out, result, rows)
    print(f"one pass {one:.1f} ms | Selector.select {results['selector_select']['median_ms']:.1f} ms | "
          f"generate 5 {results['generate5']['median_ms']:.1f} ms ({ratio5:.2f}x) | "
          f"full ranking {results['full_ranking']['median_ms']:.1f} ms ({ratio_full:.2f}x) | "
          f"target full ranking >= {TARGET_RATIO}x: {'PASS' if result['target']['pass'] else 'FAIL'} | "
          f"logit diff {diff:.2e}")
    print(f"wrote {args.out} ({result['total_seconds']:.1f}s)")
    return 0


def rows(result: dict) -> list[dict]:
    """The summary rows: one-pass latency, and generating 5 identifiers / the full ranking against it."""
    table = Rows(result)
    lat, setting = result["latency_per_question"], result["setting"]
    where = f"K1={setting['k1']}, median over {setting['questions']} questions"
    table.add("selector.one_pass_latency", lat["one_pass"]["median_ms"], "ms",
              note=f"{where}, ~{setting['prompt_tokens_median']:,.0f}-token prompt")
    table.add("selector.generate5_over_one_pass", result["ratios"]["generate5_over_one_pass"], "x",
              note=f"{lat['generate5']['median_ms']:.1f} ms, {setting['generate5_new_tokens']} new tokens")
    table.add("selector.full_ranking_over_one_pass", result["ratios"]["full_ranking_over_one_pass"], "x",
              at_least(TARGET_RATIO),
              note=f"{lat['full_ranking']['median_ms']:.1f} ms, {setting['full_ranking_new_tokens']} new tokens")
    return table.rows


if __name__ == "__main__":
    raise SystemExit(main())
