"""`purecover serve` as users run it, in a subprocess: SIGKILL under load, restart on the same port (it serves
correct answers again), then SIGTERM with requests in flight (all answered, exit status 0). Every wait is
bounded and every process is killed at the end of the test."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.serve.conftest import HTTP_TIMEOUT, docs_of, free_port, metric_samples, offline_env, wire

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0  # seconds for a server process to load the model and listen


@pytest.fixture
def processes():
    """Server processes of a test; any still alive at the end is killed (never left behind)."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # a process we cannot reap: nothing more to do
            proc.wait(timeout=30)


def _start(processes, selector_dir: Path, port: int, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "purecover", "serve", str(selector_dir), "--port", str(port), "--device", "cpu",
           "--dtype", "float32", "--model-name", "tiny", "--log-level", "INFO", *extra]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=offline_env(), stdout=out, stderr=subprocess.STDOUT)
    processes.append(proc)
    return proc


def _tail(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-4000:]


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"purecover serve exited ({proc.returncode}) before it was ready:\n{_tail(log)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"purecover serve not ready after {START_TIMEOUT:.0f} s:\n{_tail(log)}")
        time.sleep(0.1)


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _in_flight(url: str) -> float:
    try:
        return metric_samples(httpx.get(f"{url}/metrics", timeout=5).text)[("purecover_requests_in_flight", ())]
    except httpx.HTTPError:
        return -1.0


@pytest.mark.slow
def test_killed_under_load_restarted_then_sigterm_answers_in_flight_and_exits_0(
        processes, selector_dir, selector, candidates, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    inputs = [(c["question"], docs_of(c, n)) for c in candidates for n in (len(c["docs"]), 3)]
    want = [selector.select(q, d) for q, d in inputs]

    # 1. Under load from 4 clients, SIGKILL.
    proc = _start(processes, selector_dir, port, log)
    _wait_ready(proc, url, log)
    # it said what it was doing while the model loaded, and how long that took
    started = _tail(log)
    assert "purecover serve: loading" in started and "selector loaded in" in started
    assert started.index("loading") < started.index("selector loaded in") < started.index("on http://")
    stop = threading.Event()
    answers: list[tuple[int, dict, float]] = []  # (input index, body, time)
    failures: list[str] = []

    def load(seed: int) -> None:
        i = seed
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                q, d = inputs[i % len(inputs)]
                try:
                    r = client.post("/v1/select", json={"query": q, "documents": wire(d)})
                    if r.status_code == 200:
                        answers.append((i % len(inputs), r.json(), time.monotonic()))
                    else:
                        failures.append(f"HTTP {r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as exc:  # the server is down: expected between kill and restart
                    failures.append(type(exc).__name__)
                    stop.wait(0.05)
                i += 1

    threads = [threading.Thread(target=load, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    try:
        _wait_for(lambda: len(answers) >= 12, "answers under load")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        killed_at = time.monotonic()

        # 2. Restarted on the same port while the clients keep trying: it serves again.
        proc = _start(processes, selector_dir, port, log, "--max-wait-ms", "5000", "--max-batch", "64")
        _wait_ready(proc, url, log)
        _wait_for(lambda: sum(1 for *_, t in answers if t > killed_at) >= 4, "answers after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not [f for f in failures if f.startswith("HTTP")], failures[:5]  # only connection errors while down
    for i, body, _ in answers:
        assert body["selected"] == want[i].indices
        np.testing.assert_allclose(body["scores"], want[i].logits, atol=1e-4, rtol=0)

    # 3. SIGTERM with 3 requests in flight (held by the 5 s gather window): all answered, exit status 0.
    results: dict[int, httpx.Response] = {}

    def one(i: int) -> None:
        q, d = inputs[i]
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as client:
            results[i] = client.post("/v1/select", json={"query": q, "documents": wire(d)})

    senders = [threading.Thread(target=one, args=(i,), daemon=True) for i in (0, 3, 5)]
    for t in senders:
        t.start()
    _wait_for(lambda: _in_flight(url) == 3, "3 requests in flight", timeout=30)
    sigterm_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    for t in senders:
        t.join(timeout=HTTP_TIMEOUT)
    assert proc.wait(timeout=60) == 0, _tail(log)
    exited = time.time()
    assert time.monotonic() - sigterm_at < 30
    assert sorted(results) == [0, 3, 5]
    for i, r in results.items():
        assert r.status_code == 200, r.text
        assert r.json()["selected"] == want[i].indices
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "SIGTERM received" in text and "purecover serve: stopped" in text and "Traceback" not in text
    # nothing keeps the process alive once it says it stopped (no thread or child left to wait for): the exit
    # follows within seconds (issue 43 saw 15-30 s; 1.4-1.7 s measured here, busy cores)
    stamp = next(line for line in text.splitlines() if "purecover serve: stopped" in line)[:23]
    stopped = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert exited - stopped < 10, f"exited {exited - stopped:.1f} s after logging 'stopped'"
    with pytest.raises(httpx.ConnectError):  # nothing listens any more
        httpx.get(f"{url}/health", timeout=2)
