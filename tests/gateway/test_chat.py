"""Chat completions wire format, against the gateway over real HTTP with fake engines."""

from __future__ import annotations

import json

import openai
import pytest

from tests.conftest import MODEL, FakeGateway

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def sse_events(text: str) -> list[str]:
    assert text.endswith("\n\n"), "every SSE event ends with a blank line"
    events = [block for block in text.split("\n\n") if block]
    assert all(e.startswith("data: ") for e in events)
    return [e.removeprefix("data: ") for e in events]


async def test_non_streaming_body(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions",
                                  json={"model": MODEL, "messages": MESSAGES, "max_tokens": 4})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == MODEL
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": " the quick brown fox",
                                 "refusal": None}
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 4
    assert r.headers["x-request-id"] == body["id"]


async def test_streaming_framing_usage_and_done(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == " the quick brown"
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert all(c["usage"] is None for c in chunks[:-1])
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}


async def test_streaming_without_usage_has_no_usage_chunk(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 2, "stream": True})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert all("usage" not in c for c in chunks)
    assert all(c["choices"] for c in chunks)


async def test_stop_sequence_ends_with_stop(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 10, "stop": ["fox"]})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert "fox" not in choice["message"]["content"]


async def test_sampling_parameters_reach_the_engine(gateway: FakeGateway) -> None:
    await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "standard"}, json={
        "model": MODEL, "messages": MESSAGES, "max_completion_tokens": 7, "temperature": 0.3,
        "top_p": 0.9, "seed": 11, "presence_penalty": 0.5, "stop": "x"})
    (served,) = gateway.engines["standard"].served
    s = served.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.seed, s.presence_penalty, s.stop) == \
        (7, 0.3, 0.9, 11, 0.5, ("x",))


async def test_n_choices_and_logprobs(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 2, "n": 2, "logprobs": True,
        "top_logprobs": 2})
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 4
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == [" the", " quick"]
    assert len(content[0]["top_logprobs"]) == 2
    assert content[0]["bytes"] == list(b" the")


async def test_official_openai_client(gateway: FakeGateway) -> None:
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused")
    done = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=3,  # type: ignore[arg-type]
        extra_headers={"x-spec-mode": "eagle3"})
    assert done.headers["x-spec-mode"] == "eagle3"
    assert done.parse().choices[0].message.content == " the quick brown"
    stream = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True})
    parts, usage = [], None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == " the quick brown"
    assert usage is not None and usage.completion_tokens == 3
    await client.close()


async def test_engine_failure_mid_stream_is_an_error_event(gateway: FakeGateway) -> None:
    gateway.engines["ngram"].fail_after_tokens = 2
    r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "ngram"},
                                  json={"model": MODEL, "messages": MESSAGES, "max_tokens": 5,
                                        "stream": True})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "engine_failed"
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused")
    with pytest.raises(openai.APIError):
        stream = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=5, stream=True,  # type: ignore[arg-type]
            extra_headers={"x-spec-mode": "ngram"})
        async for _ in stream:
            pass
    await client.close()
