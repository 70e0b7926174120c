"""Fixtures for `purecover serve`: the models tests' tiny trained selector, real servers on loopback, helpers.

Servers get a `Selector` of their own (`served_selector`: `create_app` raises its HF batch_size to
max_batch); the shared `selector` fixture is the offline reference the answers are compared with.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from tests.models import conftest as _models

# The models tests' session fixtures: one trained, exported tiny selector (skipped without the sample data).
selector_run, selector_dir, selector, candidates = (_models.selector_run, _models.selector_dir, _models.selector,
                                                    _models.candidates)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

HTTP_TIMEOUT = 30.0  # seconds: every request in these tests


@pytest.fixture(scope="session")
def served_selector(selector_dir):
    """A second instance of the tiny selector, for the servers (never the shared offline reference)."""
    from purecover.models.selector import Selector

    return Selector.from_pretrained(selector_dir, device="cpu", dtype="float32")


@contextmanager
def running(target: Any, *, model_name: str = "tiny", server: dict[str, Any] | None = None,
            **options: Any) -> Iterator[tuple[str, Any]]:
    """(base URL, app) of `create_app(target, ...)` (a Selector) served by a real uvicorn on a free loopback port;
    `server`: `serve_in_thread` options (head_timeout, max_connections)."""
    from purecover.serve.app import create_app
    from purecover.serve.server import serve_in_thread

    app = create_app(target, model_name=model_name, **options)
    with serve_in_thread(app, startup_timeout=60, shutdown_timeout=30, **(server or {})) as url:
        yield url, app


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def batches_above_one(text: str) -> float:
    """How many model calls had more than one request, from the purecover_batch_size histogram."""
    samples = metric_samples(text)
    return samples[("purecover_batch_size_count", ())] - samples[("purecover_batch_size_bucket", (("le", "1.0"),))]


def offline_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1"}


class GateBackend:
    """A backend wrapper whose calls wait until `gate` is set (at most 60 s), recording each call's size.

    `entered` is set when a call starts waiting: a test knows a batch is in the model.
    """

    name = "gated"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.score_space = inner.score_space
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[int] = []

    def identifier_logits(self, prompts: Sequence[Sequence[int]],
                          identifier_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        self.calls.append(len(prompts))
        self.entered.set()
        if not self.gate.wait(60):
            raise RuntimeError("the test never opened the gate")
        return self.inner.identifier_logits(prompts, identifier_ids)

    def close(self) -> None:
        pass


def gated_selector(base: Any) -> tuple[Any, GateBackend]:
    from purecover.models.selector import Selector

    backend = GateBackend(base.backend)
    return Selector(base.tokenizer, base.config, backend), backend


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


def fake_vllm_logprobs(model: Any) -> types.ModuleType:
    """A `vllm` stand-in whose engine refuses logprobs_mode="processed_logits" and accepts "processed_logprobs":
    it scores each prompt with the real HF `model` and returns, like vLLM, the top-`logprobs` log-softmax
    entries of the logits masked to the allowed tokens (so the selector reads the "logprob" score space)."""
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.0-fake-serve"
    mod.llm_kwargs = []
    mod.generate_sizes = []

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            mod.llm_kwargs.append(kwargs)
            if kwargs.get("logprobs_mode") == "processed_logits":
                raise NotImplementedError("processed_logits is not supported by this engine")
            self.mode = kwargs.get("logprobs_mode")

        def generate(self, requests: list[dict], params: list[SamplingParams], use_tqdm: bool = True) -> list[Any]:
            mod.generate_sizes.append(len(requests))
            outputs = []
            for req, p in zip(requests, params):
                allowed = p.kwargs["allowed_token_ids"]
                with torch.no_grad():
                    row = model(torch.tensor([req["prompt_token_ids"]]), logits_to_keep=1).logits[0, -1].double()
                scores = torch.full_like(row, -math.inf)
                scores[allowed] = row[allowed]
                scores = torch.log_softmax(scores, -1)
                top = torch.topk(scores, p.kwargs["logprobs"])
                entries = {int(t): _Logprob(float(v)) for t, v in zip(top.indices, top.values)}
                outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(logprobs=[entries])]))
            return outputs

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod


@pytest.fixture(scope="session")
def plain_model(selector_dir):
    """The exported selector's causal LM, loaded on its own (for the vLLM stand-in)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(selector_dir, dtype=torch.float32).eval()


def docs_of(rec, n=None) -> list[dict]:
    """The first `n` candidates of a candidates.jsonl record as ``{"title", "text"}`` (title None when empty)."""
    return [{"title": d.get("title") or None, "text": d["text"]} for d in rec["docs"][:n]]


def wire(docs) -> list[dict]:
    """`docs_of` documents as sent in a request body (no null titles)."""
    return [{k: v for k, v in d.items() if v is not None} for d in docs]
