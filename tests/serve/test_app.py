"""The app over a real uvicorn on loopback, called like curl (raw httpx): every endpoint, validation, the API
key, per-request rules in one batch, long passages, 429 on a full queue, 503 while draining, the vLLM backend."""

from __future__ import annotations

import itertools
import math
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.serve.conftest import (
    HTTP_TIMEOUT,
    batches_above_one,
    docs_of,
    fake_vllm_logprobs,
    gated_selector,
    metric_samples,
    running,
    wire,
)


@pytest.fixture(scope="module")
def server(served_selector):
    with running(served_selector, model_name="tiny-selector", max_batch=8, max_wait_ms=20) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server[0], timeout=HTTP_TIMEOUT) as client:
        yield client


# --------------------------------------------------------------------------- endpoints


def test_health_and_models(http, selector):
    health = http.get("/health")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "model": "tiny-selector", "k1": selector.k1, "backend": "hf"}
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    (card,) = models["data"]
    assert card["id"] == "tiny-selector" and card["object"] == "model" and card["owned_by"] == "purecover"
    assert card["k1"] == selector.k1 and card["score_space"] == "logit"
    assert card["threshold"] == pytest.approx(selector.threshold)
    assert card["max_passage_tokens"] == selector.max_passage_tokens


def test_select_equals_the_offline_selector(http, selector, candidates):
    for rec in candidates[:4]:
        docs = docs_of(rec)
        r = http.post("/v1/select", json={"query": rec["question"], "documents": wire(docs)})
        assert r.status_code == 200, r.text
        body = r.json()
        want = selector.select(rec["question"], docs)
        assert body["model"] == "tiny-selector" and body["score_space"] == "logit"
        assert body["threshold"] == pytest.approx(selector.threshold)
        assert body["selected"] == want.indices
        np.testing.assert_allclose(body["scores"], want.logits, atol=1e-4, rtol=0)
        np.testing.assert_allclose(body["probabilities"], want.probabilities, atol=1e-5, rtol=0)


def test_the_curl_command_line_tool(server, selector, candidates):
    """The guide's curl calls, run with the real curl binary (argument list, no shell): select and rerank."""
    import json
    import shutil
    import subprocess

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    rec = candidates[1]
    docs = docs_of(rec)
    want = selector.select(rec["question"], docs)
    body = {"query": rec["question"], "documents": wire(docs)}
    for path, payload in (("/v1/select", json.dumps(body)), ("/v1/rerank", json.dumps({**body, "top_n": 2}))):
        out = subprocess.run([curl, "-sS", "--fail-with-body", "-X", "POST", f"{server[0]}{path}",
                              "-H", "Content-Type: application/json", "--data-binary", "@-"],
                             input=payload.encode(), capture_output=True, timeout=60, check=True)
        body = json.loads(out.stdout)
        if path == "/v1/select":
            assert body["selected"] == want.indices
        else:
            best = sorted(range(len(docs)), key=lambda k: (-want.logits[k], k))[:2]
            assert [r["index"] for r in body["results"]] == best
            assert [r["selected"] for r in body["results"]] == [k in want.indices for k in best]


def test_plain_string_documents_and_request_rules(http, selector, candidates):
    rec = candidates[1]
    texts = [d["text"] for d in rec["docs"]]
    want = selector.select(rec["question"], texts)
    body = http.post("/v1/select", json={"query": rec["question"], "documents": texts}).json()
    assert body["selected"] == want.indices
    # A request's own threshold / k_max / min_select, in the selector's score space.
    s = sorted(want.logits)
    tau = (s[2] + s[3]) / 2  # between two scores
    for rule in ({"threshold": tau}, {"threshold": tau, "k_max": 1}, {"threshold": 1e9, "min_select": 2}):
        body = http.post("/v1/select", json={"query": rec["question"], "documents": texts, **rule}).json()
        ref = selector.select(rec["question"], texts, tau=rule.get("threshold"), k_max=rule.get("k_max"),
                              min_select=rule.get("min_select"))
        assert body["selected"] == ref.indices and body["threshold"] == pytest.approx(rule["threshold"])
    assert len(http.post("/v1/select", json={"query": rec["question"], "documents": texts, "threshold": 1e9,
                                              "min_select": 2}).json()["selected"]) == 2


def test_different_rules_in_one_batch_each_get_their_own(server, selector, candidates):
    """Concurrent requests with different rules, scored together: each gets its own rule's selection."""
    url, _ = server
    rec = candidates[2]
    docs = docs_of(rec)
    base = selector.select(rec["question"], docs)
    s = sorted(base.logits)
    taus = [(a + b) / 2 for a, b in itertools.pairwise(s)]  # between two scores: no tie that float rounding could flip
    rules = [{}, {"threshold": taus[0]}, {"threshold": taus[2], "k_max": 2}, {"threshold": taus[0], "k_max": 1},
             {"threshold": s[-1] + 1, "min_select": 3}, {"k_max": 1}]
    barrier = threading.Barrier(len(rules), timeout=HTTP_TIMEOUT)

    def call(rule):
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            barrier.wait()
            return c.post("/v1/select", json={"query": rec["question"], "documents": wire(docs), **rule}).json()

    with ThreadPoolExecutor(len(rules)) as pool:
        got = list(pool.map(call, rules))
    for rule, body in zip(rules, got):
        ref = selector.select(rec["question"], docs, tau=rule.get("threshold"), k_max=rule.get("k_max"),
                              min_select=rule.get("min_select"))
        assert body["selected"] == ref.indices, rule
    assert len({tuple(b["selected"]) for b in got}) > 1  # the rules really differ


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_rerank_shape_order_and_relevance(http, selector, candidates, path):
    rec = candidates[3]
    docs = docs_of(rec)
    want = selector.select(rec["question"], docs)
    r = http.post(path, json={"model": "anything", "query": rec["question"], "documents": wire(docs)})
    assert r.status_code == 200, r.text
    body = r.json()
    order = sorted(range(len(docs)), key=lambda k: (-want.logits[k], k))
    assert [x["index"] for x in body["results"]] == order
    assert body["selected"] == want.indices and body["model"] == "tiny-selector" and body["id"]
    assert body["meta"]["api_version"]["version"]
    scores = [x["relevance_score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    for x in body["results"]:
        assert "document" not in x
        assert x["logit"] == pytest.approx(want.logits[x["index"]], abs=1e-4)
        passes = want.logits[x["index"]] > selector.threshold
        assert (x["relevance_score"] > 0.5) == passes  # sigmoid(score - threshold)
        assert x["relevance_score"] == pytest.approx(1 / (1 + math.exp(selector.threshold - x["logit"])), abs=1e-9)
        assert x["selected"] == (x["index"] in want.indices)


def test_rerank_top_n_and_return_documents(http, candidates):
    rec = candidates[4]
    docs = docs_of(rec)
    full = http.post("/v1/rerank", json={"query": rec["question"], "documents": wire(docs)}).json()
    cut = http.post("/v1/rerank", json={"query": rec["question"], "documents": wire(docs), "top_n": 2,
                                        "return_documents": True, "max_tokens_per_doc": 12}).json()
    assert [x["index"] for x in cut["results"]] == [x["index"] for x in full["results"][:2]]
    for x in cut["results"]:
        assert x["document"]["text"] == docs[x["index"]]["text"]
    assert cut["selected"] == full["selected"]  # top_n cuts the results, not the kept set


def test_metrics_count_requests_documents_and_batches(http, server, candidates):
    rec = candidates[0]
    before = metric_samples(http.get("/metrics").text)
    http.post("/v1/select", json={"query": rec["question"], "documents": wire(docs_of(rec, 3))})
    http.post("/v1/select", json={"query": rec["question"], "documents": []})
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    after = metric_samples(r.text)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("purecover_requests_total", endpoint="/v1/select", status="200") == 1
    assert delta("purecover_requests_total", endpoint="/v1/select", status="400") == 1
    assert delta("purecover_documents_scored_total") == 3
    assert delta("purecover_batch_size_count") == 1
    assert delta("purecover_request_seconds_count", endpoint="/v1/select") == 2
    assert ("purecover_queue_depth", ()) in after and ("purecover_requests_in_flight", ()) in after
    assert batches_above_one(r.text) >= 0
    http.get("/no/such/path")
    assert metric_samples(http.get("/metrics").text)[("purecover_requests_total",
                                                       (("endpoint", "other"), ("status", "404")))] >= 1


def test_create_app_raises_a_small_hf_batch_size_to_max_batch(served_selector):
    """One gathered batch must be one forward pass: the HF backend's batch_size becomes at least max_batch."""
    from purecover.models.selector import HFSelectorBackend, Selector
    from purecover.serve.app import create_app

    small = Selector(served_selector.tokenizer, served_selector.config,
                     HFSelectorBackend(served_selector.backend.model, batch_size=2))
    with running(small, max_batch=12):
        assert small.backend.batch_size == 12  # while serving
    assert small.backend.batch_size == 2  # restored when the app stops
    with running(small, max_batch=1):
        assert small.backend.batch_size == 2  # never lowered
    with pytest.raises(ValueError, match="max_batch"):
        create_app(small, model_name="x", max_batch=0)


# --------------------------------------------------------------------------- validation


def test_validation_errors(http, selector, candidates):
    rec = candidates[0]
    k1 = selector.k1
    too_many = [f"passage {i}" for i in range(k1 + 1)]
    r = http.post("/v1/select", json={"query": "q", "documents": too_many})
    assert r.status_code == 400 and f"at most k1={k1}" in r.json()["detail"] and f"{k1 + 1} documents" in r.json()["detail"]
    r = http.post("/v1/rerank", json={"query": "q", "documents": too_many})
    assert r.status_code == 400 and f"k1={k1}" in r.json()["detail"]
    r = http.post("/v1/select", json={"query": "q", "documents": []})
    assert r.status_code == 400 and "documents is empty" in r.json()["detail"]
    r = http.post("/v1/select", json={"query": "q", "documents": ["fine", {"title": "T", "text": "  \n"}]})
    assert r.status_code == 400 and r.json()["detail"] == "document 1 has an empty text"
    r = http.post("/v2/rerank", json={"query": "q", "documents": ["ok", "", "ok"]})
    assert r.status_code == 400 and "document 1" in r.json()["detail"]
    r = http.post("/v1/select", json={"query": "   ", "documents": ["a"]})
    assert r.status_code == 400 and "query is empty" in r.json()["detail"]
    for blank in ("\u200b\u200b", "\ufeff \u2060", "\x00", "\u200b\n\x07"):  # zero-width, format, NUL, control
        r = http.post("/v1/select", json={"query": "q", "documents": ["fine", blank]})
        assert r.status_code == 400 and r.json()["detail"] == "document 1 has an empty text", repr(blank)
        r = http.post("/v1/select", json={"query": blank, "documents": ["a"]})
        assert r.status_code == 400 and r.json()["detail"] == "query is empty", repr(blank)
    r = http.post("/v1/select", json={"query": "q", "documents": ["a text\x00with a NUL"]})
    assert r.status_code == 400 and "document 0 holds a NUL character" in r.json()["detail"]
    r = http.post("/v1/select", json={"query": "q\x00", "documents": ["a"]})
    assert r.status_code == 400 and "query holds a NUL character" in r.json()["detail"]
    for bad in ({"query": "q", "documents": [3]}, {"query": "q"}, {"query": "q", "documents": ["a"], "k_max": 0},
                {"query": "q", "documents": ["a"], "thresold": 1.0}, {"query": "q", "documents": [{"title": "x"}]}):
        assert http.post("/v1/select", json=bad).status_code == 422, bad
    assert http.post("/v1/rerank", json={"query": "q", "documents": ["a"], "top_n": 0}).status_code == 422
    r = http.post("/v1/select", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    # a valid request still works after the errors
    assert http.post("/v1/select", json={"query": rec["question"], "documents": wire(docs_of(rec))}).status_code == 200


def test_hostile_numbers_strings_and_rules_get_clear_4xx_never_500(http, selector):
    """Non-finite numbers (NaN, Infinity, 1e999), numbers as strings or booleans, lone surrogates and
    min_select > k_max: each a 4xx naming the field, never a 500 with a traceback."""
    head = {"content-type": "application/json"}
    for path, field, raw in (("/v1/select", "threshold", "NaN"), ("/v1/select", "threshold", "Infinity"),
                             ("/v1/select", "threshold", "1e999"), ("/v1/select", "k_max", "1e999"),
                             ("/v1/select", "k_max", "NaN"), ("/v1/rerank", "top_n", "NaN"),
                             ("/v1/select", "k_max", '"2"'), ("/v1/select", "min_select", "true"),
                             ("/v1/rerank", "top_n", '"2"'), ("/v1/rerank", "top_n", "true")):
        body = f'{{"query": "q", "documents": ["a", "b"], "{field}": {raw}}}'.encode()
        r = http.post(path, content=body, headers=head)
        assert r.status_code == 422, (path, field, raw, r.status_code, r.text[:200])
        assert any(field in err["loc"] for err in r.json()["detail"]), r.text
    for body in (b'{"query": "q\\ud800", "documents": ["a"]}', b'{"query": "q", "documents": ["a\\udfff b"]}',
                 b'{"query": "q", "documents": [{"title": "\\ud800", "text": "a"}]}'):
        r = http.post("/v1/select", content=body, headers=head)
        assert r.status_code == 400 and "not valid Unicode" in r.json()["detail"], r.text
    r = http.post("/v1/select", content=b'{"query": "q", "documents": ["a"], "thresold": "\\ud800"}', headers=head)
    assert r.status_code == 422  # the echo of a bad field with a lone surrogate is still valid JSON
    r = http.post("/v1/select", json={"query": "q", "documents": ["a", "b"], "k_max": 1, "min_select": 2})
    assert r.status_code == 400 and "min_select 2 is larger than k_max 1" in r.json()["detail"]


def test_a_client_that_dribbles_its_headers_is_disconnected(served_selector):
    """One header line every 0.4 s never completes a request head: with --head-timeout 1 the server closes the
    connection after about a second, while a normal request on the same server is answered."""
    import socket
    import time
    from urllib.parse import urlsplit

    with running(served_selector, server={"head_timeout": 1.0}) as (url, _), \
            httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
        where = urlsplit(url)
        sock = socket.create_connection((where.hostname, where.port), timeout=HTTP_TIMEOUT)
        start = time.monotonic()
        closed_after = None
        try:
            sock.sendall(b"POST /v1/select HTTP/1.1\r\nHost: localhost\r\n")
            for i in range(40):
                time.sleep(0.4)
                sock.sendall(f"X-Slow-{i}: y\r\n".encode())
        except OSError:
            closed_after = time.monotonic() - start
        finally:
            sock.close()
        assert closed_after is not None and closed_after < 6, closed_after
        assert c.get("/health").status_code == 200


def test_connections_beyond_max_connections_get_503(served_selector):
    """--max-connections bounds open connections: idle ones held open make the next request a 503."""
    import socket
    from urllib.parse import urlsplit

    with running(served_selector, server={"max_connections": 2}) as (url, _):
        where = urlsplit(url)
        held = [socket.create_connection((where.hostname, where.port), timeout=HTTP_TIMEOUT) for _ in range(2)]
        try:
            with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
                assert c.get("/health").status_code == 503
        finally:
            for sock in held:
                sock.close()
        import time

        deadline = time.monotonic() + 10  # the server sees the held connections close
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            while (status := c.get("/health").status_code) == 503 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert status == 200


def test_a_very_long_passage_is_cut_as_in_training(http, selector, candidates):
    rec = candidates[5]
    docs = docs_of(rec)
    docs[1] = {"title": "Long", "text": " ".join(["river town clock market"] * 5000)}  # ~20k words
    r = http.post("/v1/select", json={"query": rec["question"], "documents": wire(docs)})
    assert r.status_code == 200, r.text
    want = selector.select(rec["question"], docs)
    assert r.json()["selected"] == want.indices
    np.testing.assert_allclose(r.json()["scores"], want.logits, atol=1e-4, rtol=0)


# --------------------------------------------------------------------------- API key


def test_api_key(served_selector, candidates):
    rec = candidates[0]
    body = {"query": rec["question"], "documents": wire(docs_of(rec))}
    with running(served_selector, api_key="s3cret-key") as (url, _), \
            httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"},
                        {"Authorization": "Basic s3cret-key"}):
            for method, path, payload in (("POST", "/v1/select", body), ("POST", "/v1/rerank", body),
                                          ("POST", "/v2/rerank", body), ("GET", "/v1/models", None)):
                r = c.request(method, path, json=payload, headers=headers)
                assert r.status_code == 401, (path, headers)
                assert "API key" in r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret-key"}
        assert c.post("/v1/select", json=body, headers=good).status_code == 200
        assert c.post("/v2/rerank", json=body, headers=good).status_code == 200
        assert c.get("/v1/models", headers=good).status_code == 200
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200  # open
        # the key is checked before the body: a malformed body without the key is 401, never a 422 about it
        r = c.post("/v1/select", content=b"{bad", headers={"content-type": "application/json"})
        assert r.status_code == 401 and "bad" not in r.text
        for path in ("/docs", "/redoc", "/openapi.json"):  # only /health and /metrics are open
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers=good).status_code == 200, path


def flood(url: str, head: bytes, total: int = 96 << 20, heed_answer: bool = True) -> tuple[bytes, int]:
    """POST /v1/select with `head` (extra header lines) and up to `total` bytes of 64 KiB chunks over a raw socket,
    reading the answer concurrently; returns (what the server answered, bytes sent before it stopped reading).
    With `heed_answer` false the client goes on sending after the answer, as an attacker would, until the server
    closes the connection."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    sock = socket.create_connection((where.hostname, where.port), timeout=HTTP_TIMEOUT)
    answer = bytearray()

    def read() -> None:
        try:
            while data := sock.recv(65536):
                answer.extend(data)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    sent = 0
    try:
        sock.sendall(b"POST /v1/select HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + head
                     + b"\r\n")
        while sent < total and (not answer or not heed_answer):
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:  # the server closed the connection: it stopped reading
        pass
    reader.join(HTTP_TIMEOUT)
    sock.close()
    return bytes(answer), sent


def test_smuggled_or_unauthenticated_floods_are_refused_without_reading_them(served_selector):
    """Content-Length: 10 with Transfer-Encoding: chunked and ~100 MiB of chunks: refused (400) before the body is
    read, with or without a key; without the key the answer is 401 from the headers alone. A chunked flood that
    declares no length stops at the body limit (413). In every case the server answers long before the client
    could send it all."""
    total = 96 << 20
    with running(served_selector, api_key="s3cret-key", max_body_bytes=1 << 20) as (url, _):
        answer, sent = flood(url, b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n", total)
        assert answer.startswith(b"HTTP/1.1 401") and sent < total // 4, (answer[:80], sent)
        key = b"Authorization: Bearer s3cret-key\r\n"
        answer, sent = flood(url, key + b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n", total)
        assert answer.startswith(b"HTTP/1.1 400") and b"ambiguous framing" in answer and sent < total // 4
        answer, sent = flood(url, key + b"Transfer-Encoding: chunked\r\n", total)
        assert answer.startswith(b"HTTP/1.1 413") and sent < total // 4, (answer[:80], sent)
        # A client that ignores the 413 and goes on sending: the server closes the connection (it read all of it
        # before, 10 GB in 43 s), and answers the next client.
        answer, sent = flood(url, key + b"Transfer-Encoding: chunked\r\n", total, heed_answer=False)
        assert answer.startswith(b"HTTP/1.1 413") and b"connection: close" in answer.lower() and sent < total // 4
        answer, sent = flood(url, b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n", total, heed_answer=False)
        assert answer.startswith(b"HTTP/1.1 401") and sent < total // 4, (answer[:80], sent)
    with running(served_selector, max_body_bytes=1 << 20) as (url, _):  # no key configured
        answer, sent = flood(url, b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n", total)
        assert answer.startswith(b"HTTP/1.1 400") and sent < total // 4, (answer[:80], sent)


def test_a_body_over_the_limit_is_answered_413(served_selector, selector, candidates):
    """Declared (Content-Length) and streamed (chunked) bodies over max_body_bytes get 413 before the model runs;
    a chunked body within the limit is served as usual."""
    import json

    rec = candidates[0]
    body = {"query": rec["question"], "documents": wire(docs_of(rec))}
    small = json.dumps(body).encode()
    limit = len(small) + 100
    big = json.dumps({**body, "documents": [{"text": "word " * 400}] * 2}).encode()
    assert len(big) > limit

    def chunked(data: bytes):
        for i in range(0, len(data), 256):
            yield data[i:i + 256]

    with running(served_selector, max_body_bytes=limit) as (url, _), \
            httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
        headers = {"content-type": "application/json"}
        r = c.post("/v1/select", content=big, headers=headers)
        assert r.status_code == 413 and str(limit) in r.json()["detail"]
        r = c.post("/v1/select", content=chunked(big), headers=headers)  # no Content-Length
        assert r.status_code == 413 and str(limit) in r.json()["detail"]
        r = c.post("/v1/select", content=chunked(small), headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["selected"] == selector.select(rec["question"], docs_of(rec)).indices
        metrics = c.get("/metrics").text
    assert 'endpoint="/v1/select",status="413"' in metrics


# --------------------------------------------------------------------------- 429 and 503


def test_full_queue_answers_429_at_once(served_selector, candidates):
    gated, backend = gated_selector(served_selector)
    rec = candidates[0]
    body = {"query": rec["question"], "documents": wire(docs_of(rec))}
    with running(gated, max_batch=1, max_wait_ms=0, max_queue=2) as (url, app), ThreadPoolExecutor(3) as pool:
        def post():
            with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
                return c.post("/v1/select", json=body)

        first = pool.submit(post)
        assert backend.entered.wait(HTTP_TIMEOUT)  # request 1 is in the model, blocked
        waiting = [pool.submit(post) for _ in range(2)]
        service = app.state.service
        deadline = threading.Event()
        for _ in range(3000):
            if service.batcher.queue_depth == 2:
                break
            deadline.wait(0.01)
        assert service.batcher.queue_depth == 2
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            refused = c.post("/v1/select", json=body)
            assert refused.status_code == 429 and "max_queue" in refused.json()["detail"]
            assert refused.headers["retry-after"] == "1"
            assert c.get("/health").status_code == 200  # the loop is free while the model is blocked
            samples = metric_samples(c.get("/metrics").text)
            assert samples[("purecover_queue_rejections_total", (("reason", "queue_full"),))] == 1
            assert samples[("purecover_queue_depth", ())] == 2
        backend.gate.set()
        answers = [first.result(HTTP_TIMEOUT), *[w.result(HTTP_TIMEOUT) for w in waiting]]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert backend.calls == [1, 1, 1]


def test_draining_answers_503_and_finishes_accepted_requests(served_selector, selector, candidates):
    gated, backend = gated_selector(served_selector)
    rec = candidates[1]
    docs = docs_of(rec)
    body = {"query": rec["question"], "documents": wire(docs)}
    with running(gated, max_batch=4, max_wait_ms=0) as (url, app), ThreadPoolExecutor(1) as pool, \
            httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
        def post():
            with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as own:
                return own.post("/v1/select", json=body)

        accepted = pool.submit(post)
        assert backend.entered.wait(HTTP_TIMEOUT)
        app.state.drain()  # what the server does on SIGTERM before it stops
        refused = c.post("/v1/select", json=body)
        assert refused.status_code == 503 and "shutting down" in refused.json()["detail"]
        assert c.post("/v1/rerank", json=body).status_code == 503
        health = c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        backend.gate.set()
        done = accepted.result(HTTP_TIMEOUT)
    assert done.status_code == 200 and done.json()["selected"] == selector.select(rec["question"], docs).indices


# --------------------------------------------------------------------------- vLLM backend (a stand-in engine)


def test_vllm_backend_serves_in_logprob_space(selector_dir, selector, plain_model, candidates, monkeypatch):
    """Selector.from_pretrained(backend="vllm") on an engine without processed_logits: scores are renormalised
    log-probs and the threshold is tau3_logprob; the server answers exactly as the offline vLLM selector."""
    from purecover.models.selection import identifier_log_softmax
    from purecover.models.selector import Selector

    fake = fake_vllm_logprobs(plain_model)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    vsel = Selector.from_pretrained(selector_dir, backend="vllm")
    assert vsel.score_space == "logprob" and vsel.threshold == pytest.approx(selector.config.tau3_logprob)
    qs = [c["question"] for c in candidates[:4]]
    docs = [docs_of(c, n) for c, n in zip(candidates[:4], (6, 4, 2, 5))]
    want = vsel.select_batch(qs, docs)
    with running(vsel, model_name="tiny-vllm", max_batch=4, max_wait_ms=200) as (url, _):
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            health = c.get("/health").json()
            card = c.get("/v1/models").json()["data"][0]
        assert health["backend"] == "vllm"
        assert card["score_space"] == "logprob" and card["threshold"] == pytest.approx(selector.config.tau3_logprob)

        def call(i):
            with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as own:
                return own.post("/v1/select", json={"query": qs[i], "documents": wire(docs[i])}).json()

        before = len(fake.generate_sizes)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(call, range(4)))
        with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            rerank = c.post("/v1/rerank", json={"query": qs[0], "documents": wire(docs[0])}).json()
            assert batches_above_one(c.get("/metrics").text) >= 1
    assert max(fake.generate_sizes[before:]) > 1  # one engine call for several requests
    for body, w, q, d in zip(got, want, qs, docs):
        assert body["score_space"] == "logprob"
        assert body["threshold"] == pytest.approx(vsel.threshold)
        assert body["selected"] == w.indices
        np.testing.assert_allclose(body["scores"], w.logits, atol=1e-4, rtol=0)
        hf = selector.select(q, d)  # the same scores as the HF backend's, in log-prob space
        np.testing.assert_allclose(body["scores"], identifier_log_softmax(hf.logits), atol=1e-4, rtol=0)
    for x in rerank["results"]:
        assert (x["relevance_score"] > 0.5) == (x["logit"] > vsel.threshold)
    vsel.close()
