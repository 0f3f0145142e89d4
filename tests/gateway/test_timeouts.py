"""request_timeout_s: past it the engine request is aborted and the caller told so."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.fakes.gated import gated_engines, wait_until
from tests.gateway.test_metrics import scrape, value

# 0.05 s per token, 400 tokens: 20 s of work against a 1 s limit.
LONG = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400}


def settings(**extra: object) -> Settings:
    values: dict[str, object] = {"policy": {"name": "rule"}, "request_timeout_s": 1.0, **extra}
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def limited() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines(token_delay_s=0.05), settings=settings()):
        yield g


def assert_timeout_error(error: dict) -> None:  # type: ignore[type-arg]
    assert error["type"] == "server_error" and error["code"] == "request_timeout"
    assert "1 s" in error["message"]


async def test_non_streaming_request_past_its_deadline_gets_504(limited: FakeGateway) -> None:
    engine = limited.engines["standard"]
    r = await limited.client.post("/v1/chat/completions", json=LONG,
                                  headers={"x-spec-mode": "standard"})
    assert r.status_code == 504
    assert_timeout_error(r.json()["error"])
    await wait_until(lambda: not engine.running)
    assert len(engine.aborted) == 1
    samples = await scrape(limited)
    assert value(samples, "specgate_errors_total", type="server_error",
                 code="request_timeout") == 1
    assert value(samples, "specgate_admitted_requests", mode="standard") == 0


async def test_stream_past_its_deadline_ends_with_an_error_event(limited: FakeGateway) -> None:
    engine = limited.engines["ngram"]
    r = await limited.client.post("/v1/chat/completions", json={**LONG, "stream": True},
                                  headers={"x-spec-mode": "ngram"})
    assert r.status_code == 200
    events = [line.removeprefix("data: ") for line in r.text.splitlines()
              if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert_timeout_error(json.loads(events[-2])["error"])
    assert any('"content":" the"' in e for e in events[:-2])  # it did stream first
    await wait_until(lambda: not engine.running)
    assert len(engine.aborted) == 1
    samples = await scrape(limited)
    assert value(samples, "specgate_errors_total", type="server_error",
                 code="request_timeout") == 1


async def test_openai_client_sees_the_timeout(limited: FakeGateway) -> None:
    async with openai.AsyncOpenAI(base_url=limited.url + "/v1", api_key="x",
                                  max_retries=0) as client:
        with pytest.raises(openai.InternalServerError) as exc:
            await client.chat.completions.create(**LONG)  # type: ignore[call-overload]
        assert exc.value.status_code == 504
        stream = await client.chat.completions.create(**LONG, stream=True)  # type: ignore[call-overload]
        with pytest.raises(openai.APIError, match="limit"):
            async for _ in stream:
                pass


async def test_deadline_covers_the_wait_for_the_first_token() -> None:
    # keep-alive off: a stream is not answered before its first event, so the
    # timeout is a real 504 even for a streaming request.
    async for g in serve(gated_engines(), settings=settings(sse_keepalive_s=0)):
        for stream in (False, True):
            r = await g.client.post("/v1/completions", headers={"x-spec-mode": "dflash"},
                                    json={"model": MODEL, "prompt": "x", "stream": stream})
            assert r.status_code == 504, r.text
            assert_timeout_error(r.json()["error"])
        assert len(g.engines["dflash"].aborted) == 2


async def test_requests_within_the_limit_are_untouched(limited: FakeGateway) -> None:
    r = await limited.client.post("/v1/chat/completions", json={**LONG, "max_tokens": 3})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


async def test_no_limit_when_zero() -> None:
    async for g in serve(fake_engines(token_delay_s=0.05),
                         settings=settings(request_timeout_s=0)):
        r = await g.client.post("/v1/chat/completions", json={**LONG, "max_tokens": 30})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 30
