"""vLLM's request extras over real HTTP: what reaches the engine, usage on every chunk,
prompt truncation, and the access log's line for a refused request."""

from __future__ import annotations

import json
import logging

import pytest

from engines.request import SamplingOptions
from tests.conftest import MODEL, FakeGateway
from tests.gateway.test_chat import sse_events

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def only_request(g: FakeGateway) -> SamplingOptions:
    (served,) = [r for e in g.engines.values() for r in e.served]
    return served.sampling


@pytest.mark.parametrize("path, base", [(CHAT, {"messages": MESSAGES}),
                                        (COMPLETIONS, {"prompt": "hi"})])
async def test_sampling_extras_reach_the_engine(gateway: FakeGateway, path: str,
                                                base: dict[str, object]) -> None:
    r = await gateway.client.post(path, json={
        "model": MODEL, **base, "max_tokens": 5, "top_k": 20, "min_p": 0.1,
        "repetition_penalty": 1.2, "min_tokens": 3, "ignore_eos": True,
        "logit_bias": {"42": -100, "7": 2.5}, "stop_token_ids": [13, 14],
        "include_stop_str_in_output": True, "skip_special_tokens": False,
        "spaces_between_special_tokens": False, "allowed_token_ids": [1, 2],
        "bad_words": ["bad"], "cache_salt": "tenant-a"})
    assert r.status_code == 200, r.text
    o = only_request(gateway)
    assert (o.top_k, o.min_p, o.repetition_penalty, o.min_tokens, o.ignore_eos) == \
        (20, 0.1, 1.2, 3, True)
    assert dict(o.logit_bias) == {42: -100.0, 7: 2.5}
    assert o.stop_token_ids == (13, 14) and o.allowed_token_ids == (1, 2)
    assert o.include_stop_str_in_output and not o.skip_special_tokens
    assert not o.spaces_between_special_tokens and o.bad_words == ("bad",)
    (served,) = [r for e in gateway.engines.values() for r in e.served]
    assert served.cache_salt == "tenant-a"


async def test_defaults_are_vllms(gateway: FakeGateway) -> None:
    r = await gateway.client.post(CHAT, json={"model": MODEL, "messages": MESSAGES,
                                              "max_tokens": 2})
    assert r.status_code == 200
    assert only_request(gateway) == SamplingOptions(max_tokens=2)


@pytest.mark.parametrize("body, param", [
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),       # past the fake's vocabulary
    ({"stop_token_ids": [0x110000]}, "stop_token_ids"),
    ({"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
    ({"truncate_prompt_tokens": 513}, "truncate_prompt_tokens"),  # context is 512
])
async def test_checks_that_need_the_model(gateway: FakeGateway, body: dict[str, object],
                                          param: str) -> None:
    r = await gateway.client.post(COMPLETIONS, json={"model": MODEL, "prompt": "hi", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert not any(e.served for e in gateway.engines.values())


@pytest.mark.parametrize("side, kept", [(None, "world"), ("left", "world"),
                                        ("right", "hello")])
async def test_truncate_prompt_tokens(gateway: FakeGateway, side: str | None,
                                      kept: str) -> None:
    body = {"model": MODEL, "prompt": "hello world", "max_tokens": 1,
            "truncate_prompt_tokens": 5, **({"truncation_side": side} if side else {})}
    r = await gateway.client.post(COMPLETIONS, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 5
    (served,) = [r for e in gateway.engines.values() for r in e.served]
    assert "".join(chr(t) for t in served.prompt_token_ids) == kept


async def test_continue_final_message(gateway: FakeGateway) -> None:
    r = await gateway.client.post(CHAT, json={
        "model": MODEL, "max_tokens": 1, "add_generation_prompt": False,
        "continue_final_message": True,
        "messages": [*MESSAGES, {"role": "assistant", "content": "The answer is"}]})
    assert r.status_code == 200, r.text
    (served,) = [r for e in gateway.engines.values() for r in e.served]
    assert "".join(chr(t) for t in served.prompt_token_ids).endswith("The answer is")


@pytest.mark.parametrize("path, base", [(CHAT, {"messages": MESSAGES}),
                                        (COMPLETIONS, {"prompt": "hi"})])
async def test_continuous_usage_stats_put_usage_on_every_chunk(
        gateway: FakeGateway, path: str, base: dict[str, object]) -> None:
    # What guidellm sends on every request.
    r = await gateway.client.post(path, json={
        "model": MODEL, **base, "max_tokens": 4, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["usage"] is not None for c in chunks)
    prompt = chunks[0]["usage"]["prompt_tokens"]
    completion = [c["usage"]["completion_tokens"] for c in chunks]
    assert completion == sorted(completion) and completion[-1] == 4
    assert all(c["usage"]["total_tokens"] == prompt + c["usage"]["completion_tokens"]
               for c in chunks)
    assert chunks[-1]["choices"] == []


async def test_without_include_usage_continuous_stats_add_nothing(gateway: FakeGateway) -> None:
    r = await gateway.client.post(COMPLETIONS, json={
        "model": MODEL, "prompt": "hi", "max_tokens": 2, "stream": True,
        "stream_options": {"continuous_usage_stats": True}})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert chunks and all("usage" not in c for c in chunks)


async def test_access_log_names_the_error_never_the_body(
        gateway: FakeGateway, caplog: pytest.LogCaptureFixture) -> None:
    secret = "my-secret-prompt-text"
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        r = await gateway.client.post(CHAT, json={
            "model": MODEL, "messages": [{"role": "user", "content": secret}],
            "functions": [{"name": secret}]})
        ok = await gateway.client.post(CHAT, json={"model": MODEL, "messages": MESSAGES,
                                                   "max_tokens": 1})
    assert r.status_code == 400 and ok.status_code == 200
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "gateway.access"]
    refused = [line for line in lines if '" 400 ' in line]
    assert len(refused) == 1, lines
    assert '"POST /v1/chat/completions HTTP/1.1" 400' in refused[0]
    assert "type=invalid_request_error code=unsupported_parameter param=functions" in refused[0]
    assert any('" 200 ' in line and "code=" not in line for line in lines), lines
    assert not any(secret in line for line in lines)
    assert not any(secret in rec.getMessage() for rec in caplog.records)
