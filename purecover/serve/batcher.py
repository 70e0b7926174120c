"""Dynamic batching: concurrent requests gathered into one call of a blocking function, run off the event loop.

    batcher = DynamicBatcher(process, max_batch=16, max_wait_ms=5, max_queue=256)
    batcher.start()                       # inside the running event loop
    result = await batcher.submit(item)   # from any number of request handlers
    await batcher.close()

`process(items) -> results` (same length, same order) runs in ONE worker thread, so the event loop
keeps answering (health checks, metrics, 429s) while the model computes, and calls never overlap.
A gather starts with the oldest waiting item and takes more, up to `max_batch`, until `max_wait_ms`
after that item arrived (items that waited while the previous batch ran are taken at once).

Each item has its own future, so results go back to their own requests. When `process` raises on a
batch of several items, each item is retried alone, so the error reaches only the request that
causes it. The queue holds at most `max_queue` waiting items: `submit` then raises `QueueFullError`
at once (HTTP 429); after `drain()` it raises `ShuttingDownError` (HTTP 503) while already accepted
items are still finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

__all__ = ["BatcherError", "DynamicBatcher", "QueueFullError", "ShuttingDownError"]

I = TypeVar("I")  # noqa: E741 - an item
O = TypeVar("O")  # noqa: E741 - its result


class BatcherError(RuntimeError):
    """The batcher cannot take the item now."""


class QueueFullError(BatcherError):
    """`max_queue` items are already waiting."""


class ShuttingDownError(BatcherError):
    """The batcher is draining or closed."""


@dataclass
class _Job(Generic[I, O]):
    item: I
    future: asyncio.Future[O]
    arrived: float = field(default_factory=time.monotonic)


class DynamicBatcher(Generic[I, O]):
    """Gathers submitted items into batches for `process` (module docstring).

    `on_batch(size, seconds)` is called on the event loop after each batch (metrics); `on_queue(depth)`
    whenever the number of waiting items changes.
    """

    def __init__(self, process: Callable[[list[I]], Sequence[O]], *, max_batch: int = 16, max_wait_ms: float = 5.0,
                 max_queue: int = 256, on_batch: Callable[[int, float], None] | None = None,
                 on_queue: Callable[[int], None] | None = None, name: str = "purecover-batcher") -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue must be an integer >= 1, got {max_queue!r}")
        if not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
        self.process = process
        self.max_batch = max_batch
        self.max_wait = float(max_wait_ms) / 1000.0
        self.max_queue = max_queue
        self._on_batch = on_batch
        self._on_queue = on_queue
        self._name = name
        self._queue: asyncio.Queue[_Job[I, O]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._draining = False
        self._wake: asyncio.Event | None = None
        self._current: list[_Job[I, O]] = []  # the batch being gathered or computed
        self.in_flight = 0  # submitted, not yet answered

    # ------------------------------------------------------------------ state

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def queue_depth(self) -> int:
        """Items waiting to be gathered (not counting the batch being computed)."""
        return self._queue.qsize() if self._queue is not None else 0

    def start(self) -> None:
        """Start the gathering task on the running event loop and the worker thread."""
        if self.running:
            return
        self._queue = asyncio.Queue(maxsize=self.max_queue)
        self._wake = asyncio.Event()
        self._draining = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def drain(self) -> None:
        """Refuse new items (`ShuttingDownError`); waiting and running ones are still finished, without
        waiting for more to gather."""
        self._draining = True
        if self._wake is not None:
            self._wake.set()

    async def close(self, timeout: float | None = None) -> None:
        """Drain, wait (at most `timeout` s) until every accepted item is answered, stop the task and thread.

        Items still unanswered after `timeout` get `ShuttingDownError`.
        """
        self.drain()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.in_flight and (deadline is None or time.monotonic() < deadline) and self.running:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        left = list(self._current)  # a batch still computing when the wait ran out
        if self._queue is not None:
            while not self._queue.empty():
                left.append(self._queue.get_nowait())
        for job in left:
            if not job.future.done():
                job.future.set_exception(ShuttingDownError("the server shut down before this request was answered"))
        self._current = []
        if self._executor is not None:  # idle unless the wait ran out; never block the event loop on it
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._report_queue()

    # ------------------------------------------------------------------ submit

    async def submit(self, item: I) -> O:
        """`process([... item ...])`'s result for `item`; raises what `process` raised for it alone."""
        if self._draining:
            raise ShuttingDownError("the server is shutting down")
        if not self.running or self._queue is None:
            raise ShuttingDownError("the batcher is not running")
        job: _Job[I, O] = _Job(item, asyncio.get_running_loop().create_future())
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFullError(f"{self.max_queue} requests are already waiting (max_queue); retry later") from None
        self.in_flight += 1
        self._report_queue()
        try:
            return await job.future
        finally:
            self.in_flight -= 1

    # ------------------------------------------------------------------ the gathering task

    def _report_queue(self) -> None:
        if self._on_queue is not None:
            self._on_queue(self.queue_depth)

    async def _next(self, deadline: float) -> _Job[I, O] | None:
        """The next waiting job, waiting at most until `deadline` (monotonic) or a drain; None if none came."""
        assert self._queue is not None and self._wake is not None
        if not self._queue.empty():
            return self._queue.get_nowait()
        timeout = deadline - time.monotonic()
        if timeout <= 0 or self._draining:
            return None
        getter = asyncio.ensure_future(self._queue.get())
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({getter, waker}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waker.cancel()
            getter.cancel()  # a no-op when it already holds a job
        try:
            return await getter  # a job it took just before the cancel is kept, never lost
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]  # our own task is being stopped
                raise
            return None

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            batch = self._current = [first]
            deadline = first.arrived + self.max_wait
            while len(batch) < self.max_batch:
                job = await self._next(deadline)
                if job is None:
                    break
                batch.append(job)
            self._report_queue()
            live = self._current = [j for j in batch if not j.future.done()]  # a cancelled request is not computed
            if not live:
                continue
            start = time.monotonic()
            try:
                outcomes = await loop.run_in_executor(self._executor, self._compute, [j.item for j in live])
            except Exception as exc:  # the executor itself failed (e.g. shut down): fail the batch
                outcomes = [exc] * len(live)
            seconds = time.monotonic() - start
            for job, outcome in zip(live, outcomes):
                if job.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)
            self._current = []
            if self._on_batch is not None:
                self._on_batch(len(live), seconds)

    def _compute(self, items: list[I]) -> list[O | BaseException]:
        """`process(items)` in the worker thread; on an error with several items, each item alone."""
        try:
            results = list(self.process(items))
            if len(results) != len(items):
                raise RuntimeError(f"the batch function returned {len(results)} results for {len(items)} items")
            return results
        except Exception as exc:
            if len(items) == 1:
                return [exc]
            log.info("a batch of %d failed (%s: %s); retrying each request alone", len(items), type(exc).__name__, exc)
        out: list[O | BaseException] = []
        for item in items:
            try:
                out.append(self.process([item])[0])
            except Exception as exc:
                out.append(exc)
        return out
