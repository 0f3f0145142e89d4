"""Length limits: prompt + max_tokens within the context, however large the ask."""

from __future__ import annotations

import pytest

from tests.conftest import MODEL, FakeGateway

LIMIT = 512  # tests.conftest.serve's max_model_len; the fake tokenizer: one token per char


@pytest.mark.parametrize("max_tokens", [LIMIT, 10**6, 2**63, 10**30])
async def test_giant_max_tokens_is_a_clear_400(gateway: FakeGateway, max_tokens: int) -> None:
    for path, body in [
        ("/v1/completions", {"model": MODEL, "prompt": "xx", "max_tokens": max_tokens}),
        ("/v1/chat/completions", {"model": MODEL, "max_tokens": max_tokens,
                                  "messages": [{"role": "user", "content": "x"}]}),
        ("/v1/chat/completions", {"model": MODEL, "max_completion_tokens": max_tokens,
                                  "messages": [{"role": "user", "content": "x"}]}),
    ]:
        for stream in (False, True):
            r = await gateway.client.post(path, json={**body, "stream": stream})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "context_length_exceeded"
            assert f"maximum context length is {LIMIT} tokens" in error["message"]
    assert not any(e.served for e in gateway.engines.values())


async def test_prompt_plus_max_tokens_exactly_at_the_limit_is_served(
        gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "x" * 500, "max_tokens": LIMIT - 500})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == LIMIT - 500
    r = await gateway.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "x" * 500, "max_tokens": LIMIT - 499})
    assert r.status_code == 400
    assert "513 tokens (500 in the prompt, 13 for the completion)" in r.json()["error"]["message"]


async def test_without_max_tokens_the_rest_of_the_context_is_the_cap(
        gateway: FakeGateway) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 400}]}
    r = await gateway.client.post("/v1/chat/completions", json=chat)
    usage = r.json()["usage"]
    assert r.status_code == 200 and usage["total_tokens"] == LIMIT
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x" * LIMIT}]}
    r = await gateway.client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


async def test_n_is_bounded_per_request(gateway: FakeGateway) -> None:
    # Each choice is its own sequence within the context; n bounds the work instead.
    r = await gateway.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "x", "max_tokens": 2, "n": 8})
    assert r.status_code == 200 and len(r.json()["choices"]) == 8
    r = await gateway.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "x", "max_tokens": 2, "n": 9})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
