"""`RemoteSelector` against a real HTTP server on loopback that answers what `purecover serve` never would:
every such answer is a `RemoteSelectorError` naming the problem, never a bare JSONDecodeError, KeyError or
TypeError, and never a selection that repeats a document (which the LangChain compressor would return twice)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from purecover.serve.client import RemoteSelector, RemoteSelectorError

CARD = {"id": "m", "k1": 3, "threshold": 0.0, "score_space": "logit", "k_max": None, "min_select": 1}
GOOD = {"selected": [1, 0], "scores": [1.0, 2.0, -1.0], "probabilities": [0.3, 0.6, 0.1], "score_space": "logit"}


@contextmanager
def answering(models: tuple[int, dict[str, str], bytes], select: tuple[int, dict[str, str], bytes]) -> Iterator[str]:
    """A real server whose GET /v1/models and POST /v1/select give these (status, headers, body)."""
    class Handler(BaseHTTPRequestHandler):
        def _send(self, answer: tuple[int, dict[str, str], bytes]) -> None:
            status, headers, body = answer
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(models)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(select)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def js(obj: object, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(obj).encode()


OK_MODELS = js({"data": [CARD]})
DOCS = ["a", "b", "c"]


@pytest.mark.parametrize(("models", "select", "message"), [
    ((200, {"Content-Type": "text/html"}, b"<html>login</html>"), js(GOOD), r"did not answer JSON .*<html>login"),
    ((302, {"Location": "https://elsewhere.example/login"}, b""), js(GOOD),
     r"HTTP 302: .*answered 302 .*to https://elsewhere.example/login"),
    (js({"data": "nope"}), js(GOOD), r"/v1/models sent a malformed reply: no 'data' list"),
    (js({"data": [{"id": "m", "threshold": 0.0, "score_space": "logit"}]}), js(GOOD), r"model field 'k1' is None"),
    (js([1, 2]), js(GOOD), r"/v1/models sent a malformed reply"),
    (OK_MODELS, js({**GOOD, "selected": [0, 0, 0]}), r"'selected' \[0, 0, 0\] repeats a position"),
    (OK_MODELS, js({**GOOD, "selected": [5]}), r"names one outside 0..2"),
    (OK_MODELS, js({**GOOD, "selected": "0"}), r"'selected' is not a list of positions"),
    (OK_MODELS, js({**GOOD, "scores": [1.0]}), r"'scores' is not a list of 3 numbers"),
    (OK_MODELS, js({**GOOD, "probabilities": None}), r"'probabilities' is not a list of 3 numbers"),
    (OK_MODELS, js(["selected"]), r"expected an object, got list"),
    (OK_MODELS, (200, {}, b"{truncated"), r"/v1/select did not answer JSON"),
    (OK_MODELS, (307, {"Location": "/v2/select"}, b""), r"HTTP 307"),
])
def test_every_unexpected_answer_is_a_remote_selector_error(models, select, message):
    with answering(models, select) as url, RemoteSelector(url, timeout=10) as remote, \
            pytest.raises(RemoteSelectorError, match=message):
        remote.k1  # noqa: B018 (the card is read on first use)
        remote.select("q?", DOCS)


def test_a_well_formed_answer_still_reads_and_langchain_never_repeats_a_document():
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from purecover.integrations.langchain import PurecoverCompressor

    with answering(OK_MODELS, js(GOOD)) as url, RemoteSelector(url, timeout=10) as remote:
        result = remote.select("q?", DOCS)
        assert (result.indices, result.logits, remote.k1) == ([1, 0], [1.0, 2.0, -1.0], 3)
    with answering(OK_MODELS, js({**GOOD, "selected": [2, 2, 2]})) as url:
        compressor = PurecoverCompressor.from_url(url)
        with pytest.raises(RemoteSelectorError, match="repeats a position"):
            compressor.compress_documents([Document(page_content=t) for t in DOCS], "q?")

    class Repeating:  # any SelectorLike, not only the remote one
        k1, threshold = 3, 0.0

        def select(self, question, docs, tau=None, k_max=None, min_select=None):
            from purecover.models.selection_result import SelectionResult
            return SelectionResult(indices=[0, 0], logits=[1.0, 0.0, 0.0], probabilities=[0.5, 0.25, 0.25])

    with pytest.raises(RuntimeError, match="with repeats"):
        PurecoverCompressor(selector=Repeating()).compress_documents([Document(page_content=t) for t in DOCS], "q?")
