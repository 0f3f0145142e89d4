"""A client that hangs up aborts its engine request, streaming or not."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import MODEL, FakeGateway

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}


async def wait_until(predicate, limit_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(limit_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_streaming_disconnect_aborts(slow_gateway: FakeGateway) -> None:
    engine = slow_gateway.engines["standard"]
    async with httpx.AsyncClient(base_url=slow_gateway.url) as client:
        async with client.stream("POST", "/v1/chat/completions",
                                 headers={"x-spec-mode": "standard"},
                                 json={**CHAT, "stream": True}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if '"content":" the"' in line:
                    break
            assert engine.running
    await wait_until(lambda: not engine.running)
    assert len(engine.aborted) == 1


async def test_non_streaming_disconnect_aborts(slow_gateway: FakeGateway) -> None:
    engine = slow_gateway.engines["dflash"]

    async def call() -> None:
        async with httpx.AsyncClient(base_url=slow_gateway.url) as client:
            await client.post("/v1/chat/completions", headers={"x-spec-mode": "dflash"},
                              json=CHAT)

    task = asyncio.create_task(call())
    await wait_until(lambda: bool(engine.running))
    task.cancel()
    await wait_until(lambda: not engine.running)
    assert len(engine.aborted) == 1


async def test_other_requests_unaffected_by_a_disconnect(slow_gateway: FakeGateway) -> None:
    async def doomed() -> None:
        async with httpx.AsyncClient(base_url=slow_gateway.url) as client:
            await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 100})

    task = asyncio.create_task(doomed())
    r = await slow_gateway.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5})
    task.cancel()
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 5
