"""Bounded awaits: the limit holds and a caller's cancellation arrives, whatever the work does."""

from __future__ import annotations

import asyncio
import time

import pytest

from policies.bounded import bounded, stop_tasks


class Deaf:
    """Work that swallows its cancellation, as redis-py can on Python 3.11, until let go."""

    def __init__(self) -> None:
        self.let_go = asyncio.Event()

    async def __call__(self) -> None:
        while not self.let_go.is_set():
            try:
                await self.let_go.wait()
            except asyncio.CancelledError:
                pass


async def test_the_limit_holds_for_work_that_ignores_its_cancellation() -> None:
    deaf = Deaf()
    running: set[asyncio.Task[object]] = set()
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await bounded(deaf, 0.1, running)
    assert time.monotonic() - began < 1.0
    assert len(running) == 1                      # still going: its owner must stop it
    assert await stop_tasks(running, 0.1) == list(running)
    deaf.let_go.set()
    await asyncio.wait(list(running), timeout=1.0)
    assert not running


async def test_a_cancelled_caller_is_cancelled_even_when_the_work_is_deaf() -> None:
    deaf = Deaf()
    caller = asyncio.create_task(bounded(deaf, 60))
    await asyncio.sleep(0.05)
    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=1.0)
    deaf.let_go.set()
    assert caller in done and caller.cancelled()


async def test_results_and_errors_come_back() -> None:
    async def two() -> int:
        return 2

    async def fails() -> None:
        raise ValueError("no")
    assert await bounded(two, 1.0) == 2
    with pytest.raises(ValueError, match="no"):
        await bounded(fails, 1.0)


async def test_stop_tasks_waits_for_those_that_stop() -> None:
    task = asyncio.create_task(asyncio.sleep(60))
    assert await stop_tasks([task], 1.0) == []
    assert task.cancelled()


async def test_work_stopped_by_its_owner_is_a_timeout_to_the_caller() -> None:
    running: set[asyncio.Task[object]] = set()
    caller = asyncio.create_task(bounded(lambda: asyncio.sleep(60), 60, running))
    await asyncio.sleep(0.01)
    assert await stop_tasks(running, 1.0) == []
    with pytest.raises(TimeoutError, match="stopped"):
        await caller
