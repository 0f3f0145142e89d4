"""Drive one engine stream from a task of its own, so the gateway can stop it.

Two things must be possible that a plain ``async for`` over the engine cannot
do: the reader must be able to stop *waiting* without stopping the engine
(to send an SSE keep-alive after a silent interval), and the gateway must be
able to stop the *engine* without the reader's help (the request's deadline
passed; a shutdown drain ran out of time). A task that moves every event into
a queue gives both: the reader waits on the queue with any timeout, and
cancelling the task aborts the engine request (the engine contract:
cancelling the task that drives ``generate`` aborts it) and leaves an
``Interrupted`` marker behind the events already queued. One task drives the
engine iterator from its first event to its last, so cancel scopes inside an
engine (httpx, anyio) never cross tasks.

The queue is unbounded on purpose: a slow reader only holds the events the
engine has produced, which ``max_tokens`` bounds, and the engine never waits
for the reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

from engines.events import GenerationEvent
from service.admission import Reason
from service.errors import TimedOut, Unavailable

log = logging.getLogger(__name__)

# How long an engine may take to end a request it was told to abort.
ABORT_GRACE_S = 5.0


class Idle:
    """Returned instead of an event when none came within the wait."""


IDLE: Final = Idle()


class _End:
    pass


_END: Final = _End()


class Interrupted(Exception):
    """The gateway stopped the request: its deadline passed, or the server is shutting down."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason = reason

    def error(self, timeout_s: float) -> TimedOut | Unavailable:
        if self.reason == "timeout":
            return TimedOut(f"The request did not finish within the server's {timeout_s:g} s "
                            f"limit and was stopped. Ask for fewer tokens or retry later.",
                            code="request_timeout")
        return Unavailable("The server is shutting down; the request was stopped before it "
                           "finished. Please retry.", code="shutting_down")


class EventPump:
    """Pulls ``source`` into a queue; ``deadline`` (``time.monotonic()``) interrupts it.

    ``on_done`` runs once the engine iterator is finished, however it ended.
    """

    def __init__(self, source: AsyncIterator[GenerationEvent], deadline: float | None = None,
                 on_done: Callable[[], None] | None = None) -> None:
        self._source = source
        self._on_done = on_done
        self._queue: asyncio.Queue[GenerationEvent | _End | BaseException] = asyncio.Queue()
        self._reason: Reason | None = None
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        self._task.add_done_callback(self._finished)
        self._timer = None if deadline is None else loop.call_at(
            loop.time() + max(0.0, deadline - time.monotonic()), self.interrupt, "timeout")

    async def _run(self) -> None:
        try:
            async for event in self._source:
                self._queue.put_nowait(event)
            self._queue.put_nowait(_END)
        except asyncio.CancelledError:
            # The engine iterator saw the cancellation at its await and aborted.
            self._queue.put_nowait(Interrupted(self._reason or "shutdown"))
        except Exception as e:  # the engine's own errors, raised to the reader
            self._queue.put_nowait(e)
        finally:
            self._done()

    def _finished(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():  # cancelled before its first step: _run never ran
            self._queue.put_nowait(Interrupted(self._reason or "shutdown"))
            self._done()

    def _done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._on_done is not None:
            on_done, self._on_done = self._on_done, None
            on_done()

    @property
    def running(self) -> bool:
        """The engine request has not ended yet."""
        return not self._task.done()

    def interrupt(self, reason: Reason) -> None:
        """Abort the engine request; the reader gets ``Interrupted(reason)`` after the
        events already queued. Nothing happens if the engine has already finished."""
        if not self._task.done() and self._reason is None:
            self._reason = reason
            self._task.cancel()

    async def next(self, idle_s: float = 0.0) -> GenerationEvent | Idle:
        """The next event, or ``IDLE`` after ``idle_s`` without one (0: wait for it).

        Raises StopAsyncIteration after the last event, ``Interrupted``, or what
        the engine raised; after any of these, StopAsyncIteration.
        """
        if self._queue.empty() and idle_s > 0:
            try:
                async with asyncio.timeout(idle_s):
                    item = await self._queue.get()
            except TimeoutError:
                return IDLE
        else:
            item = await self._queue.get()
        if isinstance(item, _End | BaseException):
            self._queue.put_nowait(_END)  # stays ended for a later call
            if isinstance(item, BaseException):
                raise item
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """Stop the engine request if it still runs, and wait until it has."""
        if not self._task.done():
            self._reason = self._reason or "shutdown"
            self._task.cancel()
        # wait(), not await: the task's outcome is not ours to raise, but our own
        # cancellation (the reader's task being cancelled) must still propagate.
        # Bounded: an engine that ignores its abort must not hold the request for good.
        _, stuck = await asyncio.wait({self._task}, timeout=ABORT_GRACE_S)
        if stuck:
            log.error("an engine request did not end within %g s of its abort; left behind",
                      ABORT_GRACE_S)
