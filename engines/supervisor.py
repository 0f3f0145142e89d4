"""Bring back in-process engines whose core process died.

vLLM's engine core runs in a child process; if it dies (killed, out of
memory, a CUDA fault) the ``AsyncLLM`` stays errored for good and every later
request to that mode would fail. The supervisor notices within a second,
releases what is left and starts the engine again, one engine at a time
(vLLM sizes its KV cache against the device memory that is free when it
starts), backing off when an engine keeps dying so that a broken one costs
little. Meanwhile the mode is marked down: auto traffic goes to the others
and a forced request gets a clear 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from engines.base import Engine

log = logging.getLogger(__name__)

RestartObserver = Callable[[str, bool], None]


class EngineStartTimeout(Exception):
    """An engine did not start within its bound and was stopped."""


async def start_within(engine: Engine, timeout_s: float) -> None:
    """``engine.start()``, given up after ``timeout_s`` (0: no bound): the engine's
    start is cancelled (an in-process vLLM engine then ends its core process)."""
    if not timeout_s:
        await engine.start()
        return
    try:
        await asyncio.wait_for(engine.start(), timeout_s)
    except TimeoutError:
        raise EngineStartTimeout(f"engine {engine.mode!r} did not start within "
                                 f"{timeout_s:g} s (engine_start_timeout_s)") from None


def release_memory() -> None:
    """Give what a dead engine's front end held back to the system before its successor
    starts: its objects sit in reference cycles until a collection, and glibc keeps
    freed heap unless trimmed. Without this the gateway process grows with every
    restart (``make chaos`` measures it)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):   # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass(slots=True)
class _Health:
    failures: int = 0
    next_try: float = 0.0


@dataclass
class EngineSupervisor:
    engines: Mapping[str, Engine]
    check_interval_s: float = 1.0
    first_backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    # A restart that has not brought the engine up after this long is given up (0: none).
    start_timeout_s: float = 0.0
    # Called with (mode, succeeded) after every restart attempt (metrics).
    observers: list[RestartObserver] = field(default_factory=list)
    _health: dict[str, _Health] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            await self.check_once(time.monotonic())

    async def check_once(self, now: float) -> None:
        for mode, engine in self.engines.items():
            if engine.is_up or not engine.restartable:
                if engine.is_up:
                    self._health.pop(mode, None)
                continue
            health = self._health.setdefault(mode, _Health())
            if now < health.next_try:
                continue
            await self._restart(mode, engine, health, now)

    async def _restart(self, mode: str, engine: Engine, health: _Health, now: float) -> None:
        log.error("engine %r is down; restarting it (attempt %d)", mode, health.failures + 1)
        began = time.monotonic()
        try:
            await engine.shutdown()
            release_memory()
            await start_within(engine, self.start_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("engine %r failed to restart", mode)
        ok = engine.is_up
        if ok:
            log.info("engine %r restarted in %.1f s", mode, time.monotonic() - began)
            # Back to a short backoff only once it stays up (check_once forgets it).
        health.failures += 1
        backoff = min(self.first_backoff_s * 2 ** (health.failures - 1), self.max_backoff_s)
        health.next_try = now + backoff   # from the attempt's start
        for observe in self.observers:
            observe(mode, ok)
