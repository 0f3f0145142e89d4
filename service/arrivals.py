"""Requests that have arrived and not yet been given a mode.

Requests that arrive together (a burst of concurrent clients, closed-loop clients
sending again at once) are decided one after another, and each would be priced at
the batch made by those decided before it: the first ones, seeing a small batch,
went to a speculative mode; a later one, seeing the whole burst, switched the device
group to plain decoding and moved the others, prefilling their prompts again.

Each request registers here as it enters the handler, before its prompt is
tokenised. An auto request then waits, before its decision, until no other request
has arrived for ``window_s`` (never longer than ``MAX_WINDOWS`` windows), and is
priced with the requests still waiting for their decision: every request of a burst
sees the batch the burst makes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

MAX_WINDOWS = 5   # an auto request waits at most this many windows for its burst


class Arrivals:
    def __init__(self, window_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        self.waiting = 0               # arrived, not yet decided (or gone)
        self._last = float("-inf")     # when the latest of them arrived

    def enter(self) -> Arrival:
        self.waiting += 1
        self._last = self.clock()
        return Arrival(self)


class Arrival:
    """One request's place among the arrivals, from its entry to its decision."""

    def __init__(self, arrivals: Arrivals) -> None:
        self._arrivals = arrivals
        self._entered = arrivals._last
        self._open = True

    def others(self) -> int:
        """Requests that arrived and are waiting for their decision, this one aside."""
        return max(0, self._arrivals.waiting - (1 if self._open else 0))

    async def settle(self) -> None:
        """Return once no request has arrived for a window, or after ``MAX_WINDOWS``."""
        arrivals = self._arrivals
        window = arrivals.window_s
        if window <= 0:
            return
        limit = self._entered + MAX_WINDOWS * window
        while True:
            now = arrivals.clock()
            until = min(arrivals._last + window, limit)
            if now >= until:
                return
            await asyncio.sleep(until - now)

    def leave(self) -> None:
        """Decided, refused or gone; a second call does nothing."""
        if self._open:
            self._open = False
            self._arrivals.waiting -= 1
