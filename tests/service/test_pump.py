"""The event pump: waits that end without stopping the engine, stops that need no reader."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from engines.events import Finished, GenerationEvent, TextDelta
from gateway.errors import http_error
from service.pump import IDLE, EventPump, Interrupted


class Source:
    """An engine stream the test feeds by hand; records how it ended."""

    def __init__(self) -> None:
        self.feed: asyncio.Queue[GenerationEvent | None] = asyncio.Queue()
        self.ended: str | None = None

    async def events(self) -> AsyncIterator[GenerationEvent]:
        try:
            while (event := await self.feed.get()) is not None:
                yield event
            self.ended = "finished"
        except asyncio.CancelledError:
            self.ended = "aborted"
            raise


def delta(i: int) -> TextDelta:
    return TextDelta(0, f" w{i}", (i,))


async def test_events_in_order_then_end() -> None:
    source, done = Source(), []
    pump = EventPump(source.events(), on_done=lambda: done.append(1))
    for i in range(3):
        source.feed.put_nowait(delta(i))
    source.feed.put_nowait(Finished(1, 3))
    source.feed.put_nowait(None)
    assert [await pump.next() for _ in range(4)] == [delta(0), delta(1), delta(2), Finished(1, 3)]
    for _ in range(2):
        with pytest.raises(StopAsyncIteration):
            await pump.next()
    assert source.ended == "finished" and done == [1]


async def test_idle_wait_does_not_stop_the_engine() -> None:
    source = Source()
    pump = EventPump(source.events())
    assert await pump.next(idle_s=0.01) is IDLE
    assert await pump.next(idle_s=0.01) is IDLE
    source.feed.put_nowait(delta(0))
    assert await pump.next(idle_s=10) == delta(0)
    assert source.ended is None
    await pump.aclose()
    assert source.ended == "aborted"


async def test_interrupt_aborts_the_engine_after_queued_events() -> None:
    source, done = Source(), []
    pump = EventPump(source.events(), on_done=lambda: done.append(1))
    source.feed.put_nowait(delta(0))
    await asyncio.sleep(0.01)
    pump.interrupt("shutdown")
    assert await pump.next() == delta(0)
    with pytest.raises(Interrupted) as exc:
        await pump.next()
    assert exc.value.reason == "shutdown"
    assert http_error(exc.value.error(1)).status == 503
    with pytest.raises(StopAsyncIteration):
        await pump.next()
    assert source.ended == "aborted" and done == [1]


async def test_deadline_interrupts_without_a_reader() -> None:
    source = Source()
    pump = EventPump(source.events(), deadline=time.monotonic() + 0.05)
    with pytest.raises(Interrupted) as exc:
        await asyncio.wait_for(pump.next(), timeout=10)
    assert exc.value.reason == "timeout"
    error = http_error(exc.value.error(0.05))
    assert (error.status, error.code, error.type) == (504, "request_timeout", "server_error")
    assert source.ended == "aborted"


async def test_interrupt_before_the_first_step_still_ends_the_reader() -> None:
    source, done = Source(), []
    pump = EventPump(source.events(), on_done=lambda: done.append(1))
    pump.interrupt("shutdown")  # the task has not run yet
    with pytest.raises(Interrupted):
        await asyncio.wait_for(pump.next(), timeout=10)
    assert done == [1]


async def test_engine_errors_reach_the_reader() -> None:
    async def failing() -> AsyncIterator[GenerationEvent]:
        yield delta(0)
        raise RuntimeError("engine exploded")

    pump = EventPump(failing())
    assert await pump.next() == delta(0)
    with pytest.raises(RuntimeError, match="exploded"):
        await pump.next()


async def test_a_finished_engine_is_not_interrupted() -> None:
    source = Source()
    pump = EventPump(source.events())
    source.feed.put_nowait(Finished(1, 0))
    source.feed.put_nowait(None)
    await asyncio.sleep(0.01)
    pump.interrupt("timeout")
    assert await pump.next() == Finished(1, 0)
    with pytest.raises(StopAsyncIteration):
        await pump.next()


async def test_aclose_does_not_swallow_the_callers_cancellation() -> None:
    class Stubborn:
        """An engine that takes a while to abort."""

        def __aiter__(self) -> Stubborn:
            return self

        async def __anext__(self) -> GenerationEvent:
            try:
                await asyncio.sleep(100)
            except asyncio.CancelledError:
                await asyncio.sleep(0.2)
                raise
            raise StopAsyncIteration

    pump = EventPump(Stubborn())
    await asyncio.sleep(0)
    closing = asyncio.create_task(pump.aclose())
    await asyncio.sleep(0.01)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
