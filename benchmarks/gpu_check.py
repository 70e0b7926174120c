"""The paper-scale paths, measured in one prepared command for the day a GPU is lent (JSON output).

    python benchmarks/gpu_check.py [--out benchmarks/results/gpu_check.json]     # on the GPU machine
    python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check.json              # CPU, tiny shapes, ~3 min

The whole check keeps to ``--budget`` seconds (480 by default): each part's limit is cut to what is left and the
results file is rewritten after every part. Nothing is downloaded: every model is built from a config with
random weights (Qwen2.5-7B's shape for the student and the selector, a few layers of Qwen2.5-32B's shape for attention capture), the prompts are random
token ids of the paper recipe's shape (K1 = 20 passages of 192 tokens, batch 4). Each part runs in a fresh
process with a time limit; a part that fails or runs out of time is a row with no value and the reason, and
the others go on. Rows are printed as they are measured, so output cut short still says what was measured.

Parts (``--parts``, default all):

* ``student``: LoRA (r 16, alpha 32, all linear layers, as ``configs/recipes/paper/``) training steps with the
  project's loss (`purecover.train.losses.selector_loss`) in bf16 on the GPU: the identifier readout with the
  exact permutation-invariant LM loss (m_exact 5), the same scored against one ordering (m_exact 0), the
  passage readout (L_CL + BCE) and the passage readout with the scoring head (``passage_score: head``): seconds
  per step, tokens per second, peak memory, and exact / one ordering.
* ``capture``: `purecover.teacher.capture.capture_segment_attention` on 32B-shaped layers at 4k and 8k tokens
  against a plain sdpa forward (time ratio) and, on a GPU, eager attention (memory: each forward's own peak above
  the weights), and its largest difference from eager attention on a short sequence.
* ``selector``: one-pass selection latency at 7B shape, K1 = 20 (`purecover.models.selector.hf_identifier_logits`),
  batch 1 and 16: p50 / p95 ms per batch.
* ``serve``: `purecover serve`'s app (real uvicorn on loopback, the project's HTTP client) around a selector of
  the student's shape: 16 concurrent clients, 96 requests of K1 = 20 demo passages, max_batch 16: requests per
  second, p50 / p95 ms per request, and the mean batch the batcher formed.
* ``generation``: greedy generation at 7B shape through transformers (what the label stage's teacher costs when
  vLLM is absent): new tokens per second.
* ``launch``: the project's own train stage (``purecover train`` with ``student.launch.config_file``: it runs
  ``accelerate launch`` with DeepSpeed ZeRO-2 on one process) on a run directory assembled from the bundled demo
  questions (each question's own paragraphs, the gold passages as labels), with a random model of the
  student's shape saved to disk and the demo's offline tokenizer: seconds per step from the stage's own log
  lines, and the command's wall time.

* ``tests``: the tests marked ``gpu`` (``pytest -m gpu tests``: bf16 on CUDA, the selector and the capture on the
  device, the train stage there), which every machine without CUDA skips with a reason: failures (target 0). With
  ``--tiny`` on a machine without CUDA they run on the CPU instead (``PURECOVER_GPU_TEST_DEVICE=cpu``).

Targets are checked only on a GPU with the full shapes (``--tiny``, also spelled ``--quick``, checks the code),
except the gpu tests' and the capture's agreement with eager attention: the exact-loss student ≥ 2 steps/s, every
student variant ≤ 40 GB peak, exact / one ordering ≤ 1.2×; the capture ≤ 1.1× the sdpa forward's time and ≤ 1/50
of eager attention's memory at 8k tokens, ≤ 1e-2 from eager on the GPU (1e-5 otherwise); selector p50
≤ 100 ms at batch 1; 0 failed gpu tests. The parts and their helpers are in ``gpu_check_parts.py``.

What the script imports: torch, transformers, peft, numpy and purecover; the serve part also fastapi, uvicorn and
httpx (the ``serve`` extra), the launch part accelerate and DeepSpeed, the tests part pytest; a part whose packages
are missing is a failed row naming the module.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue as queue_module
import sys
import time
import traceback
from typing import Any

from benchlib import harness
from benchlib.rows import Rows, at_least, at_most, machine_info, now

# the parts, looked up by name in this module's globals (`_child`, in a spawned process)
from gpu_check_parts import part_capture as part_capture
from gpu_check_parts import part_generation as part_generation
from gpu_check_parts import part_launch as part_launch
from gpu_check_parts import part_selector as part_selector
from gpu_check_parts import part_serve as part_serve
from gpu_check_parts import part_student as part_student
from gpu_check_parts import part_tests as part_tests

PARTS = ("student", "capture", "selector", "serve", "generation", "launch", "tests")
QWEN_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "intermediate_size": 18944, "vocab_size": 152064}
QWEN_32B_LAYERS = {"hidden_size": 5120, "num_hidden_layers": 4, "num_attention_heads": 40, "num_key_value_heads": 8,
                   "intermediate_size": 27648, "vocab_size": 152064}
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 512}
SHAPES: dict[str, dict[str, Any]] = {
    "full": {"student": QWEN_7B, "teacher": QWEN_32B_LAYERS, "k1": 20, "passage_tokens": 192, "batch": 4,
             "steps": 4, "capture_lengths": [4096, 8192], "eager_length": 512, "selector_batches": [1, 16],
             "selector_repeats": 10, "new_tokens": 128, "time_limit": 150, "launch_steps": 6,
             "launch_config": "configs/accelerate/deepspeed_zero2.yaml", "launch_time_limit": 420,
             "serve_clients": 16, "serve_requests": 96, "serve_max_batch": 16, "tests_paths": ["tests"],
             "tests_time_limit": 300},
    "tiny": {"student": TINY, "teacher": TINY, "k1": 4, "passage_tokens": 12, "batch": 2, "steps": 2,
             "capture_lengths": [128, 256], "eager_length": 64, "selector_batches": [1, 4], "selector_repeats": 3,
             "new_tokens": 8, "time_limit": 120, "launch_steps": 3,
             "launch_config": "configs/accelerate/deepspeed_zero2_cpu.yaml", "launch_time_limit": 300,
             "serve_clients": 4, "serve_requests": 12, "serve_max_batch": 4, "tests_paths": ["tests/gpu"],
             "tests_time_limit": 240},
}
STEPS_PER_SECOND_MIN = 2.0
PEAK_GB_MAX = 40.0
EXACT_OVER_ONE_MAX = 1.2
CAPTURE_OVER_SDPA_MAX = 1.1
CAPTURE_OVER_EAGER_MEMORY_MAX = 1 / 50
SELECTOR_P50_MS_MAX = 100.0
BUDGET = {"full": 480.0, "tiny": 900.0}  # seconds for the whole check (issue 44: at most 8 minutes on one GPU)
MIN_PART_SECONDS = 45.0


# --------------------------------------------------------------------------- running a part

def _child(part: str, cfg: dict[str, Any], out: Any) -> None:
    try:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        out.put({"ok": globals()[f"part_{part}"](cfg), "device": device})
    except BaseException as exc:  # every failure is a row, and the other parts go on
        out.put({"error": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()[-2000:]})


def part_limit(part: str, cfg: dict[str, Any]) -> float:
    """The seconds `part` may take with the shape's settings (its process is killed after them)."""
    return {"launch": cfg["launch_time_limit"], "tests": cfg["tests_time_limit"] + 30}.get(part, cfg["time_limit"])


def within(cfg: dict[str, Any], part: str, seconds: float) -> dict[str, Any]:
    """`cfg` with `part`'s time limit cut to `seconds` (the inner subprocess limits too), when that is less."""
    if seconds >= part_limit(part, cfg):
        return cfg
    key = {"launch": "launch_time_limit", "tests": "tests_time_limit"}.get(part, "time_limit")
    return {**cfg, key: seconds - 30 if part == "tests" else seconds}


def run_part(part: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Run `part` in a fresh (spawned) process, killed after the shape's time limit."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(part, cfg, out))
    t0 = time.perf_counter()
    proc.start()
    limit = part_limit(part, cfg)
    try:
        result = out.get(timeout=limit)
    except queue_module.Empty:
        result = {"error": f"did not finish within {limit} s"}
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


# --------------------------------------------------------------------------- rows

def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    r = Rows(result)
    full = result.get("shape") == "full" and result.get("device", "cpu") != "cpu"
    parts = result.get("parts", {})

    def failed(part: str, figure: str) -> bool:
        got = parts.get(part)
        if got is None:
            return True
        if "error" in got:
            r.add(f"gpu_check.{figure}", None, "-", note=f"failed: {got['error']}", variant=result.get("device"))
            return True
        return False

    device = result.get("device")
    if not failed("student", "student"):
        by = {v["variant"]: v for v in parts["student"]["ok"]}
        for name, v in by.items():
            r.add("gpu_check.student_steps_per_second", 1 / v["seconds_per_step"], "steps/s",
                  at_least(STEPS_PER_SECOND_MIN) if full and "m_exact 5" in name else None,
                  variant=f"{device}: {name}", note=f"{v['tokens_per_second']:.0f} tokens/s")
            r.add("gpu_check.student_peak_gb", v["peak_gb"], "GB", at_most(PEAK_GB_MAX) if full else None,
                  variant=f"{device}: {name}")
        exact = next(v for n, v in by.items() if "m_exact 5" in n)
        one = next(v for n, v in by.items() if "m_exact 0" in n)
        r.add("gpu_check.exact_over_one_ordering", exact["seconds_per_step"] / one["seconds_per_step"], "x",
              at_most(EXACT_OVER_ONE_MAX) if full else None, variant=device)
    if not failed("capture", "capture"):
        for v in parts["capture"]["ok"]:
            if "sdpa_seconds" in v:
                r.add("gpu_check.capture_over_sdpa_time", v["capture_seconds"] / v["sdpa_seconds"], "x",
                      at_most(CAPTURE_OVER_SDPA_MAX) if full else None, variant=f"{device}: {v['tokens']} tokens",
                      note=f"capture {v['capture_seconds']:.3f} s, peak {v['capture_peak_gb']:.2f} GB; sdpa "
                           f"{v['sdpa_seconds']:.3f} s, peak {v['sdpa_peak_gb']:.2f} GB")
                if v.get("eager_peak_gb"):
                    r.add("gpu_check.capture_over_eager_memory", v["capture_peak_gb"] / v["eager_peak_gb"], "x",
                          at_most(CAPTURE_OVER_EAGER_MEMORY_MAX) if full and v["tokens"] >= 8192 else None,
                          variant=f"{device}: {v['tokens']} tokens",
                          note=f"capture {v['capture_peak_gb']:.2f} GB, eager {v['eager_peak_gb']:.2f} GB")
            else:
                r.add("gpu_check.capture_max_abs_diff_vs_eager", v["max_abs_diff"], "abs", at_most(1e-2 if full
                                                                                                   else 1e-5),
                      variant=f"{device}: {v['tokens']} tokens")
                if v["eager_peak_gb"] > 0:
                    r.add("gpu_check.capture_over_eager_memory", v["capture_peak_gb"] / v["eager_peak_gb"], "x",
                          None, variant=f"{device}: {v['tokens']} tokens")
    if not failed("selector", "selector"):
        for v in parts["selector"]["ok"]:
            r.add("gpu_check.selector_p50_ms", v["p50_ms"], "ms",
                  at_most(SELECTOR_P50_MS_MAX) if full and v["batch"] == 1 else None,
                  variant=f"{device}: batch {v['batch']}", note=f"p95 {v['p95_ms']:.1f} ms")
    if not failed("serve", "serve"):
        v = parts["serve"]["ok"][0]
        r.add("gpu_check.serve_requests_per_second", v["requests_per_second"], "requests/s", None,
              variant=f"{device}: {v['clients']} clients over loopback, max_batch {v['max_batch']}",
              note=f"p50 {v['p50_ms']:.1f} ms, p95 {v['p95_ms']:.1f} ms per request; mean batch "
                   + (f"{v['mean_batch']:.1f}" if v["mean_batch"] is not None else "-")
                   + f"; {v['requests']} requests")
    if not failed("generation", "generation"):
        v = parts["generation"]["ok"][0]
        r.add("gpu_check.generation_tokens_per_second", v["tokens_per_second"], "tokens/s", None, variant=device,
              note=f"{v['prompt_tokens']} prompt tokens, {v['new_tokens']} new, greedy, transformers")
    if not failed("launch", "launch"):
        v = parts["launch"]["ok"][0]
        pace = (f"{v['tokens_per_second']:,.0f} prompt tokens/s" if v.get("tokens_per_second") is not None
                else "no tokens/s logged") + (f", peak GPU memory {v['peak_gb']:.1f} GB" if v.get("peak_gb") else "")
        r.add("gpu_check.launch_seconds_per_step", v["seconds_per_step"], "s", None,
              variant=f"{device}: purecover train, {v['config']}, 1 process",
              note=f"{v['steps']} steps on {v['questions']} demo questions, {pace}; the command took "
                   f"{v['wall_seconds']:.0f} s" + ("" if v.get("launched") else
                                                     "; NOT launched through accelerate with DeepSpeed"))
        if v.get("peak_gb") is not None:
            r.add("gpu_check.launch_peak_gb", v["peak_gb"], "GB", at_most(PEAK_GB_MAX) if full else None,
                  variant=f"{device}: purecover train, {v['config']}, 1 process",
                  note="the train stage's own log line: torch's peak allocation on the device")
    if not failed("tests", "tests"):
        v = parts["tests"]["ok"][0]
        r.add("gpu_check.gpu_tests_failed", v["failed"], "tests", at_most(0), variant=f"{device}: pytest -m gpu",
              note=f"{v['passed']} passed, {v['skipped']} skipped on {v['device']}; exit {v['exit_code']}"
                   + (f"; {' | '.join(v['failures'])}"[:400] if v["failures"] else ""))
    return r.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/gpu_check.json", quick_aliases=["--tiny"],
                            quick="tiny shapes on any device: checks the code (~3 min on 2 CPU cores)")
    parser.add_argument("--parts", default=list(PARTS), type=lambda text: harness.name_list(text, PARTS, "part"),
                        help=f"comma-separated, of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--budget", type=harness.positive_seconds, default=None,
                        help="seconds the whole check may take: each part's limit is cut to what is left, and a part "
                             f"with under {MIN_PART_SECONDS:g} s left is a row 'not run' (default: {BUDGET['full']:g} s, "
                             f"{BUDGET['tiny']:g} s with --tiny)")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    parts = args.parts
    shape = "tiny" if args.quick else "full"
    cfg = SHAPES[shape]
    result: dict[str, Any] = {"date": now(), "command": " ".join(sys.argv), "shape": shape, "parts": {}}
    printed: list[dict[str, Any]] = []
    budget = args.budget if args.budget is not None else BUDGET[shape]
    started = time.perf_counter()
    for part in parts:
        left = budget - (time.perf_counter() - started) - 5
        if left < MIN_PART_SECONDS:
            got: dict[str, Any] = {"error": f"not run: {max(0.0, left):.0f} s of the {budget:g} s budget left"}
        else:
            got = run_part(part, within(cfg, part, left))
        result["parts"][part] = got
        if result.get("device") is None:
            result["device"] = got.get("device")
        before = len(printed)
        printed = rows({**result, "machine": machine_info()})
        for row in printed[before:]:
            print(json.dumps(row), flush=True)
        if "error" in got:
            print(f"gpu_check {part}: {got['error']}", file=sys.stderr, flush=True)
        result["machine"] = machine_info()
        if result.get("device") and result["device"] != "cpu":
            result["machine"]["gpu"] = result["device"]
        harness.write(args.out, result, rows)  # after every part: a run cut short keeps what it measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
