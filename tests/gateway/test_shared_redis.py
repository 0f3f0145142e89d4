"""Gateway replicas sharing one real Redis: learning, live settings, outages."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx

from policies.store.redis_store import RedisStore
from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.redis_server import RedisServer

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}


@contextlib.asynccontextmanager
async def replicas(redis: RedisServer, token_delay_s: float = 0.0
                   ) -> AsyncIterator[tuple[FakeGateway, FakeGateway]]:
    # A killed Redis refuses connections at once, so the bound does not slow the
    # outage down; at 0.1 s, a loaded machine (one event loop serving both replicas
    # and twelve clients) timed out a read after the restart: a second "outage".
    def settings(name: str) -> Settings:
        return Settings(redis_url=redis.url, admin_key=KEY, replica_id=name,  # type: ignore[arg-type]
                        redis_timeout_s=0.5)
    a_cm = serve(fake_engines(token_delay_s), settings=settings("a"))
    b_cm = serve(fake_engines(token_delay_s), settings=settings("b"))
    a = await anext(a_cm)
    b = await anext(b_cm)
    try:
        yield a, b
    finally:
        for cm in (a_cm, b_cm):
            with contextlib.suppress(StopAsyncIteration):
                await anext(cm)


async def until(check, limit_s: float = 3.0) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    while not await check():
        assert time.monotonic() - began < limit_s, "condition not reached in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def chat(cls: str = "math", max_tokens: int = 8) -> dict[str, object]:
    return {"model": MODEL, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "2+2"}],
            "metadata": {"workload_class": cls}}


async def test_replicas_share_acceptance_and_settings(redis_server: RedisServer) -> None:
    async with replicas(redis_server) as (a, b):
        for _ in range(4):
            r = await a.client.post("/v1/chat/completions", json=chat(),
                                    headers={"x-spec-mode": "dflash"})
            assert r.status_code == 200

        async def b_learned() -> bool:
            body = (await b.client.get("/admin/policy", headers=AUTH)).json()
            dflash = body["acceptance"].get("math", {}).get("dflash")
            return bool(dflash) and round(dflash["requests"]) == 4
        await until(b_learned)

        r = await b.client.put("/admin/policy", headers=AUTH, json={"hysteresis": 0.42})
        assert r.status_code == 200

        async def a_applied() -> bool:
            body = (await a.client.get("/admin/policy", headers=AUTH)).json()
            return bool(body["settings"]["hysteresis"] == 0.42)
        assert await until(a_applied, limit_s=1.0) < 1.0

        body = (await a.client.get("/admin/policy", headers=AUTH)).json()
        assert set(body["replicas"]) == {"a", "b"}
        store = RedisStore(redis_server.url)
        decisions = await store.recent_decisions(100)
        await store.close()
        assert {d["mode"] for d in decisions} == {"dflash"}
        assert all(d["forced"] == "1" and d["class"] == "math" for d in decisions)


async def test_redis_killed_under_traffic_fails_nothing(redis_server: RedisServer) -> None:
    async with replicas(redis_server, token_delay_s=0.005) as (a, b):
        results: list[int] = []
        stop = asyncio.Event()

        async def client(gw: FakeGateway, n: int) -> None:
            async with httpx.AsyncClient(base_url=gw.url, timeout=10) as h:
                while not stop.is_set():
                    mode = ("ngram", "standard", "auto")[n % 3]
                    r = await h.post("/v1/chat/completions", json=chat("copy", 5),
                                     headers={"x-spec-mode": mode})
                    results.append(r.status_code)
                    if r.status_code != 200:
                        results.append(-1)

        clients = [asyncio.create_task(client(gw, i)) for i in range(3) for gw in (a, b)]
        await asyncio.sleep(0.5)
        served_before = len(results)
        redis_server.kill()

        async def store_down() -> bool:
            ready = await a.client.get("/ready")
            return ready.status_code == 200 and ready.json()["policy_store"]["up"] is False
        await until(store_down)
        metrics = (await a.client.get("/metrics")).text
        assert "specgate_policy_store_up 0.0" in metrics
        await asyncio.sleep(1.0)                      # traffic keeps flowing meanwhile
        during = len(results) - served_before
        r = await a.client.put("/admin/policy", headers=AUTH, json={"hysteresis": 0.2})
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"

        redis_server.start()                          # empty: nothing was persisted

        async def both_back() -> bool:
            states = [(await gw.client.get("/ready")).json()["policy_store"]["up"]
                      for gw in (a, b)]
            return all(states)
        await until(both_back, limit_s=8.0)
        await asyncio.sleep(0.6)
        stop.set()
        await asyncio.gather(*clients)

        assert set(results) == {200}, "a request failed while Redis was down"
        assert during > 20
        store = RedisStore(redis_server.url)
        state = await store.read_state()
        await store.close()
        # Resynchronised: the restarted Redis holds what the replicas learned,
        # including what they learned while it was down.
        assert state.acceptance[("ngram", "copy")].requests > 5
        assert state.settings_version >= 1
        body = (await b.client.get("/admin/policy", headers=AUTH)).json()
        assert body["store"]["outages"] == 1
