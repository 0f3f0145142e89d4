"""A shutdown ends on time however the policy store fails (issue 11).

The drain has ``drain_timeout_s``; after it, the lifespan stops the store sync
and makes one last, bounded flush. None of it may wait on a Redis that does
not answer, answers half a reply, or drops the connection mid-reply.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn

from gateway.app import create_app
from gateway.shutdown import DrainingServer
from service.assembly import final_sync_s
from service.runtime import Components
from service.settings import Settings
from tests.conftest import FAKE_MODE_INFO, MODEL, fake_engines, free_port
from tests.fakes.bad_redis import BadRedis, Behaviour
from tests.fakes.engine import FakeTokenizer

DRAIN_S = 0.5
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture(params=["silent", "half", "close"])
async def bad_redis(request: pytest.FixtureRequest) -> AsyncIterator[BadRedis]:
    behaviour: Behaviour = request.param
    server = BadRedis(behaviour)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def test_sigterm_ends_within_the_drain_with_redis_broken(bad_redis: BadRedis) -> None:
    settings = Settings(policy={"name": "rule"}, redis_url=bad_redis.url,  # type: ignore[arg-type]
                        redis_timeout_s=0.1, drain_timeout_s=DRAIN_S)
    components = Components(model_name=MODEL, tokenizer=FakeTokenizer(),
                            engines=fake_engines(token_delay_s=0.05), max_model_len=4096,
                            mode_info=FAKE_MODE_INFO)
    app = create_app(settings, components=components)
    port = free_port()
    server = DrainingServer(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="critical", timeout_graceful_shutdown=5),
                            app.state.runtime.drain)
    task = asyncio.create_task(server.serve())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
        while not server.started:
            await asyncio.sleep(0.01)
        for _ in range(500):
            if (await client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.01)
        # Serving does not wait on the store.
        for mode in ("standard", "dflash", "auto"):
            r = await client.post("/v1/chat/completions", json=CHAT,
                                  headers={"x-spec-mode": mode})
            assert r.status_code == 200
        assert bad_redis.connections > 0
        long = asyncio.create_task(client.post(
            "/v1/chat/completions", json={**CHAT, "max_tokens": 2000}))   # 100 s of tokens
        await asyncio.sleep(0.2)
        began = time.monotonic()
        server.should_exit = True                    # what SIGTERM does
        done, _ = await asyncio.wait({task}, timeout=30)
        took = time.monotonic() - began
        assert task in done, "the gateway never finished shutting down"
        # The drain, then the bounded last flush and close of the store.
        assert took < DRAIN_S + 2 * final_sync_s(settings) + 1.0, took
        reply = await long
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "shutting_down"
