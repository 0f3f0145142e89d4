"""Hostile and unsupported Responses requests: 4xx envelopes with ``param``, sent before
any stream starts, and nothing reaches an engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio

from tests.conftest import MODEL, FakeGateway, fake_engines, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g




FUNCTION_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"input": 5}, "input", None),
    ({"input": []}, "input", None),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role", None),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input.0",
     None),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.content.0.type", None),
    ({"temperature": "0.5"}, "temperature", None),
    ({"max_output_tokens": 0}, "max_output_tokens", None),
    ({"max_output_tokens": True}, "max_output_tokens", None),
    ({"stream": "yes"}, "stream", None),
    ({"metadata": {"a": 1}}, "metadata.a", None),
    ({"frobnicate": 1}, "frobnicate", None),
    ({"max_tokens": 5}, "max_tokens", None),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", None),
    ({"text": {"format": {"type": "text", "schema": {}}}}, "text.format", None),
    ({"store": True}, "store", "unsupported_parameter"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "unsupported_parameter"),
    ({"background": True}, "background", "unsupported_parameter"),
    ({"conversation": "conv_1"}, "conversation", "unsupported_parameter"),
    ({"truncation": "auto"}, "truncation", "unsupported_parameter"),
    ({"tools": [FUNCTION_TOOL, FUNCTION_TOOL]}, "tools", None),
    ({"tools": [{"type": "function", "name": "get weather"}]}, "tools.0.name", None),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools.0.name", None),
    ({"tools": [FUNCTION_TOOL], "tool_choice": {"type": "function", "name": "g"}},
     "tool_choice", None),
    ({"tools": [FUNCTION_TOOL], "tool_choice": {"type": "function", "name": "f"},
      "structured_outputs": {"regex": "a+"}}, "tool_choice", None),
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input.0.arguments",
     None),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input.0", None),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type", None),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary", "unsupported_parameter"),
    ({"include": ["message.output_text.logprobs"]}, "include", "unsupported_parameter"),
    ({"max_output_tokens": 10**6}, "max_output_tokens", "context_length_exceeded"),
])
@pytest.mark.parametrize("stream", [False, True])
async def test_bad_requests_are_400_before_any_stream(gw: FakeGateway, fields: dict[str, Any],
                                                      param: str, code: str | None,
                                                      stream: bool) -> None:
    served = sum(len(e.served) for e in gw.engines.values())
    r = await gw.client.post("/v1/responses",
                             json={"model": MODEL, "input": "Hi", "stream": stream, **fields})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code)
    assert sum(len(e.served) for e in gw.engines.values()) == served


async def test_stateless_refusals_say_why(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="stateless"):
        await client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="no response store"):
        await client.responses.create(model=MODEL, input="Hi", store=True)


async def test_unknown_model_is_404(gw: FakeGateway) -> None:
    r = await gw.client.post("/v1/responses", json={"model": "gpt-5", "input": "Hi"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"

