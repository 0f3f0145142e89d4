"""Bodies over max_body_bytes get 413 while being read, declared or chunked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from gateway import body_limit
from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.gateway.test_metrics import scrape, value

LIMIT = 4096


@pytest.fixture
async def small() -> AsyncIterator[FakeGateway]:
    s = Settings(policy={"name": "rule"}, max_body_bytes=LIMIT)  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=s):
        yield g


def body_of_size(size: int, prompt: str = "x") -> bytes:
    """A valid request of exactly ``size`` bytes (JSON whitespace makes up the rest)."""
    head = json.dumps({"model": MODEL, "max_tokens": 1, "prompt": prompt}).encode()[:-1]
    return head + b" " * (size - len(head) - 1) + b"}"


def assert_413(r_status: int, r_json: dict) -> None:  # type: ignore[type-arg]
    assert r_status == 413
    assert r_json == {"error": {"message": r_json["error"]["message"],
                                "type": "invalid_request_error", "param": None,
                                "code": "request_too_large"}}
    assert str(LIMIT) in r_json["error"]["message"]


async def test_body_at_the_limit_is_served(small: FakeGateway) -> None:
    r = await small.client.post("/v1/completions", content=body_of_size(LIMIT),
                                headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


async def test_declared_body_over_the_limit(small: FakeGateway) -> None:
    r = await small.client.post("/v1/completions", content=body_of_size(LIMIT + 1),
                                headers={"content-type": "application/json"})
    assert_413(r.status_code, r.json())
    assert not small.engines["standard"].served


async def test_chunked_body_over_the_limit(small: FakeGateway) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        body = body_of_size(3 * LIMIT)
        for i in range(0, len(body), 1000):
            yield body[i:i + 1000]

    r = await small.client.post("/v1/completions", content=chunks(),
                                headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_413(r.status_code, r.json())
    samples = await scrape(small)
    assert value(samples, "specgate_errors_total", type="invalid_request_error",
                 code="request_too_large") == 1
    assert value(samples, "specgate_requests_total", endpoint="/v1/completions", mode="none",
                 status="413", forced="0") == 1


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict]:  # type: ignore[type-arg]
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return status, json.loads(await asyncio.wait_for(reader.readexactly(length), timeout=10))


async def test_413_comes_before_the_body_ends(small: FakeGateway) -> None:
    """Neither a huge declared length nor an endless chunked body is waited for."""
    host, port = small.url.removeprefix("http://").split(":")
    # A declared 1 TB body, of which nothing is sent.
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: 1000000000000\r\n\r\n")
    await writer.drain()
    assert_413(*await read_response(reader))
    writer.close()
    await writer.wait_closed()
    # A chunked body just over the limit, whose end never comes.
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(LIMIT // 1024 + 1):
        writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
    await writer.drain()
    assert_413(*await read_response(reader))
    writer.close()
    await writer.wait_closed()


async def test_limit_applies_to_the_admin_api_too() -> None:
    s = Settings(max_body_bytes=LIMIT, admin_key="admin-key-123")  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=s):
        r = await g.client.put("/admin/policy", content=b"{" + b" " * LIMIT + b"}",
                               headers={"Authorization": "Bearer admin-key-123"})
        assert_413(r.status_code, r.json())


async def test_default_limit_serves_large_prompts(gateway: FakeGateway) -> None:
    # The default (4 MiB) leaves room for any prompt a context window holds.
    r = await gateway.client.post("/v1/completions",
                                  content=body_of_size(1024 * 1024, "x" * 1000_000),
                                  headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


async def test_expect_100_continue_is_refused_without_waiting_for_the_body(
        small: FakeGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    # Such a client sends no body after a final answer: waiting for it would
    # hold the connection for the whole linger time.
    monkeypatch.setattr(body_limit, "LINGER_S", 30.0)
    host, port = small.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    assert head.startswith(b"HTTP/1.1 413 "), head  # no "100 Continue" first
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)
    assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # nothing after it
    writer.close()
    await writer.wait_closed()
