"""Shared fixtures: the gateway with fake engines, served over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from engines.tool_calls import ToolCallParser
from gateway.app import create_app
from policies.base import Policy
from policies.store.base import PolicyStore
from service.mode_info import ModeInfo
from service.runtime import Components
from service.settings import Settings
from tests.fakes.engine import FakeEngine, FakeTokenizer
from tests.hang_guard import pytest_timeout_cancel_timer, pytest_timeout_set_timer
from tests.redis_server import RedisServer
from tests.tiers import pytest_collection_modifyitems

# Hooks defined elsewhere, found here by name: per-tier timeouts, and the dump of
# asyncio tasks and threads before one fires.
__all__ = ["pytest_collection_modifyitems", "pytest_timeout_cancel_timer",
           "pytest_timeout_set_timer"]

MODEL = "fake-model"
FAKE_MODE_INFO = {"standard": ModeInfo(), "ngram": ModeInfo("ngram", 4),
                  "eagle3": ModeInfo("eagle3", 3), "dflash": ModeInfo("dflash", 4)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class FakeGateway:
    url: str
    engines: dict[str, FakeEngine]
    client: httpx.AsyncClient


def fake_engines(token_delay_s: float = 0.0) -> dict[str, FakeEngine]:
    return {
        "standard": FakeEngine("standard", token_delay_s=token_delay_s),
        "ngram": FakeEngine("ngram", speculative=True, acceptance=0.6,
                            token_delay_s=token_delay_s),
        "eagle3": FakeEngine("eagle3", speculative=True, acceptance=0.3,
                             token_delay_s=token_delay_s),
        "dflash": FakeEngine("dflash", speculative=True, acceptance=0.8,
                             token_delay_s=token_delay_s),
    }


async def serve(engines: dict[str, FakeEngine], max_model_len: int = 512,
                settings: Settings | None = None, store: PolicyStore | None = None,
                policy: Policy | None = None, tools: bool = True) -> AsyncIterator[FakeGateway]:
    tokenizer = FakeTokenizer()
    # vLLM's own hermes parser, loaded (vLLM imported) by the first request with tools.
    components = Components(model_name=MODEL, tokenizer=tokenizer, engines=engines,
                            max_model_len=max_model_len, mode_info=FAKE_MODE_INFO,
                            tool_parser=ToolCallParser("hermes", tokenizer) if tools else None)
    app = create_app(settings or Settings(policy={"name": "rule"}),  # type: ignore[arg-type]
                     components=components, store=store, policy=policy)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        for _ in range(200):
            if (await client.get("/ready")).status_code == 200:
                break
            await asyncio.sleep(0.01)
        yield FakeGateway(url, engines, client)
    server.should_exit = True
    await task


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g


@pytest.fixture
async def slow_gateway() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines(token_delay_s=0.05)):
        yield g


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
