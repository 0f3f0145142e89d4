"""An engine dies under requests in flight: over HTTP and through the openai SDK each
still reads as one whole response, which says it failed over (``service/failover.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import openai
import pytest

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.fakes.engine import WORDS, FakeEngine
from tests.service.test_moves import ScriptedPolicy

TOKENS = 30


@pytest.fixture
async def dying() -> AsyncIterator[tuple[FakeGateway, dict[str, FakeEngine]]]:
    engines = fake_engines(token_delay_s=0.02)
    policy = ScriptedPolicy()
    policy.mode = "ngram"
    settings = Settings(policy={"name": "adaptive"})  # type: ignore[arg-type]
    async for g in serve(engines, settings=settings, policy=policy):
        yield g, engines


def whole() -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(TOKENS))


async def test_a_stream_keeps_streaming_when_its_engine_dies(
        dying: tuple[FakeGateway, dict[str, FakeEngine]]) -> None:
    g, engines = dying
    text, chunks = "", []
    async with openai.AsyncOpenAI(base_url=g.url + "/v1", api_key="x",
                                  max_retries=0) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "tell me"}],
            max_tokens=TOKENS, temperature=0, stream=True,
            stream_options={"include_usage": True})
        assert stream.response.headers["x-spec-mode"] == "ngram"
        async for chunk in stream:
            chunks.append(chunk)
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if len(chunks) == 5:
                engines["ngram"].die()
    assert text == whole()
    extra = {"spec_mode": "standard", "spec_moves": 1, "spec_failovers": 1}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == TOKENS
    assert chunks[-1].model_extra == extra
    metrics = (await g.client.get("/metrics")).text
    assert 'specgate_failovers_total{source="ngram",target="standard"} 1.0' in metrics


@pytest.mark.parametrize("stop", [None, ["zzz"]], ids=["resumed", "started-again"])
async def test_a_non_streaming_request_returns_normally_when_its_engine_dies(
        dying: tuple[FakeGateway, dict[str, FakeEngine]], stop: list[str] | None) -> None:
    g, engines = dying
    call = asyncio.create_task(g.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "tell me", "max_tokens": TOKENS, "temperature": 0,
        "stop": stop}))
    await asyncio.sleep(0.2)                      # a few tokens in
    engines["ngram"].die()
    r = await call
    assert r.status_code == 200, r.text
    assert r.headers["x-spec-mode"] == "standard" and r.headers["x-spec-moves"] == "1"
    assert r.headers["x-spec-failovers"] == "1"
    assert r.headers["x-spec-decision"] == "failover:standard"
    body = r.json()
    # With a stop string it cannot resume at the seam: it started again from its prompt,
    # and what the dead engine gave is not in the answer twice.
    assert body["choices"][0]["text"] == whole()
    assert body["usage"] == {"prompt_tokens": len("tell me"), "completion_tokens": TOKENS,
                             "total_tokens": len("tell me") + TOKENS}
