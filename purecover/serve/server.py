"""Running the app with uvicorn: `run_server` (blocking, graceful on SIGTERM / SIGINT), `serve_in_thread`
(a real server on a free loopback port, for tests and embedding) and `serve_command` (``purecover serve``).

Graceful shutdown: on SIGTERM or SIGINT the server stops listening, the app refuses new scoring
requests with 503 (``app.state.drain()``), the requests already accepted are scored and answered,
keep-alive connections are closed, the app's batcher stops, and `serve_command` closes the selector;
the process then exits with status 0. A second SIGINT forces the exit. `timeout_graceful_shutdown`
bounds the wait for in-flight requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from . import require_serve_extra

require_serve_extra()

import h11  # noqa: E402
import uvicorn  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402

from ..models.selector import Selector  # noqa: E402
from .app import DEFAULT_MAX_BATCH, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE, DEFAULT_MAX_WAIT_MS, create_app  # noqa: E402

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT", "GracefulServer", "run_server", "serve_command", "serve_in_thread"]

DEFAULT_SHUTDOWN_TIMEOUT = 30.0  # seconds in-flight requests get to finish after SIGTERM
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


DEFAULT_HEAD_TIMEOUT = 10.0  # seconds a client has to send a request's line and headers
DEFAULT_MAX_CONNECTIONS = 512  # open connections beyond which uvicorn answers 503


class HeadTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head: a client that has not sent a whole request
    line and headers within `head_timeout` seconds (of connecting, or of its first byte after a response) is
    disconnected, so clients that dribble a header line every few seconds cannot hold connections forever
    (uvicorn times out only idle keep-alive connections). The body is bounded by the app (`--max-body-mb`)."""

    head_timeout = DEFAULT_HEAD_TIMEOUT

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        waiting = self.conn.their_state is h11.IDLE  # no complete request head yet
        if waiting and self._head_timer is None and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)
        elif not waiting and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.warning("%s sent no complete request head within %g s: disconnected",
                        f"{self.client[0]}:{self.client[1]}" if self.client else "a client", self.head_timeout)
            self.transport.close()


def _protocol(head_timeout: float) -> type:
    """`HeadTimeoutH11Protocol` with its deadline set (uvicorn builds one protocol object per connection)."""
    return type("HeadTimeoutH11Protocol", (HeadTimeoutH11Protocol,), {"head_timeout": float(head_timeout)})


class GracefulServer(uvicorn.Server):
    """uvicorn's server that drains the app first on shutdown and exits normally after a signal.

    (uvicorn re-raises a caught SIGTERM after shutting down, which would end the process with the signal's
    status; a finished graceful shutdown here returns normally, so ``purecover serve`` exits 0.)
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if not self.should_exit:
            log.info("%s received: finishing the requests in flight, then stopping", signal.Signals(sig).name)
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: Any = None) -> None:
        drain = getattr(getattr(self.config.app, "state", None), "drain", None)
        if callable(drain):
            drain()
        await super().shutdown(sockets=sockets)


def _config(app: Any, host: str, port: int, log_level: str, timeout_graceful_shutdown: float | None,
            access_log: bool, head_timeout: float = DEFAULT_HEAD_TIMEOUT,
            max_connections: int = DEFAULT_MAX_CONNECTIONS) -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), log_config=None,
                          access_log=access_log, lifespan="on", timeout_graceful_shutdown=timeout_graceful_shutdown,
                          http=_protocol(head_timeout), limit_concurrency=max_connections)


def run_server(app: Any, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info",
               timeout_graceful_shutdown: float | None = DEFAULT_SHUTDOWN_TIMEOUT, access_log: bool = False,
               head_timeout: float = DEFAULT_HEAD_TIMEOUT, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
    """Serve `app` until SIGTERM / SIGINT, then shut down gracefully (module docstring). Blocks.

    Raises RuntimeError when the server cannot start (e.g. the port is taken; uvicorn logs why).
    """
    server = GracefulServer(_config(app, host, port, log_level, timeout_graceful_shutdown, access_log, head_timeout,
                                    max_connections))
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits on a startup failure (its log says why)
        raise RuntimeError(f"the server could not start on {host}:{port} (see the log above)") from exc
    if not server.started:
        raise RuntimeError(f"the server could not start on {host}:{port} (see the log above)")


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, *, startup_timeout: float = 60.0,
                    shutdown_timeout: float = 30.0, log_level: str = "warning",
                    head_timeout: float = DEFAULT_HEAD_TIMEOUT,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Iterator[str]:
    """Run `app` with a real uvicorn server in a background thread; yields its base URL ``http://HOST:PORT``.

    `port` 0 picks a free port. Startup (lifespan included) must finish within `startup_timeout` s, else
    RuntimeError. On exit the server shuts down gracefully (in-flight requests are answered, then the
    app's lifespan shutdown runs) within `shutdown_timeout` s, after which it is forced; a thread still
    alive after that raises RuntimeError. Signals are not touched (they belong to the main thread).
    `head_timeout` and `max_connections`: as `purecover serve`'s --head-timeout and --max-connections.

        with serve_in_thread(create_app(selector, model_name="demo")) as base_url:
            httpx.post(f"{base_url}/v1/select", json={...})
    """
    server = GracefulServer(_config(app, host, port, log_level, shutdown_timeout, False, head_timeout,
                                    max_connections))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as exc:  # SystemExit on a startup failure included
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"purecover-serve-{host}:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the server on {host}:{port} stopped during startup: {failure[0] if failure else ''!r}")
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(shutdown_timeout)
            raise RuntimeError(f"the server on {host}:{port} did not start within {startup_timeout:g} s")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    try:
        yield f"http://{shown}:{bound}"
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout)
        if thread.is_alive():
            server.force_exit = True
            thread.join(10.0)
        if thread.is_alive():
            raise RuntimeError(f"the server on {host}:{bound} did not stop within {shutdown_timeout:g} s")


def serve_command(selector_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000, backend: str = "hf",
                  device: str = "auto", dtype: str = "auto", max_batch: int = DEFAULT_MAX_BATCH,
                  max_wait_ms: float = DEFAULT_MAX_WAIT_MS, max_queue: int = DEFAULT_MAX_QUEUE,
                  model_name: str | None = None, api_key_env: str | None = None, log_level: str = "INFO",
                  shutdown_timeout: float | None = DEFAULT_SHUTDOWN_TIMEOUT,
                  max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, head_timeout: float = DEFAULT_HEAD_TIMEOUT,
                  max_connections: int = DEFAULT_MAX_CONNECTIONS) -> int:
    """``purecover serve SELECTOR_DIR``: load the selector, serve it until a signal, close it. Returns 0.

    The API key is read from the environment variable `api_key_env` (never from the command line, where
    other users can see it in the process list); a named but unset or empty variable is an error.
    The HF backend's batch_size is `max_batch`, so one gathered batch is one forward pass.
    """
    path = Path(selector_dir)
    if max_body_bytes < 1:
        raise ValueError(f"--max-body-mb must be > 0, got {max_body_bytes / 2**20:g}")
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {port}")
    if not head_timeout > 0 or max_connections < 1:
        raise ValueError(f"--head-timeout ({head_timeout}) must be > 0 and --max-connections ({max_connections}) >= 1")
    if max_batch < 1 or max_queue < 1 or max_wait_ms < 0:
        raise ValueError(f"--max-batch ({max_batch}) and --max-queue ({max_queue}) must be >= 1 and --max-wait-ms "
                         f"({max_wait_ms}) >= 0")
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env, "")
        if not api_key.strip():
            raise ValueError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set or is "
                             "empty; export the key there (it is never taken on the command line)")
        api_key = api_key.strip()
    name = model_name or path.resolve().name
    log.info("purecover serve: loading %s (%s backend) ...", path, backend)
    started = time.perf_counter()
    selector = Selector.from_pretrained(path, backend=backend, device=device, dtype=dtype, batch_size=max_batch)
    log.info("purecover serve: selector loaded in %.1f s; starting the HTTP server", time.perf_counter() - started)
    try:
        app = create_app(selector, model_name=name, api_key=api_key, max_batch=max_batch, max_wait_ms=max_wait_ms,
                         max_queue=max_queue, backend=backend, max_body_bytes=max_body_bytes)
        log.info("purecover serve: %s on http://%s:%d%s", name, host, port,
                 " (API key required)" if api_key else "")
        run_server(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=shutdown_timeout,
                   access_log=log_level.upper() == "DEBUG", head_timeout=head_timeout, max_connections=max_connections)
    finally:
        selector.close()
    log.info("purecover serve: stopped")
    return 0
