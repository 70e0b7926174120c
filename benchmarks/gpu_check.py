"""The paper-scale paths, measured in one prepared command for the day a GPU is lent (JSON output).

    python benchmarks/gpu_check.py [--out benchmarks/results/gpu_check.json]     # on the GPU machine
    python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check.json              # CPU, tiny shapes, < 1 min

Nothing is downloaded: every model is built from a config with random weights (Qwen2.5-7B's shape for the
student and the selector, a few layers of Qwen2.5-32B's shape for attention capture), the prompts are random
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

Targets are checked only on a GPU with the full shapes (``--tiny`` checks the code), except the gpu tests' and the
capture's agreement with eager attention. What the script imports: torch, transformers, peft, numpy and purecover;
the serve part also fastapi, uvicorn and httpx (the ``serve`` extra), the launch part accelerate and DeepSpeed, the
tests part pytest; a part whose packages are missing is a failed row naming the module.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import queue as queue_module
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rows import ROWS_ONLY_HELP, Rows, at_least, at_most, machine_info, now, rewrite, with_rows

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


# --------------------------------------------------------------------------- helpers (run in the child)

def _device_and_dtype(torch: Any) -> tuple[str, Any]:
    return ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)


def _model(shape: dict[str, Any], torch: Any, device: str, dtype: Any) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape, max_position_embeddings=16384, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype)
    model.set_attn_implementation("sdpa")
    return model


def _status_gb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 2**20
    return 0.0


def _reset_peak(torch: Any, device: str) -> float:
    """Start a peak-memory measurement; returns what is held now (GB), for `_peak_gb`'s `above`."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**30
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _status_gb("VmRSS")


def _peak_gb(torch: Any, device: str, above: float = 0.0) -> float:
    """The peak (GB) since `_reset_peak`, less `above` (what was held before: the weights, for a forward's own)."""
    if device == "cuda":
        torch.cuda.synchronize()
        return max(torch.cuda.max_memory_allocated() / 2**30 - above, 0.0)
    return max(_status_gb("VmHWM") - above, 0.0)


def _sync(torch: Any, device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _prompt(torch: Any, shape: dict[str, Any], k1: int, passage_tokens: int, device: str, seed: int) -> tuple:
    """A random prompt of the selector's shape: a question, k1 passages each ending in a marker token, the reply
    start; returns (ids (T,), marker positions, identifier ids)."""
    g = torch.Generator().manual_seed(seed)
    vocab = shape["vocab_size"]
    identifiers = list(range(10, 10 + k1))
    marker = 9
    parts, positions, pos = [torch.randint(100, vocab, (32,), generator=g)], [], 32
    for _ in range(k1):
        body = torch.randint(100, vocab, (passage_tokens,), generator=g)
        parts.append(torch.cat([body, torch.tensor([marker])]))
        pos += passage_tokens + 1
        positions.append(pos - 1)
    parts.append(torch.randint(100, vocab, (16,), generator=g))
    return torch.cat(parts).to(device), positions, identifiers


# --------------------------------------------------------------------------- the parts

def part_student(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import torch
    from peft import LoraConfig, get_peft_model

    from purecover.models.score_head import SCORE_HEAD_ATTR, HeadReadout, ScoreHead
    from purecover.train.losses import ReplyFormat, selector_loss

    device, dtype = _device_and_dtype(torch)
    model = _model(cfg["student"], torch, device, dtype)
    if device == "cuda":  # as the paper recipe trains a 7B student: activations recomputed, not stored
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    model.train()
    head = ScoreHead.from_token(model, 11)  # passage_score: head, trained with the adapter
    model.add_module(SCORE_HEAD_ATTR, head)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    k1, batch = cfg["k1"], cfg["batch"]
    prompts = [_prompt(torch, cfg["student"], k1, cfg["passage_tokens"], device, seed=i) for i in range(batch)]
    ids = [p[0] for p in prompts]
    fmt = ReplyFormat(identifier_ids=tuple(prompts[0][2]), separator_id=7, end_id=8)
    selected = [[1, 4, 0, 2] if k1 > 4 else list(range(k1 - 1)) for _ in range(batch)]  # |S| 4: 24 orderings
    tokens_per_step = sum(int(p.shape[0]) for p in ids)
    out = []
    variants = {"identifier, exact permutation-invariant LM loss (m_exact 5)": {"m_exact": 5},
                "identifier, one ordering (m_exact 0)": {"m_exact": 0},
                "passage readout (L_CL + BCE)": {"read_positions": [p[1] for p in prompts], "read_token": 11,
                                                 "lm_weight": 0.0, "bce_weight": 1.0},
                "passage readout, scoring head (L_CL + BCE)": {
                    "read_positions": [p[1] for p in prompts], "read_token": 11, "lm_weight": 0.0, "bce_weight": 1.0,
                    "score_head": HeadReadout.of(model, head)}}
    for name, kwargs in variants.items():
        def step(kwargs: dict[str, Any] = kwargs) -> None:
            opt.zero_grad(set_to_none=True)
            loss = selector_loss(model, ids, selected, [k1] * batch, fmt, **{"lm_weight": 1.0, **kwargs}).loss
            loss.backward()
            opt.step()

        step()  # warm-up
        _reset_peak(torch, device)
        _sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            step()
        _sync(torch, device)
        seconds = (time.perf_counter() - t0) / cfg["steps"]
        out.append({"variant": name, "seconds_per_step": seconds, "tokens_per_second": tokens_per_step / seconds,
                    "peak_gb": _peak_gb(torch, device)})
    return out


def part_capture(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    from purecover.teacher.capture import SegmentSpec, capture_segment_attention, reference_segment_attention

    device, dtype = _device_and_dtype(torch)
    model = _model(cfg["teacher"], torch, device, dtype).eval()

    def spec_of(length: int) -> SegmentSpec:
        """20 passages in the first 75% of the sequence, 5 reasoning steps in the next 20%, the answer last."""
        d, s5 = int(length * 0.75) // 20, int(length * 0.2) // 5
        docs = [(i * d, (i + 1) * d) for i in range(20)]
        steps = [(20 * d + i * s5, 20 * d + (i + 1) * s5) for i in range(5)]
        return SegmentSpec.of([*steps, (20 * d + 5 * s5, length)], [*docs, *steps])

    out = []
    for length in cfg["capture_lengths"]:
        ids = torch.randint(100, cfg["teacher"]["vocab_size"], (1, length), device=device)
        mask = torch.ones_like(ids)
        spec = spec_of(length)
        timings = {}
        for kind in ("sdpa", "capture"):
            with torch.no_grad():
                def run(kind: str = kind, ids: Any = ids, mask: Any = mask, spec: Any = spec) -> Any:
                    if kind == "sdpa":
                        return model.model(input_ids=ids, attention_mask=mask, use_cache=False)
                    return capture_segment_attention(model, ids, mask, [spec])

                run()
                held = _reset_peak(torch, device)
                t0 = time.perf_counter()
                run()
                _sync(torch, device)
                timings[kind] = (time.perf_counter() - t0, _peak_gb(torch, device, held))
        entry = {"tokens": length, "sdpa_seconds": timings["sdpa"][0], "capture_seconds": timings["capture"][0],
                 "sdpa_peak_gb": timings["sdpa"][1], "capture_peak_gb": timings["capture"][1]}
        if device == "cuda":  # eager attention's own memory at this length (what the capture avoids)
            try:
                with torch.no_grad():
                    model.set_attn_implementation("eager")
                    held = _reset_peak(torch, device)
                    model.model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
                    entry["eager_peak_gb"] = _peak_gb(torch, device, held)
            except torch.cuda.OutOfMemoryError:
                entry["eager_peak_gb"] = None  # eager does not fit: the capture's point
            finally:
                model.set_attn_implementation("sdpa")
                torch.cuda.empty_cache()
        out.append(entry)
    short = cfg["eager_length"]
    ids = torch.randint(100, cfg["teacher"]["vocab_size"], (1, short), device=device)
    mask = torch.ones_like(ids)
    spec = spec_of(short)
    with torch.no_grad():
        captured = capture_segment_attention(model, ids, mask, [spec])[0]
        model.set_attn_implementation("eager")
        held = _reset_peak(torch, device)
        eager_out = model.model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
        eager_peak = _peak_gb(torch, device, held)
        reference = reference_segment_attention(eager_out.attentions, mask, [spec])[0]
        model.set_attn_implementation("sdpa")
        held = _reset_peak(torch, device)
        capture_segment_attention(model, ids, mask, [spec])
        capture_peak = _peak_gb(torch, device, held)
    out.append({"tokens": short, "max_abs_diff": float((captured - reference).abs().max()),
                "eager_peak_gb": eager_peak, "capture_peak_gb": capture_peak})
    return out


def part_selector(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    from purecover.models.selector import hf_identifier_logits

    device, dtype = _device_and_dtype(torch)
    model = _model(cfg["student"], torch, device, dtype).eval()
    k1 = cfg["k1"]
    out = []
    for batch in cfg["selector_batches"]:
        prompts = [_prompt(torch, cfg["student"], k1, cfg["passage_tokens"], "cpu", seed=100 + i) for i in range(batch)]
        ids = [p[0].tolist() for p in prompts]
        identifiers = [prompts[0][2]] * batch
        hf_identifier_logits(model, ids, identifiers, batch_size=batch)  # warm-up
        times = []
        for _ in range(cfg["selector_repeats"]):
            _sync(torch, device)
            t0 = time.perf_counter()
            hf_identifier_logits(model, ids, identifiers, batch_size=batch)
            _sync(torch, device)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out.append({"batch": batch, "p50_ms": statistics.median(times),
                    "p95_ms": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]})
    return out


def part_generation(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    device, dtype = _device_and_dtype(torch)
    model = _model(cfg["student"], torch, device, dtype).eval()
    ids = _prompt(torch, cfg["student"], cfg["k1"], cfg["passage_tokens"], device, seed=7)[0][None]
    new = cfg["new_tokens"]
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
        _sync(torch, device)
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        _sync(torch, device)
    seconds = time.perf_counter() - t0
    return [{"prompt_tokens": int(ids.shape[1]), "new_tokens": new, "tokens_per_second": new / seconds}]


def _demo_questions(k1: int) -> list[tuple[dict[str, Any], list[tuple[str, str]]]]:
    """The bundled demo questions, each with k1 (title, text) passages: its own paragraphs, padded with other
    questions' paragraphs."""
    import purecover

    demo = json.loads((Path(purecover.__file__).parent / "data" / "demo" / "demo_hotpot.json").read_text())
    pool = [(title, " ".join(sents)) for q in demo for title, sents in q["context"]]
    out = []
    for i, q in enumerate(demo):
        docs = [(title, " ".join(sents)) for title, sents in q["context"]][:k1]
        docs += pool[(i * 7) % len(pool):][: k1 - len(docs)] if len(docs) < k1 else []
        out.append((q, (docs + pool)[:k1]))
    return out


def _assemble_run(run: Path, k1: int) -> int:
    """candidates.jsonl and labels.jsonl from the bundled demo questions (`_demo_questions`), the gold passages as
    the labels; returns the question count."""
    from purecover.records import CandidateDoc, CandidateRecord, LabelRecord
    from purecover.records.labels import TeacherSettings
    from purecover.utils.io import write_jsonl_atomic
    from purecover.utils.rundir_claim import mark_run_dir

    mark_run_dir(run)
    candidates, labels = [], []
    for q, docs in _demo_questions(k1):
        gold = {title for title, _ in q["supporting_facts"]}
        picked = [k for k, (title, _) in enumerate(docs) if title in gold] or [0]
        cand = CandidateRecord(qid=q["_id"], question=q["question"], answers=[q["answer"]],
                               docs=[CandidateDoc(doc_id=f"{q['_id']}-{k}", title=t, text=x)
                                     for k, (t, x) in enumerate(docs)])
        candidates.append(cand.to_json_dict())
        labels.append(LabelRecord(qid=q["_id"], selected=picked, selected_doc_ids=[f"{q['_id']}-{k}" for k in picked],
                                  gains=[1.0] * len(picked), objective=float(len(picked)), steps=[],
                                  answer=q["answer"], e=[], W=[], bias_key=None, status="ok", reason=None,
                                  teacher=TeacherSettings()).to_json_dict())
    write_jsonl_atomic(run / "candidates.jsonl", candidates)
    write_jsonl_atomic(run / "labels.jsonl", labels)
    return len(candidates)


def part_launch(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The train stage through its own launcher (accelerate launch + DeepSpeed ZeRO-2), in a scratch folder."""
    import re
    import subprocess
    import tempfile

    import torch

    from purecover.demo.offline_tokenizer import build_offline_tokenizer, demo_tokenizer_texts

    device, dtype = _device_and_dtype(torch)
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="gpu_check_launch_") as scratch:
        root = Path(scratch)
        tokenizer_dir = build_offline_tokenizer(root / "tokenizer", demo_tokenizer_texts())
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        shape = {**cfg["student"], "vocab_size": max(cfg["student"]["vocab_size"], len(tokenizer))}
        model = _model(shape, torch, "cpu", dtype)
        model.save_pretrained(root / "model", safe_serialization=True)
        tokenizer.save_pretrained(root / "model")
        del model
        questions = _assemble_run(root / "run", cfg["k1"])
        sets = {"run_dir": str(root / "run"), "data.path": "demo", "data.k1": str(cfg["k1"]),
                "student.model": str(root / "model"), "student.dtype": "bfloat16" if device == "cuda" else "float32",
                "student.max_passage_tokens": str(cfg["passage_tokens"]), "student.eval_fraction": "0.2",
                "student.training.max_steps": str(cfg["launch_steps"]), "student.training.logging_steps": "1",
                "student.training.save_steps": "1000", "student.training.per_device_train_batch_size": str(cfg["batch"]),
                "student.launch.config_file": cfg["launch_config"], "student.launch.num_processes": "1",
                "teacher.steps": "oracle", "teacher.calibrate": "false"}
        command = [sys.executable, "-m", "purecover", "train", "--log-level", "INFO"]
        for key, value in sets.items():
            command += ["--set", f"{key}={value}"]
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=cfg["launch_time_limit"])
        wall = time.perf_counter() - t0
        log_text = done.stdout + done.stderr
        launch_log = root / "run" / "train.launch.log"
        if launch_log.is_file():
            log_text += launch_log.read_text(errors="replace")
        if done.returncode != 0:
            lines = [line for line in log_text.splitlines() if "Error" in line or "error:" in line]
            raise RuntimeError(f"purecover train exited {done.returncode}: {' | '.join(lines[-3:])[-400:]}")
        paces = [float(m) for m in re.findall(r"train step \d+/\d+ \([^)]*\): .*?; ([\d.eE+-]+) s/step", log_text)]
    if not paces:
        raise RuntimeError("the train stage logged no step line")
    return [{"questions": questions, "steps": cfg["launch_steps"], "seconds_per_step": paces[-1],
             "wall_seconds": wall, "config": cfg["launch_config"],
             "launched": "accelerate.commands.launch" in log_text and "deepspeed" in log_text.lower()}]


def part_serve(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """`purecover serve`'s app (real uvicorn on loopback, the real HTTP client) around a selector of the student's
    shape (random weights, the demo's offline tokenizer): `serve_clients` concurrent clients send `serve_requests`
    requests of K1 demo passages; requests per second, p50 / p95 ms per request, the batcher's mean batch."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from transformers import AutoTokenizer

    from purecover.demo.offline_tokenizer import build_offline_tokenizer, demo_tokenizer_texts
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector import HFSelectorBackend, Selector
    from purecover.models.selector_prompt import prompt_template
    from purecover.records import SelectorConfig
    from purecover.serve.app import create_app
    from purecover.serve.client import RemoteSelector
    from purecover.serve.server import serve_in_thread

    device, dtype = _device_and_dtype(torch)
    k1 = cfg["k1"]
    with tempfile.TemporaryDirectory(prefix="gpu_check_serve_") as scratch:
        tokenizer = AutoTokenizer.from_pretrained(build_offline_tokenizer(Path(scratch) / "tok", demo_tokenizer_texts()),
                                                  padding_side="left")
    shape = {**cfg["student"], "vocab_size": max(cfg["student"]["vocab_size"], len(tokenizer))}
    model = _model(shape, torch, device, dtype).eval()
    scheme = IdentifierScheme("letters").check(tokenizer, k1)
    config = SelectorConfig.model_validate({
        "base_model": "random/qwen2.5-7b-shape", "identifiers": scheme.to_record().model_dump(mode="json"),
        "prompt_template": prompt_template(), "k1": k1, "tau3": 0.0, "k_max": 5, "min_select": 1,
        "max_passage_tokens": cfg["passage_tokens"]})
    selector = Selector(tokenizer, config, HFSelectorBackend(model, pad_id=tokenizer.pad_token_id or 0,
                                                             batch_size=cfg["serve_max_batch"]))
    questions = _demo_questions(k1)
    work = [questions[i % len(questions)] for i in range(cfg["serve_requests"])]
    app = create_app(selector, model_name="gpu-check", max_batch=cfg["serve_max_batch"], max_wait_ms=5.0,
                     max_queue=4 * cfg["serve_requests"])
    with serve_in_thread(app) as url, RemoteSelector(url, max_concurrency=cfg["serve_clients"]) as client:
        def one(item: tuple[dict[str, Any], list[tuple[str, str]]]) -> float:
            q, docs = item
            t0 = time.perf_counter()
            client.select(q["question"], [{"title": t, "text": x} for t, x in docs])
            return (time.perf_counter() - t0) * 1000

        one(work[0])  # warm-up
        registry = app.state.service.metrics.registry
        before = (registry.get_sample_value("purecover_batch_size_sum") or 0.0,
                  registry.get_sample_value("purecover_batch_size_count") or 0.0)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(cfg["serve_clients"]) as pool:
            latencies = sorted(pool.map(one, work))
        wall = time.perf_counter() - t0
        size_sum = (registry.get_sample_value("purecover_batch_size_sum") or 0.0) - before[0]
        batches = (registry.get_sample_value("purecover_batch_size_count") or 0.0) - before[1]
    return [{"clients": cfg["serve_clients"], "requests": len(work), "requests_per_second": len(work) / wall,
             "p50_ms": statistics.median(latencies),
             "p95_ms": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
             "mean_batch": size_sum / batches if batches else None, "max_batch": cfg["serve_max_batch"]}]


def part_tests(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The tests marked ``gpu`` (pytest -m gpu), on this machine's CUDA device; on a machine without one (--tiny on
    the CPU) on the CPU instead (PURECOVER_GPU_TEST_DEVICE=cpu), so their own logic is checked."""
    import os
    import re
    import subprocess

    import torch

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["PURECOVER_GPU_TEST_DEVICE"] = "cpu"
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
               *cfg["tests_paths"]]
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True,
                          timeout=cfg["tests_time_limit"])
    tail = (done.stdout + done.stderr).strip().splitlines()
    summary = next((line for line in reversed(tail) if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    failures = [line for line in tail if line.startswith(("FAILED", "ERROR"))][:5]
    return [{"passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("error", 0)
             + counts.get("errors", 0), "skipped": counts.get("skipped", 0), "exit_code": done.returncode,
             "summary": summary.strip("= "), "failures": failures,
             "device": "cuda" if torch.cuda.is_available() else "cpu (PURECOVER_GPU_TEST_DEVICE)"}]


def _child(part: str, cfg: dict[str, Any], out: Any) -> None:
    try:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        out.put({"ok": globals()[f"part_{part}"](cfg), "device": device})
    except BaseException as exc:  # every failure is a row, and the other parts go on
        out.put({"error": f"{type(exc).__name__}: {exc}"[:500], "trace": traceback.format_exc()[-2000:]})


def run_part(part: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Run `part` in a fresh (spawned) process, killed after the shape's time limit."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(part, cfg, out))
    t0 = time.perf_counter()
    proc.start()
    limit = {"launch": cfg["launch_time_limit"], "tests": cfg["tests_time_limit"] + 30}.get(part, cfg["time_limit"])
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
        r.add("gpu_check.launch_seconds_per_step", v["seconds_per_step"], "s", None,
              variant=f"{device}: purecover train, {v['config']}, 1 process",
              note=f"{v['steps']} steps on {v['questions']} demo questions; the command took {v['wall_seconds']:.0f} s"
                   + ("" if v.get("launched") else "; NOT launched through accelerate with DeepSpeed"))
    if not failed("tests", "tests"):
        v = parts["tests"]["ok"][0]
        r.add("gpu_check.gpu_tests_failed", v["failed"], "tests", at_most(0), variant=f"{device}: pytest -m gpu",
              note=f"{v['passed']} passed, {v['skipped']} skipped on {v['device']}; exit {v['exit_code']}"
                   + (f"; {' | '.join(v['failures'])}"[:400] if v["failures"] else ""))
    return r.rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on any device: checks the code (< 1 min)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json")
    parser.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    args = parser.parse_args()
    if args.rows_only:
        return rewrite(args.out, rows)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; expected {', '.join(PARTS)}")
    shape = "tiny" if args.tiny else "full"
    cfg = SHAPES[shape]
    result: dict[str, Any] = {"date": now(), "command": " ".join(sys.argv), "shape": shape, "parts": {}}
    printed: list[dict[str, Any]] = []
    for part in parts:
        got = run_part(part, cfg)
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
    from purecover.utils.io import atomic_write_json

    atomic_write_json(Path(args.out), with_rows(result, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
