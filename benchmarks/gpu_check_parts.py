"""The parts of `gpu_check.py` (the check, its shapes, targets and rows are there) and their helpers. Each part
runs in a fresh spawned process (`gpu_check.run_part`), takes the shape's settings (`gpu_check.SHAPES`) and returns
its measurements as a list of dicts; it imports what it needs itself, so a missing package fails only its part.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

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


def run_bounded(command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Any:
    """`subprocess.run` of `command` (text output captured) in its own process group, killed whole after
    `timeout` s (TimeoutError): launchers such as accelerate and pytest start children that a kill of the
    launcher alone would leave running on the device."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{' '.join(command[:4])} ... did not finish within {timeout:.0f} s (its process group "
                           "was killed)") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


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
        done = run_bounded(command, cwd=repo, timeout=cfg["launch_time_limit"] - 15)
        wall = time.perf_counter() - t0
        log_text = done.stdout + done.stderr
        launch_log = root / "run" / "train.launch.log"
        if launch_log.is_file():
            log_text += launch_log.read_text(errors="replace")
        if done.returncode != 0:
            lines = [line for line in log_text.splitlines() if "Error" in line or "error:" in line]
            raise RuntimeError(f"purecover train exited {done.returncode}: {' | '.join(lines[-3:])[-400:]}")
        steps = [line for line in log_text.splitlines() if re.search(r"train step \d+/\d+ \(", line)]
    paces = [float(m) for line in steps for m in re.findall(r"; ([\d.eE+-]+) s/step", line)]
    if not paces:
        raise RuntimeError("the train stage logged no step line")
    tokens = [float(m.replace(",", "")) for m in re.findall(r"([\d,.]+) prompt tokens/s", steps[-1])]
    memory = [float(m) for m in re.findall(r"peak GPU memory ([\d.]+) GB", steps[-1])]
    return [{"questions": questions, "steps": cfg["launch_steps"], "seconds_per_step": paces[-1],
             "tokens_per_second": tokens[0] if tokens else None, "peak_gb": memory[0] if memory else None,
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

    import torch

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["PURECOVER_GPU_TEST_DEVICE"] = "cpu"
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
               *cfg["tests_paths"]]
    done = run_bounded(command, cwd=repo, env=env, timeout=cfg["tests_time_limit"])
    tail = (done.stdout + done.stderr).strip().splitlines()
    summary = next((line for line in reversed(tail) if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    failures = [line for line in tail if line.startswith(("FAILED", "ERROR"))][:5]
    return [{"passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("error", 0)
             + counts.get("errors", 0), "skipped": counts.get("skipped", 0), "exit_code": done.returncode,
             "summary": summary.strip("= "), "failures": failures,
             "device": "cuda" if torch.cuda.is_available() else "cpu (PURECOVER_GPU_TEST_DEVICE)"}]
