"""`purecover serve` under load: batched vs one request at a time, on CPU, JSON output.

    python benchmarks/serve.py [--out benchmarks/results/serve.json] [--rounds 5] [--requests-per-client 40]

The selector: a tiny random Qwen2 with the shape of the tests' and `build_tiny_model`'s default (2 layers,
hidden 64, 4 heads / 2 kv heads, intermediate 128; random weights: speed does not depend on them) with the
real Qwen2 tokenizer (its 151,936-token vocabulary, so the one output row the selector reads costs what it
costs in a real Qwen2), saved as an export folder with a selector_config.json (K1 = 6, passages cut to 40
tokens: the tests' export). Questions: the first `--questions` HotpotQA sample questions with their first K1
paragraphs as {title, text} documents (the bundled demo set when the sample folder is absent), ~360-token
prompts.

Served: two server subprocesses through the real CLI, ``python -m purecover serve DIR --port P --device cpu
--dtype float32 --max-batch B --max-wait-ms W`` with OMP_NUM_THREADS = `--server-threads` (1): "one at a
time" (B = 1) and "batched" (B = 16, W = 5 ms). Clients: `--clients` (16) concurrent httpx.AsyncClient
loops in this process, each sending `--requests-per-client` POST /v1/select requests one after another
(after `--warmup-per-client` untimed ones per server). The two configurations alternate (their order flips
each round) over `--rounds` rounds; a round reports throughput (requests / wall seconds), p50 / p99 client
latency, and the mean batch size and model seconds per batch from the server's /metrics (the change over
the round). The median round of each configuration (by throughput) is reported; every round is in the JSON.
Every response's scores are checked against the offline `Selector.select` on the same input (no lost or
mixed-up response; the run fails otherwise).

Offline, in this process (no HTTP, same thread count): `Selector.select_batch` on 16 questions at once vs
16 `Selector.select` calls, median over `--offline-rounds` rounds of different questions, split into
prompt building (tokenising, not batched) and the forward pass. That ratio is the most batching can give on
this machine; the server adds HTTP and JSON work per request that batching does not share.

Target: batched throughput ≥ 3× one at a time (issue 23). On the 2-core reference machine it is not met,
and the model-only ratio says why: on CPU a forward pass of this model costs mostly in proportion to the
tokens it reads (matrix products over ~360 tokens a prompt), which a batch does not reduce; a batch shares
only the per-pass fixed costs (Python dispatch, the 151,936 × 64 output layer read once for the last
position). Prompt building (3-4 ms a question) is not batched at all. So 16 prompts in one call cost about
60% of 16 calls, not a sixteenth. In the server the one worker thread computes all the time in both
configurations, and the event loop's per-request work (HTTP, validation, JSON) competes with it for the
interpreter. With 16 clients the batches settle at ~8: the gather's wait is counted from its oldest
request's arrival, so the requests that queued while a batch ran are taken at once, and the clients
answered by that batch form the next one.

Settings tried while writing this (3 rounds of 16 clients × 16 requests each, 1 server thread unless
named; served = batched over one at a time; model-only = the offline ratio above):

* this shape, passages cut to 40 tokens (~364-token prompts): served 1.43× (71 → 102 queries/s),
  model-only 1.61× (forward alone 1.84×, prompt building 3.0 ms a question);
* passages cut to 20 tokens (~243-token prompts): served 1.80× (79 → 143), model-only 1.94× (forward
  alone 2.45×);
* 2 server threads: served 1.45× (105 → 153), model-only 1.67×;
* half the shape (1 layer, hidden 32, intermediate 64): served 1.54× (106 → 164), model-only 1.35×;
* the selector benchmark's shape (4 layers, hidden 256, intermediate 1024; 43M parameters): served 1.19×
  (15.5 → 18.4), model-only 1.11× (forward alone 1.09×): compute bound.

None comes near 3× on CPU: batching pays where one pass of 16 costs little more than one pass (a GPU, where
a small model's pass is dominated by fixed per-pass costs). The GPU part of the issue (a 7B-shaped selector
at K1 = 20: p50 latency and queries/s at the best batch against the compute floor) is not implemented here:
no GPU was lent to this task. ``--device cuda --dtype bfloat16`` runs this same tiny setup on a GPU (only
``--device cpu`` was exercised). Other processes share the reference machine; the load average at start and
end is recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
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

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 3.0
OFFLINE_BATCH = 16
CONFIGS = {"one_at_a_time": {"max_batch": 1, "max_wait_ms": 0.0}, "batched": {"max_batch": 16, "max_wait_ms": 5.0}}
SCORE_TOLERANCE = 1e-3  # server scores vs offline Selector.select on the same input (padding: ~1e-6)
SERVE_PACKAGES = ("fastapi", "starlette", "uvicorn", "httpx", "prometheus-client", "numpy")


# ------------------------------------------------------------------------------------------- setup


def _questions(n: int, k1: int) -> tuple[list[tuple[str, list[dict[str, str]]]], str]:
    """The first `n` questions with their first `k1` paragraphs as {title, text} documents."""
    sample = sample_data_dir()
    if sample is not None:
        source = sample / SAMPLE_FILES["hotpotqa"]
    else:
        source = Path(purecover.__file__).parent / "data" / "demo" / "demo_hotpot.json"
    records = json.loads(source.read_text(encoding="utf-8"))
    out = []
    for rec in records:
        docs = [{"title": t, "text": "".join(s).strip()} for t, s in rec["context"]]
        docs = [d for d in docs if d["text"]][:k1]
        if len(docs) == k1:
            out.append((rec["question"], docs))
        if len(out) == n:
            return out, str(source)
    raise RuntimeError(f"{source}: only {len(out)} questions with {k1} paragraphs, {n} asked for")


def _selector_dir(root: Path, tokenizer_dir: Path, model: dict[str, int], k1: int, passage_tokens: int,
                  seed: int) -> Path:
    """A random-weight tiny Qwen2 saved as an exported selector folder (selector_config.json included)."""
    model_dir = build_tiny_model(root / "selector", tokenizer_dir, "qwen2", seed=seed, **model)
    from transformers import AutoTokenizer

    scheme = IdentifierScheme("letters").check(AutoTokenizer.from_pretrained(model_dir), k1)
    config = {"base_model": "tiny-random-qwen2", "identifiers": scheme.to_dict(), "prompt_template": prompt_template(),
              "k1": k1, "tau3": 0.0, "k_max": 5, "min_select": 1, "purecover_version": purecover.__version__,
              "max_passage_tokens": passage_tokens}
    atomic_write_json(model_dir / "selector_config.json", config)
    return model_dir


# ------------------------------------------------------------------------------------------- offline


def _offline(selector: Selector, questions: list[tuple[str, list[dict[str, str]]]], rounds: int) -> dict[str, Any]:
    """select_batch of 16 vs 16 select calls, and the same split into prompt building and forward passes."""
    model, tok = selector.backend.model, selector.tokenizer
    pad = selector.backend.pad_id

    def chunk(r: int) -> list[tuple[str, list[dict[str, str]]]]:
        start = (r * OFFLINE_BATCH) % max(1, len(questions) - OFFLINE_BATCH + 1)
        return questions[start : start + OFFLINE_BATCH]

    def one_by_one(qs: list) -> None:
        for q, d in qs:
            selector.select(q, d)

    def batched(qs: list) -> None:
        selector.select_batch([q for q, _ in qs], [d for _, d in qs])

    batched(chunk(0))  # warm-up: both paths, both shapes
    one_by_one(chunk(0)[:4])
    per_round = []
    for r in range(rounds):
        qs = chunk(r)
        timed = {}
        for name, fn in (("one", one_by_one), ("batch", batched))[:: 1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            fn(qs)
            timed[name] = (time.perf_counter() - t0) / len(qs)
        t0 = time.perf_counter()
        prompts = [build_selector_prompt(tok, q, d, selector.scheme, selector.max_passage_tokens,
                                         selector.wording).input_ids for q, d in qs]
        prompt_s = (time.perf_counter() - t0) / len(qs)
        idents = [selector.scheme.token_ids[: len(d)] for _, d in qs]
        t0 = time.perf_counter()
        for p, ids in zip(prompts, idents):
            hf_identifier_logits(model, [p], [ids], batch_size=1, pad_id=pad)
        forward_one = (time.perf_counter() - t0) / len(qs)
        t0 = time.perf_counter()
        hf_identifier_logits(model, prompts, idents, batch_size=len(prompts), pad_id=pad)
        forward_batch = (time.perf_counter() - t0) / len(qs)
        per_round.append({"round": r, "one_ms_per_query": 1e3 * timed["one"],
                          "batch_ms_per_query": 1e3 * timed["batch"], "ratio": timed["one"] / timed["batch"],
                          "prompt_ms_per_query": 1e3 * prompt_s, "forward_one_ms_per_query": 1e3 * forward_one,
                          "forward_batch_ms_per_query": 1e3 * forward_batch, "forward_ratio": forward_one / forward_batch})
        print(f"[offline {r}] 16 x select {1e3 * timed['one']:.2f} ms/q | select_batch(16) "
              f"{1e3 * timed['batch']:.2f} ms/q ({timed['one'] / timed['batch']:.2f}x) | prompt "
              f"{1e3 * prompt_s:.2f} ms/q, forward {1e3 * forward_one:.2f} vs {1e3 * forward_batch:.2f} ms/q", flush=True)
    median = {k: statistics.median(r[k] for r in per_round) for k in per_round[0] if k != "round"}
    return {"batch": OFFLINE_BATCH, "rounds": per_round, "median": median}


# ------------------------------------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class Server:
    """One `purecover serve` subprocess on a free loopback port; `stop` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, selector_dir: Path, *, max_batch: int, max_wait_ms: float, threads: int, device: str,
                 dtype: str, log_path: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "purecover", "serve", str(selector_dir), "--host", "127.0.0.1",
                        "--port", str(self.port), "--device", device, "--dtype", dtype, "--max-batch", str(max_batch),
                        "--max-wait-ms", f"{max_wait_ms:g}", "--log-level", "WARNING"]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(self.command, env=env, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with status {self.process.returncode}: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server on {self.url} was not ready within {timeout:g} s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
        return self.process.returncode


def _metrics(text: str) -> dict[str, float]:
    """The unlabelled batch histogram sums and counts of a /metrics page."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"purecover_batch_size", "purecover_batch_seconds"}
    return {s.name: float(s.value) for family in text_string_to_metric_families(text) if family.name in wanted
            for s in family.samples if s.name.endswith(("_sum", "_count"))}


async def _load(url: str, questions: list, reference: list[list[float]], clients: int, per_client: int,
                warmup: int, timeout: float) -> dict[str, Any]:
    """`clients` loops of `per_client` requests each (after `warmup` each, untimed); latencies, wall, metrics."""
    import httpx

    latencies: list[float] = []
    worst_diff = 0.0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60.0), limits=limits) as client:

        async def request(c: int, i: int, record: bool) -> None:
            nonlocal worst_diff
            qi = (c * 7 + i) % len(questions)
            question, docs = questions[qi]
            t0 = time.perf_counter()
            response = await client.post("/v1/select", json={"query": question, "documents": docs})
            seconds = time.perf_counter() - t0
            if response.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
            scores = response.json()["scores"]
            if len(scores) != len(reference[qi]):
                raise RuntimeError(f"{url}: {len(scores)} scores for {len(reference[qi])} documents (question {qi})")
            diff = max(abs(a - b) for a, b in zip(scores, reference[qi]))
            if diff > SCORE_TOLERANCE:
                raise RuntimeError(f"{url}: question {qi}: scores differ from the offline selector by {diff:.2e}")
            worst_diff = max(worst_diff, diff)
            if record:
                latencies.append(seconds)

        async def loop(c: int, start: int, n: int, record: bool) -> None:
            for i in range(start, start + n):
                await request(c, i, record)

        await asyncio.wait_for(asyncio.gather(*(loop(c, 0, warmup, False) for c in range(clients))), timeout)
        before = _metrics((await client.get("/metrics")).text)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(loop(c, warmup, per_client, True) for c in range(clients))), timeout)
        wall = time.perf_counter() - t0
        client_cpu = time.process_time() - cpu0
        after = _metrics((await client.get("/metrics")).text)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    batches = delta.get("purecover_batch_size_count", 0.0)
    ms = 1e3 * np.asarray(latencies)
    return {"requests": len(latencies), "wall_s": wall, "qps": len(latencies) / wall,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max()), "batches": int(batches),
            "mean_batch": delta.get("purecover_batch_size_sum", 0.0) / batches if batches else None,
            "model_ms_per_batch": 1e3 * delta.get("purecover_batch_seconds_sum", 0.0) / batches if batches else None,
            "client_cpu_s": client_cpu, "max_abs_score_diff_vs_offline": worst_diff}


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median throughput (the lower middle one for an even count)."""
    ordered = sorted(rounds, key=lambda r: r["qps"])
    return ordered[(len(ordered) - 1) // 2]


# ------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/serve.json")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--requests-per-client", type=int, default=40, help="timed requests per client per round")
    parser.add_argument("--warmup-per-client", type=int, default=2, help="untimed requests per client per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per configuration (>= 3)")
    parser.add_argument("--offline-rounds", type=int, default=5)
    parser.add_argument("--questions", type=int, default=64, help="distinct questions the requests cycle through")
    parser.add_argument("--server-threads", type=int, default=1, help="torch threads of the server (and offline)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda[:N] (server and offline selector)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--k1", type=int, default=6)
    parser.add_argument("--passage-tokens", type=int, default=40, help="the selector's max_passage_tokens")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=128)
    parser.add_argument("--tokenizer", default=None, help="a Qwen2 tokenizer folder (default: the sample folder's)")
    parser.add_argument("--round-timeout", type=float, default=300.0, help="seconds one round may take")
    parser.add_argument("--seed", type=int, default=0)
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    if args.rounds < 3:
        parser.error("--rounds must be >= 3")
    if min(args.clients, args.requests_per_client, args.offline_rounds, args.server_threads) < 1:
        parser.error("--clients, --requests-per-client, --offline-rounds and --server-threads must be >= 1")
    if args.questions < OFFLINE_BATCH:
        parser.error(f"--questions must be >= {OFFLINE_BATCH}")
    sample = sample_data_dir()
    tokenizer_dir = Path(args.tokenizer) if args.tokenizer else (sample / "qwen2_tokenizer" if sample else None)
    if tokenizer_dir is None or not tokenizer_dir.is_dir():
        raise SystemExit("a Qwen2 tokenizer folder is needed: --tokenizer DIR, or PURECOVER_SAMPLE_DATA set to the "
                         "sample data folder (with qwen2_tokenizer/)")
    load_at_start = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    torch.set_num_threads(args.server_threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    model_shape = {"hidden_size": args.hidden, "num_layers": args.layers, "num_heads": args.heads,
                   "num_kv_heads": args.kv_heads, "intermediate_size": args.intermediate}

    with tempfile.TemporaryDirectory(prefix="purecover-bench-serve-") as tmp:
        sel_dir = _selector_dir(Path(tmp), tokenizer_dir, model_shape, args.k1, args.passage_tokens, args.seed)
        selector = Selector.from_pretrained(sel_dir, device=args.device, dtype=args.dtype, batch_size=OFFLINE_BATCH)
        n_params = sum(p.numel() for p in selector.backend.model.parameters())
        vocab = selector.backend.model.config.vocab_size
        questions, source = _questions(args.questions, args.k1)
        lengths = [len(build_selector_prompt(selector.tokenizer, q, d, selector.scheme, selector.max_passage_tokens,
                                             selector.wording).input_ids) for q, d in questions]
        reference = [selector.select(q, d).logits for q, d in questions]  # one at a time: the offline answer
        offline = _offline(selector, questions, args.offline_rounds)
        selector.close()

        servers: dict[str, Server] = {}
        rounds: list[dict[str, Any]] = []
        try:
            for name, config in CONFIGS.items():
                servers[name] = Server(sel_dir, threads=args.server_threads, device=args.device, dtype=args.dtype,
                                       log_path=Path(tmp) / f"server-{name}.log", **config)
            for server in servers.values():
                server.wait_ready(timeout=180.0)
            command = servers["batched"].command
            for r in range(args.rounds):
                for name in list(CONFIGS)[:: 1 if r % 2 == 0 else -1]:
                    server = servers[name]
                    cpu0 = _cpu_seconds(server.process.pid)
                    measured = asyncio.run(_load(server.url, questions, reference, args.clients,
                                                 args.requests_per_client, args.warmup_per_client, args.round_timeout))
                    cpu1 = _cpu_seconds(server.process.pid)
                    measured["server_cpu_s"] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
                    rounds.append({"round": r, "config": name, **measured})
                    print(f"[round {r}] {name:>13}: {measured['qps']:.1f} q/s, p50 {measured['p50_ms']:.1f} ms, "
                          f"p99 {measured['p99_ms']:.1f} ms, mean batch {measured['mean_batch']:.2f}, model "
                          f"{measured['model_ms_per_batch']:.1f} ms/batch, server CPU {measured['server_cpu_s']} s, "
                          f"client CPU {measured['client_cpu_s']:.1f} s, wall {measured['wall_s']:.1f} s", flush=True)
        finally:
            for name, server in servers.items():
                status = server.stop()
                if status not in (0, None):
                    print(f"server {name} exited with status {status}: {server.log_tail(500)}", file=sys.stderr)

    by_config = {name: [r for r in rounds if r["config"] == name] for name in CONFIGS}
    median = {name: _median_round(rs) for name, rs in by_config.items()}
    ratio = median["batched"]["qps"] / median["one_at_a_time"]["qps"]
    per_round_ratio = [b["qps"] / o["qps"] for o, b in zip(by_config["one_at_a_time"], by_config["batched"])]
    result = {
        "benchmark": "serve",
        "date": now(),
        "seed": args.seed,
        "setting": {
            "model": {"arch": "qwen2 (random weights)", **model_shape, "vocab_size": vocab, "parameters": n_params,
                      "dtype": args.dtype, "attn_implementation": "sdpa"},
            "tokenizer": "Qwen2 (real)", "k1": args.k1, "passage_tokens": args.passage_tokens,
            "questions_source": source, "questions": len(questions),
            "prompt_tokens_median": statistics.median(lengths), "prompt_tokens_min": min(lengths),
            "prompt_tokens_max": max(lengths),
            "clients": args.clients, "requests_per_client": args.requests_per_client,
            "warmup_per_client": args.warmup_per_client, "rounds": args.rounds, "offline_rounds": args.offline_rounds,
            "configs": CONFIGS, "server_threads": args.server_threads, "device": args.device,
            "endpoint": "POST /v1/select", "server_command": command,
            "load_average_at_start": load_at_start,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "shared_machine": "other processes (agents, tests) ran on the same machine during the measurement",
        },
        "rounds": rounds,
        "median_round": median,
        "ratios": {"batched_over_one_at_a_time_throughput": ratio, "per_round": per_round_ratio,
                   "model_only_batch_over_one": offline["median"]["ratio"],
                   "forward_only_batch_over_one": offline["median"]["forward_ratio"]},
        "offline": offline,
        "target": {"batched_over_one_at_a_time_throughput_min": TARGET_RATIO, "pass": ratio >= TARGET_RATIO},
        "checks": {"max_abs_score_diff_vs_offline": max(r["max_abs_score_diff_vs_offline"] for r in rounds),
                   "tolerance": SCORE_TOLERANCE, "all_responses_200": True},
        "total_seconds": time.perf_counter() - t_start,
        "machine": machine_info(),
        "versions": package_versions(SERVE_PACKAGES),
    }
    harness.write(args.out, result, rows)
    one, bat = median["one_at_a_time"], median["batched"]
    print(f"one at a time {one['qps']:.1f} q/s (p50 {one['p50_ms']:.1f} ms, p99 {one['p99_ms']:.1f} ms) | batched "
          f"{bat['qps']:.1f} q/s (p50 {bat['p50_ms']:.1f} ms, p99 {bat['p99_ms']:.1f} ms, mean batch "
          f"{bat['mean_batch']:.2f}) | {ratio:.2f}x (target >= {TARGET_RATIO:g}x: "
          f"{'PASS' if result['target']['pass'] else 'FAIL'}) | model-only {offline['median']['ratio']:.2f}x")
    print(f"wrote {args.out} ({result['total_seconds']:.1f}s)")
    return 0


def rows(result: dict) -> list[dict]:
    """The summary rows: per configuration throughput and p50 / p99 latency, the ratio, the batch, the ceiling."""
    table = Rows(result)
    setting, median, ratios = result["setting"], result["median_round"], result["ratios"]
    where = (f"{setting['clients']} clients x {setting['requests_per_client']} requests, K1={setting['k1']}, "
             f"median of {setting['rounds']} rounds")
    labels = {"one_at_a_time": "one at a time (max-batch 1)",
              "batched": f"batched (max-batch {setting['configs']['batched']['max_batch']}, max-wait "
                         f"{setting['configs']['batched']['max_wait_ms']:g} ms)"}
    for name, label in labels.items():
        table.add("serve.throughput", median[name]["qps"], "queries/s", variant=label, note=where)
        table.add("serve.p50_latency", median[name]["p50_ms"], "ms", variant=label)
        table.add("serve.p99_latency", median[name]["p99_ms"], "ms", variant=label)
    one, bat = median["one_at_a_time"]["qps"], median["batched"]["qps"]
    table.add("serve.batched_over_one_at_a_time_throughput", ratios["batched_over_one_at_a_time_throughput"], "x",
              at_least(TARGET_RATIO),
              note=f"{bat:.1f} vs {one:.1f} queries/s; rounds {min(ratios['per_round']):.2f}-"
                   f"{max(ratios['per_round']):.2f}x; model-only ceiling {ratios['model_only_batch_over_one']:.2f}x; "
                   f"{setting['server_threads']} server thread(s), machine shared with other processes")
    table.add("serve.mean_batch_size", median["batched"]["mean_batch"], "requests", variant=labels["batched"],
              note=f"from /metrics; {median['batched']['model_ms_per_batch']:.1f} ms model time per batch")
    off = result["offline"]["median"]
    table.add("serve.model_only_batch_over_one", ratios["model_only_batch_over_one"], "x",
              note=f"Selector.select_batch of {result['offline']['batch']} vs one at a time, no HTTP: "
                   f"{off['batch_ms_per_query']:.2f} vs {off['one_ms_per_query']:.2f} ms/query; forward alone "
                   f"{off['forward_ratio']:.2f}x, prompt building {off['prompt_ms_per_query']:.2f} ms/query")
    return table.rows


if __name__ == "__main__":
    raise SystemExit(main())
