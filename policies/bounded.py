"""Awaits that end on time and that a cancellation always reaches.

On Python 3.11 a cancellation can be lost inside library code:
``asyncio.wait_for`` returns the inner result when the cancel lands after
the inner task finished but before ``wait_for`` resumed (CPython gh-86296,
fixed in 3.12), and redis-py awaits every socket write through it. The lost
cancel may be ours (an ``asyncio.timeout`` that then never fires) or a
caller's (a shutdown that cancels a background loop which then runs on,
and waits for it forever). So foreign awaitables that must be bounded run
in a task of their own and we wait on that task with ``asyncio.wait``: our
own wait ends at the limit, and a cancellation of the waiter is delivered
to the waiter, whatever the awaited code does with the one passed on to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


async def bounded(make: Callable[[], Awaitable[T]], limit_s: float,
                  running: set[asyncio.Task[Any]] | None = None) -> T:
    """``await make()``, but for at most ``limit_s``: raises ``TimeoutError`` then.

    The work runs in a task of its own, cancelled (not awaited) when the limit
    passes or the caller is cancelled; ``running`` keeps track of such tasks
    until they end, so their owner can stop them for good (``stop_tasks``).
    """
    async def run() -> T:
        return await make()

    task = asyncio.ensure_future(run())
    if running is not None:
        running.add(task)
        task.add_done_callback(running.discard)
    task.add_done_callback(_retrieve)
    try:
        await asyncio.wait({task}, timeout=limit_s)
    finally:
        # Also when the caller was cancelled: nobody is left to want the result.
        if not task.done():
            task.cancel()
    if not task.done():
        raise TimeoutError(f"not done within {limit_s:g} s")
    if task.cancelled():
        # By its owner (stop_tasks at close), not by our caller, who is still here:
        # a CancelledError would read as the caller's own cancellation.
        raise TimeoutError("stopped before it was done")
    return task.result()


async def stop_tasks(tasks: Collection[asyncio.Task[Any]], limit_s: float,
                     what: str = "task") -> list[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait at most ``limit_s`` for them to end; return those
    that did not (logged with where they are stuck, never waited on again)."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return []
    _, stuck = await asyncio.wait(pending, timeout=limit_s)
    for task in stuck:
        task.add_done_callback(_retrieve)
        log.error("%s %s did not stop within %g s of being cancelled; left behind: %s",
                  what, task.get_name(), limit_s, _where(task))
    return list(stuck)


def _retrieve(task: asyncio.Task[Any]) -> None:
    # An abandoned task's failure was already answered with a timeout; reading it
    # here keeps asyncio from logging "exception was never retrieved".
    if not task.cancelled():
        task.exception()


def _where(task: asyncio.Task[Any]) -> str:
    """The innermost await of a suspended task (``Task.get_stack`` gives the outermost)."""
    coro: Any = task.get_coro()
    where = "no frame"
    for _ in range(100):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return where
