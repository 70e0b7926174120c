"""Real clients against a real server on loopback: the Cohere SDK's ClientV2.rerank, purecover's RemoteSelector,
and a bounded concurrent load test (no lost or mixed-up answers; every answer equals the offline Selector)."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.serve.conftest import HTTP_TIMEOUT, batches_above_one, docs_of, metric_samples, running

API_KEY = "test-key-123"


@pytest.fixture(scope="module")
def server(served_selector):
    with running(served_selector, model_name="tiny-selector", api_key=API_KEY, max_batch=16,
                 max_wait_ms=15) as (url, _):
        yield url


# --------------------------------------------------------------------------- cohere


def test_cohere_client_v2_rerank(server, selector, candidates):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(base_url=server, api_key=API_KEY, timeout=HTTP_TIMEOUT)
    for rec in candidates[:3]:
        texts = [d["text"] for d in rec["docs"]]
        response = client.rerank(model="tiny-selector", query=rec["question"], documents=texts)
        want = selector.select(rec["question"], texts)
        order = sorted(range(len(texts)), key=lambda k: (-want.logits[k], k))
        assert [r.index for r in response.results] == order
        assert all(0 < r.relevance_score < 1 for r in response.results)
        kept = [r.index for r in response.results if r.relevance_score > 0.5]
        passing = [k for k in order if want.logits[k] > selector.threshold]
        assert kept == passing
        # purecover's own fields survive the SDK's parsing (extra fields are kept)
        extra = response.model_dump()
        assert extra["selected"] == want.indices
        assert [r["selected"] for r in extra["results"]] == [k in want.indices for k in order]
        np.testing.assert_allclose([r["logit"] for r in extra["results"]], [want.logits[k] for k in order],
                                   atol=1e-4, rtol=0)
        assert response.id and response.meta is not None
    top = client.rerank(model="tiny-selector", query=candidates[0]["question"],
                        documents=[d["text"] for d in candidates[0]["docs"]], top_n=2)
    assert len(top.results) == 2


def test_cohere_client_errors(server, selector):
    cohere = pytest.importorskip("cohere")
    from cohere.errors import BadRequestError, UnauthorizedError

    with pytest.raises(UnauthorizedError):
        cohere.ClientV2(base_url=server, api_key="wrong", timeout=HTTP_TIMEOUT).rerank(
            model="m", query="q", documents=["a"])
    client = cohere.ClientV2(base_url=server, api_key=API_KEY, timeout=HTTP_TIMEOUT)
    with pytest.raises(BadRequestError) as err:
        client.rerank(model="m", query="q", documents=[f"d{i}" for i in range(selector.k1 + 1)])
    assert f"k1={selector.k1}" in str(err.value.body)


# --------------------------------------------------------------------------- RemoteSelector


def test_remote_selector_matches_the_selector(server, selector, candidates):
    from purecover.models.selector import SelectionResult
    from purecover.serve.client import RemoteSelector, RemoteSelectorError

    class Doc:  # an object with .text / .title, as the adapters pass
        def __init__(self, title, text):
            self.title, self.text = title, text

    with RemoteSelector(server, api_key=API_KEY, timeout=HTTP_TIMEOUT) as remote:
        assert remote.k1 == selector.k1 and remote.threshold == pytest.approx(selector.threshold)
        assert remote.score_space == "logit" and remote.model_name == "tiny-selector"
        assert remote.k_max == selector.k_max and remote.min_select == selector.min_select
        rec = candidates[0]
        for docs in (docs_of(rec), [d["text"] for d in rec["docs"]], [Doc(d["title"], d["text"]) for d in rec["docs"]]):
            got = remote.select(rec["question"], docs)
            want = selector.select(rec["question"], docs)
            assert isinstance(got, SelectionResult) and got.indices == want.indices
            np.testing.assert_allclose(got.logits, want.logits, atol=1e-4, rtol=0)
            assert got.score_space == "logit"
        s = sorted(want.logits)
        tau = (s[1] + s[2]) / 2
        assert remote.select(rec["question"], docs_of(rec), tau=tau, k_max=2).indices == \
            selector.select(rec["question"], docs_of(rec), tau=tau, k_max=2).indices
        qs = [c["question"] for c in candidates[:6]]
        dl = [docs_of(c, n) for c, n in zip(candidates[:6], (6, 5, 4, 3, 2, 1))]
        got = remote.select_batch(qs, dl)
        want = selector.select_batch(qs, dl)
        assert [g.indices for g in got] == [w.indices for w in want]
        with pytest.raises(ValueError, match=rf"at most k1={selector.k1}") as err:
            remote.select("q", [f"d{i}" for i in range(selector.k1 + 1)])
        assert isinstance(err.value, RemoteSelectorError) and err.value.status == 400
        with pytest.raises(ValueError, match="document 0 has an empty text"):
            remote.select("q", [" "])
        with pytest.raises(TypeError, match="candidate 0"):
            remote.select("q", [3])
    with RemoteSelector(server, api_key="wrong") as bad, pytest.raises(RemoteSelectorError) as err:
        bad.select("q", ["a"])
    assert err.value.status == 401 and not isinstance(err.value, ValueError)
    with RemoteSelector("http://127.0.0.1:9", timeout=2) as nowhere, pytest.raises(RemoteSelectorError) as err:
        _ = nowhere.k1
    assert err.value.status == 0 and "no answer" in str(err.value)


# --------------------------------------------------------------------------- load test

CLIENTS, REQUESTS = 8, 6


def test_concurrent_load_no_lost_or_mixed_up_answers(server, served_selector, selector, candidates):
    """8 clients x 6 requests, each a different (question, document count, rule); every answer is the offline
    Selector's answer for that request's own input, some model calls held several requests, and each model
    call was one forward pass (the HF batch_size was raised to max_batch)."""
    assert served_selector.backend.batch_size >= 16
    forward_passes = []
    hook = served_selector.backend.model.register_forward_hook(lambda *_: forward_passes.append(1))
    rng = random.Random(7)
    plan = []
    for c in range(CLIENTS):
        for m in range(REQUESTS):
            rec = candidates[rng.randrange(len(candidates))]
            n = rng.randint(1, len(rec["docs"]))
            docs = docs_of(rec, n)
            rng.shuffle(docs)
            rule = rng.choice([{}, {"k_max": 1}, {"min_select": 2}, {"k_max": 2, "min_select": 1}])
            plan.append((c, m, rec["question"], docs, rule))
    want = {(c, m): selector.select(q, d, k_max=r.get("k_max"), min_select=r.get("min_select"))
            for c, m, q, d, r in plan}
    with httpx.Client(base_url=server, timeout=HTTP_TIMEOUT, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        before = metric_samples(c.get("/metrics").text)
    barrier = threading.Barrier(CLIENTS, timeout=HTTP_TIMEOUT)

    def client(cid: int):
        out = {}
        with httpx.Client(base_url=server, timeout=HTTP_TIMEOUT, headers={"Authorization": f"Bearer {API_KEY}"}) as h:
            barrier.wait()
            for c, m, q, d, r in plan:
                if c != cid:
                    continue
                wire = [{k: v for k, v in doc.items() if v is not None} for doc in d]
                resp = h.post("/v1/select", json={"query": q, "documents": wire, **r})
                out[(c, m)] = (resp.status_code, resp.json())
        return out

    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            results = {}
            for part in pool.map(client, range(CLIENTS)):
                results.update(part)
    finally:
        hook.remove()
    assert sorted(results) == sorted(want)  # none lost
    for key, (status, body) in results.items():
        assert status == 200, body
        w = want[key]
        assert body["selected"] == w.indices, key
        assert len(body["scores"]) == len(w.logits)  # not another request's documents
        np.testing.assert_allclose(body["scores"], w.logits, atol=1e-4, rtol=0, err_msg=str(key))
    with httpx.Client(base_url=server, timeout=HTTP_TIMEOUT) as c:
        text = c.get("/metrics").text
    after = metric_samples(text)
    ok = ("purecover_requests_total", (("endpoint", "/v1/select"), ("status", "200")))
    assert after[ok] - before.get(ok, 0) == CLIENTS * REQUESTS
    batched = batches_above_one(text)
    assert batched >= 1, "no model call gathered more than one request"
    calls = after[("purecover_batch_size_count", ())] - before[("purecover_batch_size_count", ())]
    assert calls < CLIENTS * REQUESTS  # fewer model calls than requests
    assert len(forward_passes) == calls  # one forward pass per gathered batch
    docs_scored = after[("purecover_documents_scored_total", ())] - before[("purecover_documents_scored_total", ())]
    assert docs_scored == sum(len(d) for _, _, _, d, _ in plan)


# A client process in which the framework's heavy dependencies cannot be imported: what `pip install httpx` plus
# the RAG framework gives a remote user (issue: RemoteSelector and the adapters' from_url must not need torch).
_NO_HEAVY_CLIENT = r'''
import json, sys
BLOCKED = {"torch", "transformers", "peft", "accelerate", "deepspeed", "datasets", "wandb", "fastapi", "uvicorn",
           "bm25s", "matplotlib", "sentence_transformers", "gguf", "safetensors"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked in this test: {name}")
sys.meta_path.insert(0, Block())
url, key, question, texts = json.loads(sys.stdin.read())
docs = [{"title": f"t{i}", "text": t} for i, t in enumerate(texts)]
out = {}
from purecover.serve.client import RemoteSelector
with RemoteSelector(url, api_key=key) as remote:
    out["remote"] = remote.select(question, docs).indices
from langchain_core.documents import Document as LCDocument
from purecover.integrations.langchain import PurecoverCompressor
kept = PurecoverCompressor.from_url(url, api_key=key).compress_documents(
    [LCDocument(page_content=d["text"], metadata={"title": d["title"]}) for d in docs], question)
out["langchain"] = [d.metadata["purecover_index"] for d in kept]
from llama_index.core.schema import NodeWithScore, TextNode
from purecover.integrations.llamaindex import PurecoverNodePostprocessor
nodes = [NodeWithScore(node=TextNode(text=d["text"], metadata={"title": d["title"]})) for d in docs]
kept = PurecoverNodePostprocessor.from_url(url, api_key=key).postprocess_nodes(nodes, query_str=question)
out["llamaindex"] = [n.node.metadata["purecover_index"] for n in kept]
from haystack import Document as HSDocument
from haystack.utils import Secret
from purecover.integrations.haystack import PurecoverSelector
component = PurecoverSelector(base_url=url, api_key=Secret.from_token(key))
component.warm_up()
kept = component.run(question, [HSDocument(content=d["text"], meta={"title": d["title"]}) for d in docs])
out["haystack"] = [d.meta["purecover_index"] for d in kept["documents"]]
out["heavy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps(out))
'''


def test_remote_client_and_adapters_need_no_torch(server, selector, candidates):
    """RemoteSelector and the three adapters' from_url, in a process where torch, transformers, FastAPI and the
    other heavy dependencies cannot be imported, select exactly what the in-process Selector selects."""
    import json
    import subprocess
    import sys

    for name in ("langchain_core", "llama_index.core", "haystack"):
        pytest.importorskip(name)
    rec = candidates[0]
    texts = [d["text"] for d in rec["docs"]]
    want = selector.select(rec["question"], [{"title": f"t{i}", "text": t} for i, t in enumerate(texts)]).indices
    done = subprocess.run([sys.executable, "-c", _NO_HEAVY_CLIENT], input=json.dumps(
        [server, API_KEY, rec["question"], texts]), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("heavy_loaded") == []
    assert out == {"remote": want, "langchain": want, "llamaindex": want, "haystack": want}
