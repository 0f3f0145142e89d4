"""The server ``specgate serve`` runs keeps idle connections longer than clients do, so a
pooled connection is never closed under a client that is about to reuse it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from gateway.app import create_app
from gateway.shutdown import http_server
from service.runtime import Components
from service.settings import Settings
from tests.conftest import FAKE_MODE_INFO, MODEL, free_port
from tests.fakes.engine import FakeEngine, FakeTokenizer

HEALTH = b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"


@asynccontextmanager
async def serving(**overrides: object) -> AsyncIterator[int]:
    components = Components(model_name=MODEL, tokenizer=FakeTokenizer(),
                            engines={"standard": FakeEngine("standard")}, max_model_len=4096,
                            mode_info=FAKE_MODE_INFO)
    settings = Settings(host="127.0.0.1", port=free_port(), log_level="warning",
                        policy={"name": "rule"}, **overrides)  # type: ignore[arg-type]
    server = http_server(create_app(settings, components=components), settings)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield settings.port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=30)


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(HEALTH)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)
    return head


async def test_an_idle_connection_outlives_client_pool_expiry() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b" 200 " in await _get(reader, writer)
        await asyncio.sleep(6.0)  # past httpx's (and the openai SDK's) 5 s pool expiry
        assert b" 200 " in await _get(reader, writer)  # the same connection still serves
        writer.close()


async def test_idle_connections_close_after_the_configured_timeout() -> None:
    async with serving(idle_connection_timeout_s=1) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert b" 200 " in await _get(reader, writer)
        assert await asyncio.wait_for(reader.read(), timeout=4) == b""  # closed by the server
        writer.close()


def test_the_idle_timeout_is_bounded() -> None:
    with pytest.raises(ValueError, match="idle_connection_timeout_s"):
        Settings(idle_connection_timeout_s=0)
