"""The client-library scripts of the real tier (tests/real/clients/) against the gateway
on fake engines that obey JSON-schema constraints: the libraries' own requests and
parsing, end to end, in seconds. Skipped where ``.venv-clients`` is not installed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from engines.tool_calls import ToolCallParser
from tests import client_scripts
from tests.conftest import FAKE_MODE_INFO, MODEL, FakeGateway, serve
from tests.fakes.engine import FakeEngine, FakeTokenizer
from tests.fakes.schema_engine import SchemaEngine, instance


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[FakeGateway]:
    ToolCallParser("hermes", FakeTokenizer()).load()   # vLLM, imported once (seconds)
    engines: dict[str, FakeEngine] = {mode: SchemaEngine(mode, speculative=mode != "standard")
                                      for mode in FAKE_MODE_INFO}
    async for g in serve(engines, max_model_len=16384):
        yield g


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("script", client_scripts.SCRIPTS)
async def test_client_script_against_fake_engines(gw: FakeGateway, script: str) -> None:
    process = await asyncio.create_subprocess_exec(
        *client_scripts.command(script), env=client_scripts.env(gw.url + "/v1", MODEL),
        cwd=client_scripts.CLIENTS, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), timeout=240)
    output = out.decode()
    assert process.returncode == 0, output[-4000:]
    assert output.rstrip().endswith(": ok"), output[-2000:]


def test_schema_instances_follow_the_schema() -> None:
    schema = {"type": "object", "required": ["a", "b"], "$defs": {"E": {"enum": ["x", "y"]}},
              "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/E"}},
                             "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                             "c": {"type": "string"}}}
    assert instance(schema) == {"a": ["x"], "b": 1}
