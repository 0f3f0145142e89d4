"""A request moved to another engine mid-way reads, over HTTP and through the openai
SDK, as one response: one text, stitched usage, and the final mode reported (the
last chunks' ``spec_mode``, or the headers of a non-streaming response)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import openai
import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.fakes.engine import WORDS
from tests.service.test_moves import ScriptedPolicy

TOKENS = 30


@pytest.fixture
async def moving() -> AsyncIterator[tuple[FakeGateway, ScriptedPolicy]]:
    policy = ScriptedPolicy()
    settings = Settings(policy={"name": "adaptive"}, move_min_remaining_tokens=4)  # type: ignore[arg-type]
    async for g in serve(fake_engines(token_delay_s=0.02), settings=settings, policy=policy):
        yield g, policy


def unmoved() -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(TOKENS))


async def switch_to_eagle3(g: FakeGateway, policy: ScriptedPolicy) -> None:
    """Auto moves the device group: the next auto request is decided on eagle3."""
    policy.mode = "eagle3"
    r = await g.client.post("/v1/completions", json={"model": MODEL, "prompt": "hi",
                                                     "max_tokens": 1})
    assert r.headers["x-spec-mode"] == "eagle3"


async def test_a_moved_stream_is_one_response_to_the_sdk(
        moving: tuple[FakeGateway, ScriptedPolicy]) -> None:
    g, policy = moving
    text, chunks = "", []
    async with openai.AsyncOpenAI(base_url=g.url + "/v1", api_key="x",
                                  max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "tell me"}],
            max_tokens=TOKENS, temperature=0, stream=True,
            stream_options={"include_usage": True})
        assert stream.response.headers["x-spec-mode"] == "standard"   # where it started
        async for chunk in stream:
            chunks.append(chunk)
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if len(chunks) == 5:
                await switch_to_eagle3(g, policy)
    assert text == unmoved()
    last_content = next(c for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
    assert last_content.choices[0].finish_reason == "length"
    assert last_content.model_extra == {"spec_mode": "eagle3", "spec_moves": 1}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == TOKENS
    assert chunks[-1].model_extra == {"spec_mode": "eagle3", "spec_moves": 1}
    metrics = (await g.client.get("/metrics")).text
    assert 'specgate_moves_total{source="standard",target="eagle3"} 1.0' in metrics


async def test_a_moved_request_reports_where_it_finished(
        moving: tuple[FakeGateway, ScriptedPolicy]) -> None:
    g, policy = moving
    call = asyncio.create_task(g.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "tell me", "max_tokens": TOKENS, "temperature": 0}))
    await asyncio.sleep(0.2)                      # a few tokens in
    await switch_to_eagle3(g, policy)
    r = await call
    assert r.status_code == 200
    assert r.headers["x-spec-mode"] == "eagle3" and r.headers["x-spec-moves"] == "1"
    assert r.headers["x-spec-decision"] == "move:eagle3"
    body = r.json()
    assert body["choices"][0]["text"] == unmoved()
    assert body["usage"]["completion_tokens"] == TOKENS
    assert body["usage"]["prompt_tokens"] == len("tell me")
