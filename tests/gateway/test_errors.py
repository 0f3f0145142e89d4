"""Bad input gets the OpenAI error envelope with a 4xx, never a 500 or a stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gateway.errors import http_error
from service.errors import AtCapacity, EngineFailed, InvalidRequest, TimedOut, Unavailable
from tests.conftest import MODEL, FakeGateway, fake_engines, serve

OK_MESSAGES = [{"role": "user", "content": "hi"}]


# One gateway takes every bad request of the module: none may disturb the next.
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g


@pytest_asyncio.fixture(loop_scope="module")
async def own_gateway() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g


def assert_envelope(r, status: int, *, param: str | None = "<any>",  # type: ignore[no-untyped-def]
                    contains: str = "") -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and contains in error["message"]
    if param != "<any>":
        assert error["param"] == param
    return error


@pytest.mark.asyncio(loop_scope="module")
async def test_unknown_spec_mode_lists_valid_values(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "nonsense"},
                                  json={"model": MODEL, "messages": OK_MESSAGES})
    error = assert_envelope(r, 400, param="x-spec-mode", contains="nonsense")
    for mode in ("auto", "standard", "ngram", "eagle3", "dflash"):
        assert mode in error["message"]
    assert not any(e.served for e in gateway.engines.values())


@pytest.mark.asyncio(loop_scope="module")
async def test_spec_mode_garbage_is_not_echoed_raw(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/completions", headers={"x-spec-mode": "a\tb" + "x" * 500},
                                  json={"model": MODEL, "prompt": "hi"})
    error = assert_envelope(r, 400, param="x-spec-mode")
    assert len(error["message"]) < 300


@pytest.mark.parametrize("body, param", [
    ({"messages": OK_MESSAGES}, "model"),
    ({"model": MODEL}, "messages"),
    ({"model": MODEL, "messages": []}, "messages"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"model": MODEL, "messages": [{"role": "user"}]}, "messages.0"),
    ({"model": MODEL, "messages": "hello"}, "messages"),
    ({"model": MODEL, "messages": OK_MESSAGES, "temperature": -1}, "temperature"),
    ({"model": MODEL, "messages": OK_MESSAGES, "temperature": "hot"}, "temperature"),
    ({"model": MODEL, "messages": OK_MESSAGES, "top_p": 0}, "top_p"),
    ({"model": MODEL, "messages": OK_MESSAGES, "max_tokens": 0}, "max_tokens"),
    ({"model": MODEL, "messages": OK_MESSAGES, "n": 0}, "n"),
    ({"model": MODEL, "messages": OK_MESSAGES, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"model": MODEL, "messages": OK_MESSAGES, "top_logprobs": 3}, None),
    ({"model": MODEL, "messages": OK_MESSAGES, "stream_options": {"include_usage": True}}, None),
    ({"model": MODEL, "messages": OK_MESSAGES, "tools": [{"type": "function"}]},
     "tools.0.function"),
    ({"model": MODEL, "messages": OK_MESSAGES, "response_format": {"type": "xml"}},
     "response_format.type"),
    ({"model": MODEL, "messages": OK_MESSAGES, "response_format": {"type": "json_schema"}},
     "response_format"),
])
@pytest.mark.asyncio(loop_scope="module")
async def test_invalid_chat_requests(gateway: FakeGateway, body: dict, param: str | None) -> None:
    r = await gateway.client.post("/v1/chat/completions", json=body)
    assert_envelope(r, 400, param=param)


@pytest.mark.asyncio(loop_scope="module")
async def test_invalid_json_and_non_finite_numbers(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", content=b"{not json",
                                  headers={"content-type": "application/json"})
    assert_envelope(r, 400, contains="JSON")
    r = await gateway.client.post(
        "/v1/chat/completions", headers={"content-type": "application/json"},
        content=b'{"model": "fake-model", "messages": [{"role": "user", "content": "x"}],'
                b' "temperature": NaN}')
    assert_envelope(r, 400, param="temperature")


@pytest.mark.asyncio(loop_scope="module")
async def test_unknown_model_is_404(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions",
                                  json={"model": "gpt-9", "messages": OK_MESSAGES})
    error = assert_envelope(r, 404, param="model", contains="gpt-9")
    assert error["code"] == "model_not_found"


@pytest.mark.asyncio(loop_scope="module")
async def test_context_length_exceeded(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/completions",
                                  json={"model": MODEL, "prompt": "x" * 100, "max_tokens": 500})
    error = assert_envelope(r, 400, param="max_tokens", contains="maximum context length")
    assert error["code"] == "context_length_exceeded"
    r = await gateway.client.post("/v1/completions",
                                  json={"model": MODEL, "prompt": "x" * 600, "max_tokens": 1})
    assert_envelope(r, 400, contains="maximum context length")


@pytest.mark.asyncio(loop_scope="module")
async def test_n_above_limit(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/completions",
                                  json={"model": MODEL, "prompt": "x", "n": 50})
    assert_envelope(r, 400, param="n")


@pytest.mark.asyncio(loop_scope="module")
async def test_streaming_validation_error_is_a_real_4xx(gateway: FakeGateway) -> None:
    r = await gateway.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": OK_MESSAGES, "stream": True, "temperature": 5})
    assert_envelope(r, 400, param="temperature")
    r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "bogus"},
                                  json={"model": MODEL, "messages": OK_MESSAGES, "stream": True})
    assert_envelope(r, 400, param="x-spec-mode")


@pytest.mark.asyncio(loop_scope="module")
async def test_unknown_route_and_method(gateway: FakeGateway) -> None:
    assert_envelope(await gateway.client.get("/v1/nothing"), 404)
    assert_envelope(await gateway.client.get("/v1/chat/completions"), 405)


@pytest.mark.asyncio(loop_scope="module")
async def test_completions_bad_prompts(gateway: FakeGateway) -> None:
    for prompt in (["a", "b"], [], [-1], [0x110000]):
        r = await gateway.client.post("/v1/completions", json={"model": MODEL, "prompt": prompt})
        assert_envelope(r, 400)
    r = await gateway.client.post("/v1/completions",
                                  json={"model": MODEL, "prompt": "x", "echo": True})
    assert_envelope(r, 400, contains="echo")


@pytest.mark.asyncio(loop_scope="module")
async def test_bad_requests_leave_the_gateway_working(gateway: FakeGateway) -> None:
    await gateway.client.post("/v1/chat/completions", content=b"\xff\xfe garbage")
    r = await gateway.client.post("/v1/chat/completions",
                                  json={"model": MODEL, "messages": OK_MESSAGES, "max_tokens": 2})
    assert r.status_code == 200


@pytest.mark.asyncio(loop_scope="module")
async def test_internal_errors_are_500_without_internal_text(own_gateway: FakeGateway,
                                                              caplog: pytest.LogCaptureFixture
                                                              ) -> None:
    gateway = own_gateway   # its engine is broken for good
    async def broken(request):  # type: ignore[no-untyped-def]
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover

    gateway.engines["standard"].generate = broken  # type: ignore[method-assign]
    r = await gateway.client.post("/v1/chat/completions", headers={"x-spec-mode": "standard"},
                                  json={"model": MODEL, "messages": OK_MESSAGES})
    error = assert_envelope(r, 500)
    assert error["type"] == "server_error"
    assert "secret" not in r.text
    assert "error id" in error["message"]
    assert "secret internal detail" in caplog.text


def test_an_engine_failure_is_503_with_retry_after_when_a_retry_can_succeed() -> None:
    retry = http_error(EngineFailed("the 'eagle3' engine failed", retryable=True))
    assert (retry.status, retry.code, retry.headers) == (503, "engine_failed",
                                                         {"Retry-After": "1"})
    final = http_error(EngineFailed("the engine stream ended without finishing",
                                    retryable=False))
    assert (final.status, final.code, final.type) == (502, "engine_failed", "server_error")
    assert final.body()["error"]["message"] == "the engine stream ended without finishing"


@pytest.mark.parametrize("error, status, kind, retry", [
    (InvalidRequest("bad n", param="n"), 400, "invalid_request_error", False),
    (AtCapacity("full", code="queue_full"), 429, "rate_limit_error", True),
    (Unavailable("starting", code="starting"), 503, "server_error", True),
    (TimedOut("too slow", code="request_timeout"), 504, "server_error", False),
])
def test_every_service_error_maps_to_one_http_status(error: Exception, status: int, kind: str,
                                                     retry: bool) -> None:
    mapped = http_error(error)  # type: ignore[arg-type]
    assert (mapped.status, mapped.type) == (status, kind)
    assert ("Retry-After" in (mapped.headers or {})) is retry
    assert mapped.body()["error"]["message"] == str(error)
