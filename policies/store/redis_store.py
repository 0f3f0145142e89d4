"""The policy store in Redis, shared by every gateway replica.

Key schema, everything under a configurable prefix ``P`` (default ``specgate``):

| key | type | holds |
|---|---|---|
| ``P:acc:{mode}:{class}`` | hash | decayed sums ``drafts``, ``draft_tokens``, |
| | | ``accepted``, ``requests``, and their time ``t`` |
| ``P:acc:index`` | set | ``mode<US>class`` of every acceptance key (no SCAN on a busy server) |
| ``P:outlen:{class}`` | hash | decayed sums ``tokens``, ``requests`` and ``t`` |
| ``P:outlen:index`` | set | the classes with output-length sums |
| ``P:load:{replica}`` | string, TTL | JSON of the replica's engine load and step-time profile |
| ``P:load:index`` | sorted set | replica ids scored by expiry time (pruned on read) |
| ``P:settings`` | string | JSON of the live policy settings |
| ``P:settings:version`` | string (int) | bumped by every settings change |
| ``P:decisions`` | stream, capped | one entry per routing decision with its inputs |

Sums are updated by a Lua script (atomic: concurrent replicas never lose each
other's additions); settings and their version change in one MULTI/EXEC.
Every call is bounded in time and raises ``StoreUnavailable`` on any failure;
each runs in a task of its own (``policies.bounded``), so neither its bound nor
a caller's cancellation can be lost inside redis-py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from policies.bounded import bounded, stop_tasks
from policies.store.base import (
    AcceptanceSums,
    OutputLengthSums,
    PolicyStore,
    ReplicaLoad,
    StoreState,
    StoreUnavailable,
)

T = TypeVar("T")
_SEP = "\x1f"

# KEYS[1] hash, KEYS[2] index set; ARGV: now, half_life, member, then field/value pairs.
# Stored sums decay to `now` (never backwards), then the incoming ones are added.
_ADD_DECAYED = """
local now = tonumber(ARGV[1])
local half_life = tonumber(ARGV[2])
local t = tonumber(redis.call('HGET', KEYS[1], 't') or now)
local factor = 1.0
if now > t then factor = math.pow(2.0, -(now - t) / half_life) end
for i = 4, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  redis.call('HSET', KEYS[1], ARGV[i], string.format('%.17g', old * factor + tonumber(ARGV[i + 1])))
end
if now > t then t = now end
redis.call('HSET', KEYS[1], 't', string.format('%.17g', t))
redis.call('SADD', KEYS[2], ARGV[3])
return 1
"""


# Every call is bounded at this many times the configured timeout.
CALL_BOUND = 4


class RedisStore(PolicyStore):
    def __init__(self, url: str, prefix: str = "specgate", timeout_s: float = 0.25,
                 max_decisions: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.max_decisions = max_decisions
        self.clock = clock
        # A socket read or connect may take the whole call's bound: on a loaded
        # machine a reply can sit unread for a while, and giving up on it early
        # made the store flap between up and down under load.
        self._redis: aioredis.Redis = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s * CALL_BOUND,
            socket_connect_timeout=timeout_s * CALL_BOUND,
            retry_on_timeout=False, decode_responses=True, health_check_interval=0)
        self._add = self._redis.register_script(_ADD_DECAYED)
        # Calls given up on (timed out, or their caller cancelled) that have not
        # ended yet: close() stops them for good.
        self._calls: set[asyncio.Task[Any]] = set()

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    async def _bounded(self, op: Callable[[], Awaitable[T]]) -> T:
        # Not `async with asyncio.timeout(...): await op()`: on Python 3.11 redis-py
        # can swallow the cancellation that timeout (or a caller) sends into it,
        # and the call then runs unbounded (a background loop cancelled at
        # shutdown ran on for ever, and the shutdown waited on it).
        try:
            return await bounded(op, self.timeout_s * CALL_BOUND, self._calls)
        except (RedisError, OSError, TimeoutError) as e:
            await self._drop_connections()
            slow = isinstance(e, TimeoutError | RedisTimeoutError)
            raise StoreUnavailable(f"redis: {type(e).__name__}: {e}", slow=slow) from e

    async def _drop_connections(self) -> None:
        """A command cut off mid-reply (a timeout, a cancellation, a server that went
        away) can leave its pooled connection holding an unread answer, which the
        next command would read as its own and time out on, again and again. After
        any failure, every connection goes; the next call opens fresh ones."""
        try:
            await bounded(lambda: self._redis.connection_pool.disconnect(inuse_connections=True),
                          self.timeout_s, self._calls)
        except (RedisError, OSError, TimeoutError):
            pass

    async def add_acceptance(self, mode: str, workload_class: str, sums: AcceptanceSums,
                             now: float, half_life_s: float) -> None:
        s = sums.decayed(now, half_life_s)
        await self._bounded(lambda: self._add(
            keys=[self._k("acc", mode, workload_class), self._k("acc", "index")],
            args=[now, half_life_s, f"{mode}{_SEP}{workload_class}", "drafts", s.drafts,
                  "draft_tokens", s.draft_tokens, "accepted", s.accepted,
                  "requests", s.requests]))

    async def add_output_length(self, workload_class: str, sums: OutputLengthSums,
                                now: float, half_life_s: float) -> None:
        s = sums.decayed(now, half_life_s)
        await self._bounded(lambda: self._add(
            keys=[self._k("outlen", workload_class), self._k("outlen", "index")],
            args=[now, half_life_s, workload_class, "tokens", s.tokens,
                  "requests", s.requests]))

    async def put_replica_load(self, load: ReplicaLoad, ttl_s: float) -> None:
        doc = json.dumps({"replica_id": load.replica_id, "at": load.at, "modes": load.modes,
                          "step_profile": load.step_profile})

        async def op() -> None:
            pipe = self._redis.pipeline(transaction=False)
            pipe.set(self._k("load", load.replica_id), doc, px=max(int(ttl_s * 1000), 1))
            pipe.zadd(self._k("load", "index"), {load.replica_id: self.clock() + ttl_s})
            await pipe.execute()
        await self._bounded(op)

    async def put_settings(self, settings: Mapping[str, Any]) -> int:
        async def op() -> int:
            pipe = self._redis.pipeline(transaction=True)
            pipe.set(self._k("settings"), json.dumps(dict(settings)))
            pipe.incr(self._k("settings", "version"))
            _, version = await pipe.execute()
            return int(version)
        return await self._bounded(op)

    async def settings_version(self) -> int:
        value = await self._bounded(lambda: self._redis.get(self._k("settings", "version")))
        return int(value) if value else 0

    async def log_decisions(self, entries: Sequence[Mapping[str, str]]) -> None:
        if not entries:
            return

        async def op() -> None:
            pipe = self._redis.pipeline(transaction=False)
            for entry in entries:
                pipe.xadd(self._k("decisions"), dict(entry),  # type: ignore[arg-type]
                          maxlen=self.max_decisions, approximate=True)
            await pipe.execute()
        await self._bounded(op)

    async def recent_decisions(self, count: int) -> list[dict[str, str]]:
        if count <= 0:
            return []
        rows: Any = await self._bounded(lambda: self._redis.xrevrange(self._k("decisions"),
                                                                      count=count))
        return [{str(k): str(v) for k, v in fields.items()} for _, fields in reversed(rows or [])]

    async def read_state(self) -> StoreState:
        return await self._bounded(self._read_state)

    async def _read_state(self) -> StoreState:
        pipe = self._redis.pipeline(transaction=False)
        pipe.smembers(self._k("acc", "index"))
        pipe.smembers(self._k("outlen", "index"))
        pipe.zremrangebyscore(self._k("load", "index"), "-inf", self.clock())
        pipe.zrange(self._k("load", "index"), 0, -1)
        pipe.get(self._k("settings"))
        pipe.get(self._k("settings", "version"))
        acc_index, out_index, _, replicas, settings, version = await pipe.execute()
        acc_keys = sorted(acc_index)
        out_keys = sorted(out_index)
        pipe = self._redis.pipeline(transaction=False)
        for member in acc_keys:
            mode, _, cls = member.partition(_SEP)
            pipe.hgetall(self._k("acc", mode, cls))
        for cls in out_keys:
            pipe.hgetall(self._k("outlen", cls))
        for rid in replicas:
            pipe.get(self._k("load", rid))
        values = await pipe.execute() if acc_keys or out_keys or replicas else []
        acceptance: dict[tuple[str, str], AcceptanceSums] = {}
        for member, h in zip(acc_keys, values, strict=False):
            if h:
                mode, _, cls = member.partition(_SEP)
                acceptance[(mode, cls)] = AcceptanceSums(
                    float(h.get("drafts", 0)), float(h.get("draft_tokens", 0)),
                    float(h.get("accepted", 0)), float(h.get("requests", 0)),
                    float(h.get("t", 0)))
        output: dict[str, OutputLengthSums] = {}
        for cls, h in zip(out_keys, values[len(acc_keys):], strict=False):
            if h:
                output[cls] = OutputLengthSums(float(h.get("tokens", 0)),
                                               float(h.get("requests", 0)), float(h.get("t", 0)))
        loads: dict[str, ReplicaLoad] = {}
        for rid, doc in zip(replicas, values[len(acc_keys) + len(out_keys):], strict=False):
            if doc:
                d = json.loads(doc)
                loads[rid] = ReplicaLoad(d["replica_id"], d["at"], d["modes"], d["step_profile"])
        return StoreState(acceptance, output, loads,
                          json.loads(settings) if settings else None,
                          int(version) if version else 0)

    async def claim(self, name: str, ttl_s: float) -> bool:
        done = await self._bounded(lambda: self._redis.set(
            self._k("claim", name), "1", nx=True, px=max(int(ttl_s * 1000), 1)))
        return bool(done)

    async def ping(self) -> None:
        await self._bounded(self._redis.ping)

    async def close(self) -> None:
        # Bounded like every other call: closing waits for each pooled socket to
        # close, and a gateway must not hang its shutdown on a Redis that went away.
        # Calls given up on end first: one still connecting would otherwise open
        # a socket after the pool was closed, and leak it.
        await stop_tasks(self._calls, self.timeout_s * 4, "redis call")
        try:
            await bounded(self._redis.aclose, self.timeout_s * 4)
        except (RedisError, OSError, TimeoutError):
            pass
