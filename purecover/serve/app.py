"""The FastAPI app of `purecover serve`: one `Selector` behind ``/v1/select``, ``/v1/rerank`` (= ``/v2/rerank``),
``/health``, ``/v1/models`` and ``/metrics`` (docs/guides/serving.md).

    from purecover.models.selector import Selector
    from purecover.serve.app import create_app

    app = create_app(Selector.from_pretrained("runs/demo/selector"), model_name="demo")

Scoring requests go through a `DynamicBatcher`: the requests that arrive together (up to `max_batch`,
within `max_wait_ms` of the first) are scored by ONE `Selector.select_batch` call in a worker thread
(one left-padded forward pass on the HF backend: while the app runs, its ``batch_size`` is raised to
`max_batch` when smaller, and restored when the app stops; ``purecover serve`` loads the selector with
``batch_size=max_batch`` in the first place). Requests of one batch may ask for different ``k_max`` / ``threshold`` / ``min_select``:
the batch computes the scores once, then each request's own rule is applied to its own scores
(`select_from_scores`), so grouping by rule is never needed.

The app does not own the selector: whoever created it closes it (`purecover serve` does, after the
server stopped).
"""

from __future__ import annotations

import hmac
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from . import require_serve_extra

require_serve_extra()

from fastapi import FastAPI, HTTPException, Request  # noqa: E402
from fastapi.encoders import jsonable_encoder  # noqa: E402
from fastapi.exceptions import RequestValidationError  # noqa: E402
from fastapi.responses import JSONResponse, Response  # noqa: E402

from ..models.selection import select_from_scores  # noqa: E402
from ..models.selector import HFSelectorBackend, NonFiniteScoresError, Selector, VLLMSelectorBackend  # noqa: E402
from .batcher import DynamicBatcher, QueueFullError, ShuttingDownError  # noqa: E402
from .metrics import ServeMetrics  # noqa: E402
from .schemas import (  # noqa: E402
    Document,
    HealthResponse,
    ModelCard,
    ModelList,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    SelectRequest,
    SelectResponse,
    check_documents,
    document_parts,
    is_blank,
    is_encodable,
)

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_MAX_WAIT_MS",
    "Scored",
    "ScoringService",
    "SelectJob",
    "backend_name",
    "create_app",
    "relevance_score",
]

DEFAULT_MAX_BATCH = 16
DEFAULT_MAX_WAIT_MS = 5.0
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # 4 MiB: K1 = 20 passages of a few kB each are ~50 kB
ROUTES = ("/v1/select", "/v1/rerank", "/v2/rerank", "/health", "/v1/models", "/metrics")


def relevance_score(score: float, threshold: float) -> float:
    """sigmoid(score - threshold): monotone in the score, in (0, 1), > 0.5 exactly when score > threshold."""
    x = float(score) - float(threshold)
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def backend_name(selector: Selector) -> str:
    """"hf", "vllm", or the backend's ``name`` attribute / class name for another backend."""
    backend = selector.backend
    if isinstance(backend, HFSelectorBackend):
        return "hf"
    if isinstance(backend, VLLMSelectorBackend):
        return "vllm"
    return str(getattr(backend, "name", type(backend).__name__))


@dataclass(frozen=True)
class SelectJob:
    """One request's input: the question, its documents ({title, text} dicts) and its selection rule."""

    question: str
    documents: list[dict[str, str | None]]
    threshold: float
    k_max: int | None
    min_select: int


@dataclass(frozen=True)
class Scored:
    """One request's result: kept indices (best first); scores and probabilities in document order."""

    selected: list[int]
    scores: list[float]
    probabilities: list[float]
    threshold: float
    score_space: str


class ScoringService:
    """The selector, its batcher and metrics: `score` is what the endpoints await."""

    def __init__(self, selector: Selector, *, model_name: str, max_batch: int, max_wait_ms: float, max_queue: int,
                 metrics: ServeMetrics, backend: str | None = None) -> None:
        self.selector = selector
        self.model_name = model_name
        self.metrics = metrics
        self.backend = backend or backend_name(selector)
        self.batcher: DynamicBatcher[SelectJob, Scored] = DynamicBatcher(
            self._process, max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=max_queue,
            on_batch=metrics.observe_batch, on_queue=metrics.queue_depth.set)
        self._restore_batch_size: int | None = None

    @property
    def ready(self) -> bool:
        return self.batcher.running and not self.batcher.draining

    def start(self) -> None:
        """Start the batcher; while serving, an HF backend's batch_size is at least max_batch (one gathered
        batch = one forward pass; restored by `close`)."""
        size = getattr(self.selector.backend, "batch_size", None)
        if isinstance(size, int) and not isinstance(size, bool) and size < self.batcher.max_batch:
            log.info("selector batch_size %d raised to max_batch=%d while serving (one gathered batch is one "
                     "forward pass)", size, self.batcher.max_batch)
            self._restore_batch_size = size
            self.selector.backend.batch_size = self.batcher.max_batch  # type: ignore[attr-defined]
        self.batcher.start()

    def drain(self) -> None:
        """Stop accepting scoring requests (503); those accepted are still answered."""
        self.batcher.drain()

    async def close(self, timeout: float | None = None) -> None:
        await self.batcher.close(timeout)
        if self._restore_batch_size is not None:
            self.selector.backend.batch_size = self._restore_batch_size  # type: ignore[attr-defined]
            self._restore_batch_size = None

    def job(self, query: str, documents: list[Document], threshold: float | None = None, k_max: int | None = None,
            min_select: int | None = None) -> SelectJob:
        """A checked job (HTTPException 400 naming the problem) with the selector's defaults filled in."""
        problem = check_documents(documents, self.selector.k1)
        if problem is None and is_blank(query):
            problem = "query is empty"
        if problem is None and "\x00" in query:
            problem = "query holds a NUL character (U+0000)"
        if problem is None and not is_encodable(query):
            problem = "query is not valid Unicode (a lone surrogate such as \\ud800)"
        effective_k_max = self.selector.k_max if k_max is None else k_max
        effective_min = self.selector.min_select if min_select is None else min_select
        if problem is None and effective_k_max is not None and effective_min > effective_k_max:
            problem = (f"min_select {effective_min} is larger than k_max {effective_k_max}"
                       f"{'' if k_max is not None and min_select is not None else ' (the selector default)'}: "
                       "ask for at most as many as you keep")
        if problem is not None:
            raise HTTPException(status_code=400, detail=problem)
        docs: list[dict[str, str | None]] = []
        for doc in documents:
            text, title = document_parts(doc)
            docs.append({"title": title, "text": text})
        return SelectJob(question=query, documents=docs,
                         threshold=self.selector.threshold if threshold is None else float(threshold),
                         k_max=self.selector.k_max if k_max is None else int(k_max),
                         min_select=self.selector.min_select if min_select is None else int(min_select))

    async def score(self, job: SelectJob) -> Scored:
        """`job` scored in a batch; HTTPException 429 (queue full), 503 (shutting down), 400 / 500 (model errors)."""
        self.metrics.in_flight.inc()
        try:
            result = await self.batcher.submit(job)
        except QueueFullError as exc:
            self.metrics.rejections.labels("queue_full").inc()
            raise HTTPException(status_code=429, detail=str(exc), headers={"Retry-After": "1"}) from None
        except ShuttingDownError as exc:
            self.metrics.rejections.labels("shutting_down").inc()
            raise HTTPException(status_code=503, detail=str(exc)) from None
        except (ValueError, TypeError) as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except NonFiniteScoresError as exc:
            self.metrics.scoring_errors.labels("non_finite_scores").inc()
            log.error("scoring failed: %s", exc)
            raise HTTPException(status_code=500, detail=f"scoring failed: {exc}") from None
        except Exception as exc:
            self.metrics.scoring_errors.labels("error").inc()
            log.exception("scoring failed")
            raise HTTPException(status_code=500, detail=f"scoring failed: {type(exc).__name__}: {exc}") from None
        finally:
            self.metrics.in_flight.dec()
        self.metrics.documents.inc(len(job.documents))
        return result

    def _process(self, jobs: list[SelectJob]) -> list[Scored]:
        """One `select_batch` call (one forward pass) for every job, then each job's own rule (worker thread)."""
        results = self.selector.select_batch([j.question for j in jobs], [j.documents for j in jobs])
        out = []
        for job, res in zip(jobs, results):
            kept = select_from_scores(res.logits, job.threshold, job.min_select, job.k_max)
            out.append(Scored(selected=kept, scores=list(res.logits), probabilities=list(res.probabilities),
                              threshold=job.threshold, score_space=res.score_space))
        return out


class _RequestMetrics:
    """ASGI middleware: requests by endpoint and status, and their latency (unknown paths are "other")."""

    def __init__(self, app: Callable[..., Awaitable[None]], metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in ROUTES else "other"
        status = 500
        start = time.perf_counter()

        async def send_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


def json_safe(value: Any) -> Any:
    """`value` with what strict JSON cannot carry made printable: non-finite floats as ``"nan"`` / ``"inf"``,
    strings with lone surrogates backslash-escaped (a 422 echoes the client's input)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str) and not is_encodable(value):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


OPEN_PATHS = frozenset({"/health", "/metrics"})  # the only paths served without the API key (probes, scrapers)


async def _answer(send: Callable[..., Awaitable[None]], status: int, detail: str,
                  headers: dict[str, str] | None = None) -> None:
    """Send a JSON ``{"detail": ...}`` response straight from a middleware (the app never runs), with
    ``Connection: close``: the server then closes the connection instead of reading (and discarding) whatever
    body the client goes on sending, which a client that ignores the answer could make gigabytes."""
    response = JSONResponse({"detail": detail}, status_code=status, headers={**(headers or {}), "Connection": "close"})
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class _ApiKey:
    """ASGI middleware: with a key, every path but `OPEN_PATHS` (``/docs`` and ``/openapi.json`` included) needs
    ``Authorization: Bearer KEY``. Checked on the headers alone, before a byte of the body is read: a client
    without the key gets 401 whatever it sends after its headers (a huge or malformed body is never read)."""

    def __init__(self, app: Callable[..., Awaitable[None]], api_key: str) -> None:
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS:
            auth = b""
            for name, value in scope.get("headers") or []:
                if name == b"authorization":
                    auth = value
                    break
            scheme, _, token = auth.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.expected):
                await _answer(send, 401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                              {"WWW-Authenticate": "Bearer"})
                return
        await self.app(scope, receive, send)


class _BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 without being read whole.

    A declared Content-Length over the limit is refused before reading; every body is then counted as it
    streams in (whatever the headers claim) and refused as soon as the count passes the limit, so at most
    `max_bytes` are ever buffered. A request with both Content-Length and Transfer-Encoding, several
    Content-Lengths or a non-numeric one is answered 400 before reading (ambiguous framing: RFC 9112 §6.3,
    the request-smuggling pattern). A body within the limit is handed on unchanged."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        lengths = [v for k, v in headers if k == b"content-length"]
        chunked = any(k == b"transfer-encoding" for k, _ in headers)
        if lengths and chunked:
            await _answer(send, 400, "both Content-Length and Transfer-Encoding: ambiguous framing, refused")
            return
        if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
            await _answer(send, 400, "a Content-Length header must be one non-negative integer")
            return
        if lengths and int(lengths[0]) > self.max_bytes:
            await self._reject(send)
            return
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                await self._reject(send)
                return
            chunks.append(message)
            if not message.get("more_body", False):
                break
        pending = iter(chunks)

        async def replay() -> Any:
            return next(pending, None) or await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send: Callable[..., Awaitable[None]]) -> None:
        await _answer(send, 413, f"request body over {self.max_bytes} bytes (the server's --max-body-mb); send "
                                 "fewer or shorter documents")


def create_app(selector: Selector, *, model_name: str, api_key: str | None = None,
               max_batch: int = DEFAULT_MAX_BATCH, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
               max_queue: int = DEFAULT_MAX_QUEUE, backend: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """The app serving `selector` as `model_name` (module docstring).

    `api_key`: when set, every path but ``/health`` and ``/metrics`` (``/v1/*``, ``/v2/*``, ``/docs``,
    ``/openapi.json``) needs ``Authorization: Bearer <api_key>``, checked before the body is read. `max_batch`: requests per model call; `max_wait_ms`: how long a gather
    waits after its first request; `max_queue`: waiting requests beyond which new ones get 429.
    `backend`: the name reported by ``/health`` (default: derived from the selector's backend).
    `max_body_bytes`: a larger request body is answered 413 without being read whole; ambiguous framing
    (Content-Length with Transfer-Encoding) is answered 400 before reading.
    ``app.state.service`` is the `ScoringService`; ``app.state.drain()`` starts a graceful shutdown.
    """
    metrics = ServeMetrics()
    service = ScoringService(selector, model_name=model_name, max_batch=max_batch, max_wait_ms=max_wait_ms,
                             max_queue=max_queue, metrics=metrics, backend=backend)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        log.info("serving %s (k1=%d, %s backend, score space %s, threshold %.4f); max_batch %d, max_wait_ms %g, "
                 "max_queue %d", model_name, selector.k1, service.backend, selector.score_space, selector.threshold,
                 max_batch, max_wait_ms, max_queue)
        try:
            yield
        finally:
            await service.close()

    app = FastAPI(title="purecover serve", summary="A set-wise passage selector: how many passages to keep, and "
                  "which.", lifespan=lifespan)
    app.state.service = service
    app.state.metrics = metrics
    app.state.drain = service.drain
    # outermost last: metrics count every answer; the key is checked before the body limit reads a byte
    app.add_middleware(_BodyLimit, max_bytes=max_body_bytes)
    if api_key:
        app.add_middleware(_ApiKey, api_key=api_key)
    app.add_middleware(_RequestMetrics, metrics=metrics)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input: a NaN, 1e999 or a lone surrogate there made it a 500
        return JSONResponse({"detail": json_safe(jsonable_encoder(exc.errors()))}, status_code=422)

    @app.post("/v1/select", response_model=SelectResponse)
    async def select(body: SelectRequest) -> SelectResponse:
        scored = await service.score(service.job(body.query, body.documents, body.threshold, body.k_max,
                                                 body.min_select))
        return SelectResponse(model=model_name, score_space=scored.score_space,  # type: ignore[arg-type]
                              threshold=scored.threshold, selected=scored.selected, scores=scored.scores,
                              probabilities=scored.probabilities)

    async def rerank(body: RerankRequest) -> RerankResponse:
        scored = await service.score(service.job(body.query, body.documents))
        kept = set(scored.selected)
        order = sorted(range(len(scored.scores)), key=lambda k: (-scored.scores[k], k))
        if body.top_n is not None:
            order = order[: body.top_n]
        results = []
        for k in order:
            document = None
            if body.return_documents:
                text, title = document_parts(body.documents[k])
                document = {"text": text} if title is None else {"text": text, "title": title}
            results.append(RerankResult(index=k, relevance_score=relevance_score(scored.scores[k], scored.threshold),
                                        document=document, selected=k in kept, logit=scored.scores[k]))
        return RerankResponse(id=uuid.uuid4().hex, results=results,
                              meta=RerankMeta(billed_units={"search_units": 1.0}), model=model_name,
                              score_space=scored.score_space,  # type: ignore[arg-type]
                              threshold=scored.threshold, selected=scored.selected)

    for path in ("/v1/rerank", "/v2/rerank"):
        app.add_api_route(path, rerank, methods=["POST"], response_model=RerankResponse,
                          response_model_exclude_none=True)

    @app.get("/health", response_model=HealthResponse)
    async def health() -> Any:
        body = HealthResponse(status="ok" if service.ready else ("draining" if service.batcher.draining
                                                                  else "starting"),
                              model=model_name, k1=selector.k1, backend=service.backend)
        return JSONResponse(body.model_dump(), status_code=200 if service.ready else 503)

    @app.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=model_name, k1=selector.k1, threshold=selector.threshold,
                                         score_space=selector.score_space,  # type: ignore[arg-type]
                                         k_max=selector.k_max, min_select=selector.min_select,
                                         max_passage_tokens=selector.max_passage_tokens, backend=service.backend)])

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(content=body, media_type=None, headers={"Content-Type": content_type})

    return app
