"""Attention capture vs eager `output_attentions` vs a plain sdpa forward (JSON output).

    python benchmarks/attention_capture.py [--lengths 1024 2048 4096] [--repeats 3] [--out ...]

Tiny Qwen2 config (4 layers, 8 heads, 2 key/value heads, hidden 256), one sequence per length
with 20 document segments, 5 steps and an answer: the segments whose attention the teacher
averages (`purecover.teacher.capture`). Each measurement runs in a
fresh process: peak memory is the rise of the resident set (VmHWM, reset through
/proc/self/clear_refs) above what the process held just before the call; time is the median of
`repeats` calls. Per length the JSON holds one entry of ``lengths``. Targets: capture peak <= 1/10
of eager at the longest length (4k tokens); capture time <= 1.5x the plain sdpa forward at every
length; max abs difference of capture vs eager segment averages <= 1e-6. Rows: see rows.py.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

from benchlib import harness
from benchlib.rows import Rows, at_most, machine_info, now

TIME_OVER_SDPA_MAX = 1.5
PEAK_OVER_EAGER_MAX = 0.1
MAX_ABS_DIFF = 1e-6


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _setup(length: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from purecover.teacher.capture import SegmentSpec

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=8192)
    model = Qwen2ForCausalLM(config).eval()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 2048, (1, length))
    mask = torch.ones_like(ids)
    doc_end = int(length * 0.8)
    d = doc_end // 20
    docs = [(i * d, (i + 1) * d) for i in range(20)]
    step_len = (length - doc_end - 40) // 5
    steps = [(doc_end + 10 + i * step_len, doc_end + 10 + (i + 1) * step_len - 2) for i in range(5)]
    answer = (length - 12, length)
    spec = SegmentSpec.of([*steps, answer], [*docs, *steps])
    return model, ids, mask, spec


def _measure(kind: str, length: int, repeats: int, queue) -> None:
    import torch

    from purecover.teacher.capture import capture_segment_attention, reference_segment_attention

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, ids, mask, spec = _setup(length)

    def run():
        with torch.no_grad():
            if kind == "capture":
                return capture_segment_attention(model, ids, mask, [spec])
            if kind == "eager":
                model.set_attn_implementation("eager")
                out = model.model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
                model.set_attn_implementation("sdpa")
                return reference_segment_attention(out.attentions, mask, [spec])
            return model.model(input_ids=ids, attention_mask=mask, use_cache=False)

    run()  # warm-up (allocator, kernels)
    import gc

    gc.collect()
    exact_peak = _reset_peak()
    before = _rss_kb("VmRSS")
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
        if kind == "eager":
            gc.collect()
    peak = _rss_kb("VmHWM") - before
    out = {"seconds": statistics.median(times), "peak_mb": round(max(peak, 0) / 1024, 1), "peak_exact": exact_peak}
    if kind in ("capture", "eager"):
        out["matrix"] = result[0].tolist()
    queue.put(out)


def measure(kind: str, length: int, repeats: int) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(kind, length, repeats, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/attention_capture.json")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status

    from purecover.utils.provenance import package_versions

    lengths = []
    for length in args.lengths:
        row: dict = {"tokens": length}
        for kind in ("sdpa", "capture", "eager"):
            row[kind] = measure(kind, length, args.repeats)
        cap, eag = row["capture"].pop("matrix"), row["eager"].pop("matrix")
        row["max_abs_diff"] = max(abs(a - b) for ra, rb in zip(cap, eag) for a, b in zip(ra, rb))
        row["capture_over_sdpa_time"] = round(row["capture"]["seconds"] / row["sdpa"]["seconds"], 3)
        row["capture_over_eager_peak"] = round(row["capture"]["peak_mb"] / max(row["eager"]["peak_mb"], 1e-9), 4)
        lengths.append(row)
        print(json.dumps(row), flush=True)
    result = harness.write(args.out, {
        "benchmark": "attention_capture",
        "date": now(),
        "config": {"layers": 4, "heads": 8, "kv_heads": 2, "hidden": 256, "docs": 20, "steps": 5},
        "lengths": lengths,
        "machine": machine_info(),
        "versions": package_versions(),
    }, rows)
    print(json.dumps(result["rows"], indent=2, ensure_ascii=False))
    return 0


def rows(result: dict) -> list[dict]:
    """The summary rows: capture time / sdpa per length, capture peak / eager at the longest, max abs diff."""
    table = Rows(result)
    lengths = result["lengths"]
    for r in lengths:
        table.add("attention_capture.capture_over_sdpa_time", r["capture_over_sdpa_time"], "x",
                  at_most(TIME_OVER_SDPA_MAX), variant=f"{r['tokens']} tokens",
                  note=f"{r['capture']['seconds']:.3f} s vs {r['sdpa']['seconds']:.3f} s")
    last = lengths[-1]
    table.add("attention_capture.capture_over_eager_peak_memory", last["capture_over_eager_peak"], "x",
              at_most(PEAK_OVER_EAGER_MAX), variant=f"{last['tokens']} tokens",
              note=f"{last['capture']['peak_mb']:,.1f} MB vs {last['eager']['peak_mb']:,.1f} MB")
    table.add("attention_capture.max_abs_diff_vs_eager", max(r["max_abs_diff"] for r in lengths), "",
              at_most(MAX_ABS_DIFF), note=f"segment-average attention, all {len(lengths)} lengths")
    return table.rows


if __name__ == "__main__":
    sys.exit(main())
