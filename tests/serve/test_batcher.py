"""DynamicBatcher on its own (no model): gathering, results to their own requests, the bounded queue, draining,
errors isolated to their request, the blocking call kept off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from purecover.serve.batcher import DynamicBatcher, QueueFullError, ShuttingDownError


def _run(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def running(process, **settings):
    """A started DynamicBatcher over `process`, closed when the block ends."""
    batcher = DynamicBatcher(process, **settings)
    batcher.start()
    try:
        yield batcher
    finally:
        await batcher.close()


class Recorder:
    """process(items) -> [item * 10]; records each batch; optionally waits on `gate` (a threading.Event)."""

    def __init__(self, gate: threading.Event | None = None, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.started = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if self.gate is not None and not self.gate.wait(30):
            raise RuntimeError("gate never opened")
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"item {self.fail_on} is bad")
        return [i * 10 for i in items]


def test_concurrent_items_are_gathered_and_answered_in_their_own_order():
    rec = Recorder()

    async def main():
        async with running(rec, max_batch=4, max_wait_ms=50, max_queue=100) as b:
            return await asyncio.gather(*(b.submit(i) for i in range(10)))

    results = _run(main())
    assert results == [i * 10 for i in range(10)]
    assert sorted(i for batch in rec.batches for i in batch) == list(range(10))  # each item computed once
    assert max(len(batch) for batch in rec.batches) == 4  # gathered, capped at max_batch
    assert len(rec.batches) == 3  # 4 + 4 + 2
    assert all(name.startswith("purecover-batcher") for name in rec.threads)  # the worker thread, not the loop


def test_max_batch_one_computes_one_at_a_time():
    rec = Recorder()

    async def main():
        async with running(rec, max_batch=1, max_wait_ms=50, max_queue=100) as b:
            return await asyncio.gather(*(b.submit(i) for i in range(5)))

    assert _run(main()) == [0, 10, 20, 30, 40]
    assert [len(x) for x in rec.batches] == [1] * 5


def test_a_lone_item_waits_at_most_max_wait():
    rec = Recorder()

    async def main():
        async with running(rec, max_batch=8, max_wait_ms=150, max_queue=10) as b:
            t0 = time.monotonic()
            out = await b.submit(7)
            elapsed = time.monotonic() - t0
            return out, elapsed

    out, elapsed = _run(main())
    assert out == 70
    assert 0.12 <= elapsed < 2.0  # waited for company about max_wait_ms, then ran alone


def test_the_model_call_does_not_block_the_event_loop():
    gate = threading.Event()
    rec = Recorder(gate)

    async def main():
        async with running(rec, max_batch=2, max_wait_ms=0, max_queue=10) as b:
            task = asyncio.ensure_future(b.submit(1))
            while not rec.started.is_set():
                await asyncio.sleep(0.005)
            ticks = 0
            for _ in range(10):  # the loop keeps running while the call is blocked in the worker
                await asyncio.sleep(0.005)
                ticks += 1
            assert not task.done()
            gate.set()
            out = await task
            return ticks, out

    assert _run(main()) == (10, 10)


def test_a_full_queue_refuses_at_once_and_accepted_items_still_finish():
    gate = threading.Event()
    rec = Recorder(gate)

    async def main():
        async with running(rec, max_batch=1, max_wait_ms=0, max_queue=2) as b:
            first = asyncio.ensure_future(b.submit(1))
            while not rec.started.is_set():  # item 1 is in the model
                await asyncio.sleep(0.005)
            waiting = [asyncio.ensure_future(b.submit(i)) for i in (2, 3)]
            while b.queue_depth < 2:
                await asyncio.sleep(0.005)
            t0 = time.monotonic()
            with pytest.raises(QueueFullError, match="2 requests are already waiting"):
                await b.submit(4)
            refused_in = time.monotonic() - t0
            gate.set()
            out = [await first, *[await w for w in waiting]]
            return out, refused_in

    out, refused_in = _run(main())
    assert out == [10, 20, 30] and refused_in < 0.5


def test_drain_refuses_new_items_and_finishes_accepted_ones_without_waiting_for_more():
    gate = threading.Event()
    rec = Recorder(gate)

    async def main():
        async with running(rec, max_batch=8, max_wait_ms=10_000, max_queue=10) as b:
            accepted = [asyncio.ensure_future(b.submit(i)) for i in range(3)]
            await asyncio.sleep(0.05)  # gathered, waiting for company (max_wait 10 s)
            t0 = time.monotonic()
            b.drain()
            with pytest.raises(ShuttingDownError):
                await b.submit(99)
            gate.set()
            out = [await a for a in accepted]
            elapsed = time.monotonic() - t0
            return out, elapsed

    out, elapsed = _run(main())
    assert out == [0, 10, 20] and elapsed < 5  # not the 10 s gather window
    assert rec.batches == [[0, 1, 2]]


def test_an_error_reaches_only_its_own_request():
    rec = Recorder(fail_on=3)

    async def main():
        async with running(rec, max_batch=8, max_wait_ms=50, max_queue=10) as b:
            return await asyncio.gather(*(b.submit(i) for i in range(6)), return_exceptions=True)

    out = _run(main())
    assert [o for i, o in enumerate(out) if i != 3] == [0, 10, 20, 40, 50]
    assert isinstance(out[3], ValueError) and "item 3 is bad" in str(out[3])


def test_submit_before_start_or_after_close_is_shutting_down():
    async def main():
        b = DynamicBatcher(Recorder(), max_batch=2, max_wait_ms=0, max_queue=2)
        with pytest.raises(ShuttingDownError):
            await b.submit(1)
        b.start()
        assert await b.submit(2) == 20
        await b.close()
        with pytest.raises(ShuttingDownError):
            await b.submit(3)

    _run(main())


@pytest.mark.parametrize("kwargs", [{"max_batch": 0}, {"max_queue": 0}, {"max_wait_ms": -1}, {"max_batch": True}])
def test_bad_settings_are_errors(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DynamicBatcher(Recorder(), **kwargs)


def test_close_with_a_timeout_fails_what_is_still_unanswered():
    """A batch still in the model when close's wait runs out, and the items behind it, get ShuttingDownError
    (never a request left waiting forever)."""
    gate = threading.Event()
    rec = Recorder(gate)

    async def main():
        b = DynamicBatcher(rec, max_batch=1, max_wait_ms=0, max_queue=10)
        b.start()
        running = asyncio.ensure_future(b.submit(1))
        while not rec.started.is_set():
            await asyncio.sleep(0.005)
        queued = asyncio.ensure_future(b.submit(2))
        await asyncio.sleep(0.02)
        closing = asyncio.ensure_future(b.close(timeout=0.1))
        out = await asyncio.gather(running, queued, return_exceptions=True)
        gate.set()  # let the worker thread finish so close can stop it
        await closing
        return out

    out = _run(main())
    assert all(isinstance(o, ShuttingDownError) for o in out), out
