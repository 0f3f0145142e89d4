"""End to end: the official openai client, real HTTP, real vLLM CPU engines."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from tests.real.conftest import RealGateway

MODES = ("standard", "ngram", "eagle3", "dflash")
# Copy-heavy prompts give the n-gram proposer something to accept; the rest are free text.
# A plain continuation of a count: greedy, the model keeps counting until max_tokens,
# so the request is surely still running when the client hangs up.
COUNTING = {"prompt": ", ".join(str(i) for i in range(1, 30)) + ",", "max_tokens": 400,
            "temperature": 0}
GREEDY_PROMPTS = (
    "What is the capital of France?",
    "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat.",
    "Write a haiku about the sea.",
    "List the numbers from 1 to 12, separated by commas.",
    "Explain in one sentence what a CPU does.",
)


def client(gw: RealGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                              timeout=600)


async def test_models_and_paris(real_gateway: RealGateway) -> None:
    c = client(real_gateway)
    models = await c.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct"]
    reply = await c.chat.completions.create(
        model=real_gateway.model, temperature=0, max_tokens=30,
        messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert "Paris" in (reply.choices[0].message.content or "")
    await c.close()


def test_every_engine_is_warmed_and_timed_before_the_first_request(
        real_gateway: RealGateway) -> None:
    """The first request on a fresh CPU engine ran at half speed, and routing priced
    engines it had not timed at the prior's GPU speed: each engine warms up as it
    starts and has its decode step timed; the warm-up teaches no acceptance."""
    at_start = real_gateway.policy_at_start
    for mode in MODES:
        assert at_start["load"][mode]["step_profile"], (mode, at_start["load"][mode])
        assert at_start["load"][mode]["recent_acceptance_rate"] is None
    assert not any(at_start["acceptance"].values()), at_start["acceptance"]


@pytest.mark.parametrize("mode", MODES)
async def test_each_mode_chat_and_completions(real_gateway: RealGateway, mode: str) -> None:
    c = client(real_gateway)
    headers = {"x-spec-mode": mode}
    raw = await c.chat.completions.with_raw_response.create(
        model=real_gateway.model, temperature=0, max_tokens=12, extra_headers=headers,
        messages=[{"role": "user", "content": "Name three colours."}])
    assert raw.headers["x-spec-mode"] == mode
    assert raw.headers["x-spec-decision"] == "override"
    chat = raw.parse()
    assert chat.choices[0].message.content
    assert chat.usage is not None and 0 < chat.usage.completion_tokens <= 12

    stream = await c.chat.completions.create(
        model=real_gateway.model, temperature=0, max_tokens=12, extra_headers=headers,
        stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Name three colours."}])
    parts, usage = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert "".join(parts) == chat.choices[0].message.content
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens
    assert usage.prompt_tokens == chat.usage.prompt_tokens

    text = await c.completions.create(model=real_gateway.model, prompt="Once upon a time",
                                      max_tokens=8, temperature=0, extra_headers=headers)
    assert text.choices[0].finish_reason == "length"
    assert text.usage is not None and text.usage.completion_tokens == 8
    streamed = await c.completions.create(model=real_gateway.model, prompt="Once upon a time",
                                          max_tokens=8, temperature=0, extra_headers=headers,
                                          stream=True)
    assert "".join([ch.choices[0].text async for ch in streamed if ch.choices]) == \
        text.choices[0].text
    await c.close()


async def test_usage_matches_the_tokens_returned(real_gateway: RealGateway) -> None:
    c = client(real_gateway)
    reply = await c.chat.completions.create(
        model=real_gateway.model, temperature=0, max_tokens=20, logprobs=True, top_logprobs=2,
        messages=[{"role": "user", "content": "Say something about cats."}],
        extra_headers={"x-spec-mode": "standard"})
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert reply.usage is not None
    assert len(content) == reply.usage.completion_tokens
    assert "".join(e.token for e in content) == reply.choices[0].message.content
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in content)
    await c.close()


async def test_greedy_outputs_identical_across_modes(real_gateway: RealGateway) -> None:
    """Speculative decoding is lossless: drafts are verified, so greedy text cannot change."""
    c = client(real_gateway)

    async def run(mode: str, prompt: str) -> str:
        reply = await c.chat.completions.create(
            model=real_gateway.model, temperature=0, max_tokens=24,
            messages=[{"role": "user", "content": prompt}], extra_headers={"x-spec-mode": mode})
        return reply.choices[0].message.content or ""

    before = {mode: real_gateway.engine_stats(mode)["spec_decode"] for mode in MODES[1:]}
    outputs = {mode: await asyncio.gather(*(run(mode, p) for p in GREEDY_PROMPTS))
               for mode in MODES}
    for mode in MODES[1:]:
        assert outputs[mode] == outputs["standard"], f"{mode} differs from standard"
    # The speculative engines really drafted (and verified) while producing them, and
    # n-gram and the shipped trained drafters all had drafts accepted on the way (counted
    # from before: the warm-up drafted too).
    for mode in MODES[1:]:
        spec = real_gateway.engine_stats(mode)["spec_decode"]
        for key in ("drafts", "draft_tokens", "accepted_tokens"):
            assert spec[key] > before[mode][key], (mode, key)
    await c.close()


async def test_unknown_mode_and_forced_dflash(real_gateway: RealGateway) -> None:
    async with httpx.AsyncClient(base_url=real_gateway.url, timeout=300) as h:
        body = {"model": real_gateway.model, "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hi"}]}
        bad = await h.post("/v1/chat/completions", json=body, headers={"x-spec-mode": "nonsense"})
        assert bad.status_code == 400
        assert all(m in bad.json()["error"]["message"] for m in ("auto", *MODES))
        ok = await h.post("/v1/chat/completions", json=body, headers={"x-spec-mode": "dflash"})
        assert ok.status_code == 200 and ok.headers["x-spec-mode"] == "dflash"


@pytest.mark.parametrize("mode", ["standard", "eagle3"])
async def test_client_disconnect_leaves_nothing_running(real_gateway: RealGateway,
                                                        mode: str) -> None:
    async with httpx.AsyncClient(base_url=real_gateway.url, timeout=300) as h:
        body = {"model": real_gateway.model, "stream": True, **COUNTING}
        async with h.stream("POST", "/v1/completions", json=body,
                            headers={"x-spec-mode": mode}) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                # Hang up mid-generation: text has arrived, the finish has not.
                assert '"finish_reason":null' in line or not line.startswith("data: {")
                if '"text":"' in line and '"text":""' not in line:
                    break
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stats = real_gateway.engine_stats(mode)
        if stats["in_flight"] == 0 and stats["running"] == 0:
            break
        await asyncio.sleep(0.25)
    stats = real_gateway.engine_stats(mode)
    assert (stats["in_flight"], stats["running"], stats["waiting"]) == (0, 0, 0)


async def test_non_streaming_disconnect_aborts(real_gateway: RealGateway) -> None:
    body = {"model": real_gateway.model, **COUNTING}

    async def call() -> None:
        async with httpx.AsyncClient(base_url=real_gateway.url, timeout=300) as h:
            await h.post("/v1/completions", json=body, headers={"x-spec-mode": "ngram"})

    task = asyncio.create_task(call())
    await asyncio.sleep(1.0)
    assert not task.done(), "the response came back before the client could hang up"
    task.cancel()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stats = real_gateway.engine_stats("ngram")
        if stats["in_flight"] == 0 and stats["running"] == 0:
            break
        await asyncio.sleep(0.25)
    stats = real_gateway.engine_stats("ngram")
    assert (stats["in_flight"], stats["running"], stats["waiting"]) == (0, 0, 0)


@pytest.mark.parametrize("mode", ["standard", "ngram"])
async def test_n_choices_and_completion_logprobs(real_gateway: RealGateway, mode: str) -> None:
    c = client(real_gateway)
    reply = await c.chat.completions.create(
        model=real_gateway.model, temperature=0.8, seed=7, max_tokens=10, n=2,
        messages=[{"role": "user", "content": "Tell me a fact."}],
        extra_headers={"x-spec-mode": mode})
    assert [ch.index for ch in reply.choices] == [0, 1]
    assert all(ch.message.content for ch in reply.choices)
    assert reply.usage is not None and reply.usage.completion_tokens <= 20
    text = await c.completions.create(model=real_gateway.model, prompt="The sky is",
                                      max_tokens=5, temperature=0, logprobs=3,
                                      extra_headers={"x-spec-mode": mode})
    lp = text.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.top_logprobs is not None
    assert len(lp.tokens) == 5 == (text.usage.completion_tokens if text.usage else -1)
    assert "".join(lp.tokens) == text.choices[0].text
    # A dict per token: two top tokens that decode alike would share a key.
    assert all(1 <= len(top) <= 3 for top in lp.top_logprobs)
    assert any(len(top) == 3 for top in lp.top_logprobs)
    await c.close()
