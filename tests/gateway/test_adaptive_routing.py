"""Auto routing with the adaptive policy, through the gateway with fake engines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve


@pytest.fixture
async def adaptive(request: pytest.FixtureRequest) -> AsyncIterator[FakeGateway]:
    settings = Settings(policy={"adaptive": {"exploration_share": 0.0}})  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=settings):
        yield g


def chat(max_tokens: int = 100) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}


async def test_decision_header_gives_reason_and_margin(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200
    reason = r.headers["x-spec-decision"]
    assert reason.split(":")[0] in {"cost", "hold"}
    assert reason.endswith("%")


async def test_forced_traffic_teaches_auto(adaptive: FakeGateway) -> None:
    """The fakes accept 80% (dflash) vs 30% (eagle3) and 60% (ngram) of drafts."""
    for mode in ("eagle3", "ngram", "dflash"):
        for _ in range(6):
            r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                           headers={"x-spec-mode": mode,
                                                    "x-workload-class": "code"})
            assert r.headers["x-spec-decision"] == "override"
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "code"})
    assert r.headers["x-spec-mode"] == "dflash"


async def test_short_outputs_go_plain(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(max_tokens=1))
    assert r.headers["x-spec-mode"] == "standard"


async def test_bad_workload_class_is_400(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "no spaces allowed"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-workload-class"
    body = {**chat(), "metadata": {"workload_class": "x" * 100}}
    r = await adaptive.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "metadata.workload_class"


async def test_a_follow_up_is_learned_apart_on_chat_and_responses(
        adaptive: FakeGateway) -> None:
    """An unlabelled follow-up (an earlier assistant turn) is learned under its own
    class, which the operator sees on /metrics, on both endpoints that take turns."""
    turns = [{"role": "user", "content": "Name three fruits."},
             {"role": "assistant", "content": "Apple, pear, plum."},
             {"role": "user", "content": "The same, reversed."}]
    r = await adaptive.client.post("/v1/chat/completions", headers={"x-spec-mode": "dflash"},
                                   json={**chat(), "messages": turns})
    assert r.status_code == 200
    assert await learned(adaptive, "auto:turns:s")
    assert not await learned(adaptive, "auto:text:s", wait_s=0.0)
    r = await adaptive.client.post("/v1/responses", headers={"x-spec-mode": "dflash"},
                                   json={"model": MODEL, "input": turns,
                                         "max_output_tokens": 8})
    assert r.status_code == 200
    assert not await learned(adaptive, "auto:text:s", wait_s=0.5)
    r = await adaptive.client.post("/v1/responses", headers={"x-spec-mode": "dflash"},
                                   json={"model": MODEL, "input": "Name three fruits.",
                                         "max_output_tokens": 8})
    assert await learned(adaptive, "auto:text:s")


async def learned(gateway: FakeGateway, cls: str, wait_s: float = 2.0) -> bool:
    """Whether /metrics shows acceptance learned for ``cls`` (a request is learned from
    once its stream has ended, which may be just after its response)."""
    deadline = time.monotonic() + wait_s
    while True:
        if f'class="{cls}"' in (await gateway.client.get("/metrics")).text:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
