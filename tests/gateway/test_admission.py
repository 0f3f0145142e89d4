"""Overload: bounded in-flight requests per mode and in total, 429 beyond, auto moves on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import httpx
import openai
import pytest

from gateway.errors import http_error
from service.admission import Admission
from service.errors import ServiceError
from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, serve
from tests.fakes.gated import GatedEngine, gated_engines, wait_until
from tests.gateway.test_metrics import scrape, value

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def test_admission_counts_and_bounds() -> None:
    a = Admission(per_mode=2, total=3)
    one, two = a.admit("x"), a.admit("x")
    assert (a.in_flight("x"), a.total, a.has_room("x"), a.has_room("y")) == (2, 2, False, True)
    with pytest.raises(ServiceError) as exc:
        a.admit("x")
    assert (http_error(exc.value).status, exc.value.code) == (429, "mode_queue_full")
    three = a.admit("y")
    with pytest.raises(ServiceError) as exc:
        a.admit("z")
    assert (http_error(exc.value).status, exc.value.code) == (429, "queue_full")
    one.release()
    one.release()  # idempotent: a slot is freed once
    assert (a.in_flight("x"), a.total) == (1, 2)
    a.close()
    with pytest.raises(ServiceError) as exc:
        a.admit("z")
    assert (http_error(exc.value).status, exc.value.code) == (503, "shutting_down")
    stopped: list[str] = []
    two.on_interrupt = stopped.append
    assert a.interrupt_all("shutdown") == 2 and stopped == ["shutdown"]
    two.release()
    three.release()
    assert a.total == 0
    unbounded = Admission()
    assert all(unbounded.admit("x") for _ in range(1000))


@pytest.fixture
async def bounded() -> AsyncIterator[FakeGateway]:
    s = Settings(policy={"name": "rule"}, max_in_flight_per_mode=1,  # type: ignore[arg-type]
                 max_in_flight=3)
    async for g in serve(gated_engines(), settings=s):
        yield g


def gate(g: FakeGateway, mode: str) -> GatedEngine:
    return cast(GatedEngine, g.engines[mode])


async def hold(g: FakeGateway, mode: str | None, **extra: object) -> asyncio.Task[httpx.Response]:
    """A request that waits at its engine's gate (admitted, unfinished) until it opens."""
    headers = {"x-spec-mode": mode} if mode else {}
    before = {name: len(gate(g, name).waiting) for name in g.engines}
    task = asyncio.create_task(g.client.post("/v1/chat/completions", headers=headers,
                                             json={**CHAT, **extra}))
    await wait_until(lambda: sum(len(gate(g, n).waiting) for n in g.engines) > sum(before.values())
                     or task.done())
    return task


async def open_all(g: FakeGateway) -> None:
    for name in g.engines:
        gate(g, name).gate.set()


async def test_forced_mode_at_capacity_gets_429(bounded: FakeGateway) -> None:
    held = await hold(bounded, "dflash")
    r = await bounded.client.post("/v1/chat/completions", headers={"x-spec-mode": "dflash"},
                                  json=CHAT)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"] == {"message": r.json()["error"]["message"],
                                 "type": "rate_limit_error", "param": "x-spec-mode",
                                 "code": "mode_queue_full"}
    async with openai.AsyncOpenAI(base_url=bounded.url + "/v1", api_key="x",
                                  max_retries=0) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-spec-mode": "dflash"})
    samples = await scrape(bounded)
    assert value(samples, "specgate_admitted_requests", mode="dflash") == 1
    assert value(samples, "specgate_admission_limit", scope="per_mode") == 1
    assert value(samples, "specgate_errors_total", type="rate_limit_error",
                 code="mode_queue_full") == 2
    await open_all(bounded)
    assert (await held).status_code == 200
    # The slot is free again once the request finished.
    r = await bounded.client.post("/v1/chat/completions", headers={"x-spec-mode": "dflash"},
                                  json=CHAT)
    assert r.status_code == 200
    assert value(await scrape(bounded), "specgate_admitted_requests", mode="dflash") == 0


async def test_auto_traffic_goes_where_there_is_room(bounded: FakeGateway) -> None:
    # The rule policy sends short requests to plain decoding; with 'standard' full,
    # auto traffic must land on another mode instead of being refused.
    held = [await hold(bounded, "standard")]
    held.append(await hold(bounded, None))
    assert len(gate(bounded, "standard").waiting) == 1
    assert sum(len(gate(bounded, n).waiting) for n in ("ngram", "eagle3", "dflash")) == 1
    held.append(await hold(bounded, None))
    # Three admitted: the total bound refuses even a forced mode that has room.
    free = next(n for n in ("ngram", "eagle3", "dflash") if not gate(bounded, n).waiting)
    r = await bounded.client.post("/v1/chat/completions", headers={"x-spec-mode": free},
                                  json=CHAT)
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
    assert r.headers["retry-after"] == "1"
    await open_all(bounded)
    replies = [await t for t in held]
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert replies[0].headers["x-spec-mode"] == "standard"
    assert "standard" not in {r.headers["x-spec-mode"] for r in replies[1:]}


async def test_auto_with_every_mode_full_gets_429() -> None:
    s = Settings(policy={"name": "rule"}, max_in_flight_per_mode=1)  # type: ignore[arg-type]
    async for g in serve(gated_engines(), settings=s):
        held = [await hold(g, mode) for mode in g.engines]
        r = await g.client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
        await open_all(g)
        assert [(await t).status_code for t in held] == [200] * 4


async def test_a_client_that_leaves_frees_its_slot(bounded: FakeGateway) -> None:
    engine = gate(bounded, "eagle3")

    async def leave_after_headers() -> None:
        async with httpx.AsyncClient(base_url=bounded.url) as client:
            await client.post("/v1/chat/completions", headers={"x-spec-mode": "eagle3"},
                              json=CHAT)

    task = asyncio.create_task(leave_after_headers())
    await wait_until(lambda: bool(engine.waiting))
    task.cancel()
    await wait_until(lambda: bool(engine.aborted))
    async def admitted() -> float:
        return value(await scrape(bounded), "specgate_admitted_requests", mode="eagle3")
    for _ in range(500):
        if await admitted() == 0:
            break
        await asyncio.sleep(0.01)
    assert await admitted() == 0
    engine.gate.set()
    r = await bounded.client.post("/v1/chat/completions", headers={"x-spec-mode": "eagle3"},
                                  json={**CHAT, "stream": True})
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")


def test_the_one_in_flight_count_is_by_mode_and_class() -> None:
    """What the policy prices the device mix on is admission's own count."""
    a = Admission()
    code = a.admit("dflash", "code")
    chat = [a.admit("dflash", "chat"), a.admit("standard", "chat")]
    assert a.in_flight_by_class() == {"dflash": {"code": 1, "chat": 1}, "standard": {"chat": 1}}
    code.release()
    for ticket in chat:
        ticket.release()
    assert a.in_flight_by_class() == {} and a.total == 0
