"""Fixtures the gateway tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest_asyncio

from tests.conftest import FakeGateway


@pytest_asyncio.fixture(loop_scope="module")
async def client(gw: FakeGateway) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official SDK against the module's gateway (``gw``)."""
    c = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
    yield c
    await c.close()
