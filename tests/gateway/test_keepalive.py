"""SSE keep-alive comments on silent streams, including before the first token."""

from __future__ import annotations

import asyncio
import json
from typing import cast

import openai

from engines.base import InvalidGenerationRequest
from service.settings import Settings
from tests.conftest import MODEL, fake_engines, serve
from tests.fakes.gated import GatedEngine, gated_engines, wait_until

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "stream": True}
KEEPALIVE = ": keep-alive"


def settings(keepalive_s: float) -> Settings:
    return Settings(policy={"name": "rule"}, sse_keepalive_s=keepalive_s)  # type: ignore[arg-type]


async def test_silent_stream_gets_comments_and_the_sdk_ignores_them() -> None:
    # Tokens every 0.5 s, keep-alive every 0.05 s: comments between the chunks.
    async for g in serve(fake_engines(token_delay_s=0.5), settings=settings(0.05)):
        r = await g.client.post("/v1/chat/completions", json=CHAT)
        lines = r.text.split("\n\n")
        assert KEEPALIVE in lines
        first_chunk = next(i for i, line in enumerate(lines) if '"content":" the"' in line)
        assert KEEPALIVE in lines[first_chunk:], "no comment after the first chunk"
        assert lines[-2] == "data: [DONE]"
        async with openai.AsyncOpenAI(base_url=g.url + "/v1", api_key="x",
                                      max_retries=0) as client:
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream
                            if c.choices])
        assert text == " the quick brown"


async def test_no_comments_when_disabled_or_not_silent() -> None:
    async for g in serve(fake_engines(token_delay_s=0.2), settings=settings(0)):
        r = await g.client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and KEEPALIVE not in r.text
    async for g in serve(fake_engines(), settings=settings(5.0)):
        r = await g.client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and KEEPALIVE not in r.text


async def read_until(lines: object, wanted: str) -> list[str]:
    seen: list[str] = []
    async for line in lines:  # type: ignore[attr-defined]
        seen.append(line)
        if wanted in line:
            return seen
    raise AssertionError(f"{wanted!r} never came: {seen}")


async def test_headers_and_comments_before_a_slow_first_token() -> None:
    """A request that waits for its first token (full batch, long prefill) is
    answered 200 after one interval and kept alive until the token comes."""
    async for g in serve(gated_engines(), settings=settings(0.05)):
        engine = cast(GatedEngine, g.engines["eagle3"])
        async with g.client.stream("POST", "/v1/chat/completions", json=CHAT,
                                   headers={"x-spec-mode": "eagle3"}) as r:
            # The engine has produced nothing yet, and cannot until the gate opens.
            assert r.status_code == 200
            assert r.headers["x-spec-mode"] == "eagle3"
            lines = r.aiter_lines()
            await asyncio.wait_for(read_until(lines, KEEPALIVE), timeout=10)
            assert engine.waiting and not engine.served
            engine.gate.set()
            rest = await asyncio.wait_for(read_until(lines, "[DONE]"), timeout=10)
        assert any('"content":" the"' in line for line in rest)


async def test_without_keepalive_the_first_token_is_awaited_before_200() -> None:
    async for g in serve(gated_engines(), settings=settings(0)):
        engine = cast(GatedEngine, g.engines["eagle3"])
        request = asyncio.create_task(g.client.post(
            "/v1/chat/completions", json=CHAT, headers={"x-spec-mode": "eagle3"}))
        await wait_until(lambda e=engine: bool(e.waiting))
        await asyncio.sleep(0.3)
        assert not request.done()
        engine.gate.set()
        assert (await request).status_code == 200


async def test_a_late_refusal_is_an_error_event() -> None:
    # Refused after the 200 went out: reported in the stream, then [DONE].
    async for g in serve(gated_engines(), settings=settings(0.05)):
        engine = cast(GatedEngine, g.engines["ngram"])
        engine.refuse = InvalidGenerationRequest("the prompt is too long for this engine")
        async with g.client.stream("POST", "/v1/chat/completions", json=CHAT,
                                   headers={"x-spec-mode": "ngram"}) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            await asyncio.wait_for(read_until(lines, KEEPALIVE), timeout=10)
            engine.gate.set()
            rest = await asyncio.wait_for(read_until(lines, "[DONE]"), timeout=10)
        error = json.loads(next(x for x in rest if x.startswith("data: {"))[6:])["error"]
        assert error["code"] == "engine_failed" and "too long" in error["message"]


async def test_an_immediate_refusal_is_still_a_real_4xx() -> None:
    # Refusals come at once, well within the interval: a real 400, not a 200 stream.
    async for g in serve(gated_engines(), settings=settings(2.0)):
        engine = cast(GatedEngine, g.engines["ngram"])
        engine.refuse = InvalidGenerationRequest("the prompt is too long for this engine")
        engine.gate.set()
        r = await g.client.post("/v1/chat/completions", json=CHAT,
                                headers={"x-spec-mode": "ngram"})
        assert r.status_code == 400
        assert "too long" in r.json()["error"]["message"]
