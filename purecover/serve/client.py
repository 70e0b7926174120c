"""`RemoteSelector`: the `Selector` interface over a running ``purecover serve`` (httpx only; no FastAPI).

    from purecover.serve.client import RemoteSelector

    with RemoteSelector("http://127.0.0.1:8000", api_key=os.environ.get("PURECOVER_API_KEY")) as selector:
        result = selector.select("Who ...?", [{"title": "...", "text": "..."}, ...])
        result.indices   # kept documents, best first (same contract as `Selector.select`)

HTTP errors raise `RemoteSelectorError` (``status``, ``detail``); a 400 or 422 (bad input: more
documents than k1, an empty document, a bad value) is also a ValueError, as in-process. So does any
answer that is not what ``purecover serve`` sends: a redirect (never followed: the key is not sent on to
another address), a body that is not JSON, or a reply whose fields are missing, of the wrong type, or
inconsistent (a position outside the documents, a repeated position, a score list of the wrong length).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..models.selection_result import SelectionResult, as_candidate_doc

__all__ = ["RemoteSelector", "RemoteSelectorError", "RemoteSelectorInputError"]


class RemoteSelectorError(RuntimeError):
    """The server answered `status` (0: no answer) with `detail`."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail


class RemoteSelectorInputError(RemoteSelectorError, ValueError):
    """400 / 422: the request was refused for its content (like `Selector.select`'s ValueError)."""


def _wire_document(doc: Any, position: int) -> str | dict[str, str]:
    """A candidate as sent: a str as is; anything else `as_candidate_doc` accepts as ``{"text", "title"?}``
    (the same checks, and errors, as in-process)."""
    if isinstance(doc, str):
        return doc
    cand = as_candidate_doc(doc, position)
    return {"text": cand.text} if not cand.title else {"text": cand.text, "title": cand.title}


def _detail(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's 422: [{loc, msg, ...}, ...]
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', d)}"
                         if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)


class RemoteSelector:
    """A `Selector`-like object whose model runs in a ``purecover serve`` at `base_url`.

    `api_key` is sent as ``Authorization: Bearer``; `timeout` (seconds) bounds each request; `model`
    is sent with each request (the server accepts any name). `k1`, `threshold`, `score_space`,
    `k_max`, `min_select` and `model_name` are read once from ``/v1/models`` on first use.
    `max_concurrency`: requests `select_batch` keeps in flight at once (the server batches them).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 60.0, model: str | None = None,
                 max_concurrency: int = 8) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - httpx comes with every extra that uses this
            raise ImportError("RemoteSelector needs httpx: pip install -e '.[serve]'") from exc
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_concurrency = max_concurrency
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                    limits=httpx.Limits(max_connections=max(max_concurrency, 10)))
        self._card: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ HTTP

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except self._httpx.HTTPError as exc:
            raise RemoteSelectorError(0, f"no answer from {self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status >= 400:
            cls = RemoteSelectorInputError if status in (400, 422) else RemoteSelectorError
            raise cls(status, _detail(response))
        if not 200 <= status < 300:  # 1xx/3xx: a redirect is not followed (the API key would go with it)
            where = response.headers.get("location")
            raise RemoteSelectorError(status, f"{self.base_url}{path} answered {status} {response.reason_phrase}"
                                      + (f" (to {where}); point base_url at the server itself" if where else ""))
        try:
            return response.json()
        except ValueError:
            text = response.text[:200].strip()
            raise RemoteSelectorError(status, f"{self.base_url}{path} did not answer JSON (is it a purecover "
                                      f"serve?): {text!r}") from None

    def _malformed(self, path: str, problem: str) -> RemoteSelectorError:
        return RemoteSelectorError(200, f"{self.base_url}{path} sent a malformed reply: {problem}")

    def _model_card(self) -> dict[str, Any]:
        with self._lock:
            if self._card is None:
                reply = self._request("GET", "/v1/models")
                data = reply.get("data") if isinstance(reply, dict) else None
                if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
                    raise self._malformed("/v1/models", "no 'data' list of models")
                if not data:
                    raise RemoteSelectorError(200, f"{self.base_url}/v1/models lists no model")
                chosen = next((m for m in data if m.get("id") == self.model), data[0])
                card = dict(chosen)
                for key, kind in (("id", str), ("k1", int), ("threshold", (int, float)), ("score_space", str)):
                    if not isinstance(card.get(key), kind) or isinstance(card.get(key), bool):
                        raise self._malformed("/v1/models", f"model field {key!r} is {card.get(key)!r}")
                self._card = card
            return self._card

    @property
    def k1(self) -> int:
        return int(self._model_card()["k1"])

    @property
    def threshold(self) -> float:
        return float(self._model_card()["threshold"])

    @property
    def score_space(self) -> str:
        return str(self._model_card()["score_space"])

    @property
    def k_max(self) -> int | None:
        value = self._model_card().get("k_max")
        return None if value is None else int(value)

    @property
    def min_select(self) -> int:
        return int(self._model_card().get("min_select", 1))

    @property
    def model_name(self) -> str:
        return str(self._model_card()["id"])

    # ------------------------------------------------------------------ Selector interface

    def select(self, question: str, docs: Sequence[Any], tau: float | None = None, k_max: int | None = None,
               min_select: int | None = None) -> SelectionResult:
        """`Selector.select` remotely: kept indices best first, scores and probabilities in candidate order.

        `tau` is in the server's score space (`score_space`); None: its calibrated threshold.
        """
        if not isinstance(question, str):
            raise TypeError(f"question must be a str, got {type(question).__name__}")
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Sequence):
            raise TypeError(f"docs must be a list of candidates, got {type(docs).__name__}")
        body: dict[str, Any] = {"query": question, "documents": [_wire_document(d, i) for i, d in enumerate(docs)],
                                "threshold": tau, "k_max": k_max, "min_select": min_select}
        if self.model is not None:
            body["model"] = self.model
        return self._selection(self._request("POST", "/v1/select", body), len(docs))

    def _selection(self, out: Any, n: int) -> SelectionResult:
        """The reply of ``/v1/select`` for `n` documents as a `SelectionResult`, checked field by field."""
        def numbers(key: str) -> list[float]:
            values = out.get(key)
            if (not isinstance(values, list) or len(values) != n
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
                raise self._malformed("/v1/select", f"{key!r} is not a list of {n} numbers")
            return [float(v) for v in values]

        if not isinstance(out, dict):
            raise self._malformed("/v1/select", f"expected an object, got {type(out).__name__}")
        selected = out.get("selected")
        if not isinstance(selected, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in selected):
            raise self._malformed("/v1/select", f"'selected' is not a list of positions: {selected!r}")
        if any(not 0 <= i < n for i in selected) or len(set(selected)) != len(selected):
            raise self._malformed("/v1/select", f"'selected' {selected} repeats a position or names one outside "
                                                f"0..{n - 1}")
        space = out.get("score_space", "logit")
        if not isinstance(space, str):
            raise self._malformed("/v1/select", f"'score_space' is {space!r}")
        return SelectionResult(indices=list(selected), logits=numbers("scores"),
                               probabilities=numbers("probabilities"), score_space=space)

    def select_batch(self, questions: Sequence[str], docs_lists: Sequence[Sequence[Any]], tau: float | None = None,
                     k_max: int | None = None, min_select: int | None = None) -> list[SelectionResult]:
        """`select` for each question, up to `max_concurrency` requests at once; results in input order."""
        if len(questions) != len(docs_lists):
            raise ValueError(f"{len(questions)} questions but {len(docs_lists)} candidate lists")
        if len(questions) <= 1 or self.max_concurrency == 1:
            return [self.select(q, d, tau, k_max, min_select) for q, d in zip(questions, docs_lists)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(questions))) as pool:
            futures = [pool.submit(self.select, q, d, tau, k_max, min_select) for q, d in zip(questions, docs_lists)]
            return [f.result() for f in futures]

    def health(self) -> dict[str, Any]:
        """``GET /health`` (RemoteSelectorError 503 while the server drains)."""
        return dict(self._request("GET", "/health"))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteSelector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
