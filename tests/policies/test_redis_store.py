"""The Redis store against a real server: a cancellation is never lost inside redis-py.

Python 3.11's ``asyncio.wait_for``, which redis-py awaits every socket write
through, returns normally when a cancel lands after the write finished but
before ``wait_for`` resumed (CPython gh-86296). A call cancelled at that point
ran on, and so did the policy-state loop that made it: the gateway's shutdown
cancelled the loop and waited for it for ever (issue 11). The window is a
couple of event-loop turns, so the tests cancel at every turn in turn.
"""

from __future__ import annotations

import asyncio
import time

from policies.shared_state import SharedPolicyState
from policies.store.redis_store import RedisStore
from tests.redis_server import RedisServer

TURNS = 60


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_call_cancelled_at_any_point_is_cancelled(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url)
    try:
        await store.ping()                        # a pooled connection, as in steady state
        ran_on = []
        for k in range(TURNS):
            call = asyncio.create_task(store.ping())
            await turns(k)
            if call.done():
                continue
            call.cancel()
            done, _ = await asyncio.wait({call}, timeout=2.0)
            assert call in done, f"cancelled after {k} turns, the call never ended"
            if not call.cancelled():
                ran_on.append(k)
        assert ran_on == [], f"cancellations lost after {ran_on} loop turns"
    finally:
        await store.close()


async def test_the_sync_loop_ends_when_cancelled_at_any_point(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url)
    try:
        hung = []
        for k in range(TURNS):
            state = SharedPolicyState(store, "r", sync_interval_s=0.0)   # always talking
            state.observe("ngram", "copy", 2, 8, 5, 10, now=1000.0)
            loop = asyncio.create_task(state.run())
            await turns(k)
            loop.cancel()
            done, _ = await asyncio.wait({loop}, timeout=2.0)
            if not done:
                hung.append(k)
                while not loop.done():            # end it before the next round
                    loop.cancel()
                    await asyncio.sleep(0.01)
        assert hung == [], f"the loop ran on after a cancel {hung} loop turns in"
    finally:
        await store.close()


async def test_close_ends_calls_given_up_on(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url)
    calls = [asyncio.create_task(store.ping()) for _ in range(5)]
    await turns(2)
    for call in calls:
        call.cancel()
    await asyncio.wait(calls, timeout=2.0)
    await asyncio.wait_for(store.close(), timeout=2.0)
    assert not store._calls


async def test_a_stalled_event_loop_is_not_a_store_outage(redis_server: RedisServer) -> None:
    """An overloaded gateway's event loop can stall for a moment while a reply is on
    its way; within the call's bound that must not read as Redis being down (read so,
    the store could look as if it never came back after a restart)."""
    store = RedisStore(redis_server.url, timeout_s=0.25)     # each call bounded at 1 s
    try:
        await store.ping()
        loop = asyncio.get_running_loop()
        loop.call_later(0.005, time.sleep, 0.6)              # a 0.6 s stall, mid-call
        began = time.monotonic()
        while time.monotonic() - began < 0.8:
            await store.settings_version()
    finally:
        await store.close()
