"""Tools through real engines on the embedded model, via the official SDK: required and
a named function give schema-valid calls on plain and speculative modes and under
auto; auto is accepted (a 135M model seldom calls by itself); history with tool
results renders; streamed calls accumulate in the SDK."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.real.conftest import RealGateway

MODES = ("standard", "eagle3", "auto")
WEATHER_PARAMS = {"type": "object",
                  "properties": {"city": {"type": "string", "maxLength": 24}},
                  "required": ["city"], "additionalProperties": False}
TIME_PARAMS = {"type": "object",
               "properties": {"zone": {"type": "string", "maxLength": 12}},
               "required": ["zone"], "additionalProperties": False}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS,
                                      "description": "The weather in a city now"}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMS,
                                      "description": "The time in a time zone"}}]
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(gw: RealGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                              timeout=600)


def assert_valid(name: str, arguments: str) -> None:
    assert name in PARAMS
    jsonschema.validate(json.loads(arguments), PARAMS[name])


async def create(gw: RealGateway, mode: str, **fields: Any) -> Any:
    c = client(gw)
    # parallel_tool_calls false: at most one call, so greedy decoding cannot run the
    # array on until max_tokens cuts it.
    raw = await c.chat.completions.with_raw_response.create(
        model=gw.model, messages=fields.pop("messages", ASK), tools=TOOLS, temperature=0,
        max_tokens=fields.pop("max_tokens", 120), parallel_tool_calls=False,
        extra_headers={"x-spec-mode": mode},
        **fields)
    await c.close()
    if mode != "auto":
        assert raw.headers["x-spec-mode"] == mode
    return raw.parse()


@pytest.mark.parametrize("mode", MODES)
async def test_required_gives_a_valid_call(real_gateway: RealGateway, mode: str) -> None:
    out = await create(real_gateway, mode, tool_choice="required")
    (choice,) = out.choices
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert_valid(call.function.name, call.function.arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_named_function_gives_its_arguments(real_gateway: RealGateway,
                                                  mode: str) -> None:
    out = await create(real_gateway, mode,
                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    (choice,) = out.choices
    assert choice.finish_reason == "stop"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time"
    assert_valid(call.function.name, call.function.arguments)


async def test_auto_is_accepted(real_gateway: RealGateway) -> None:
    out = await create(real_gateway, "auto", tool_choice="auto")
    (choice,) = out.choices
    # The model decides; a call it makes must be well formed.
    for call in choice.message.tool_calls or ():
        assert_valid(call.function.name, call.function.arguments)
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert choice.message.tool_calls or choice.message.content


async def test_history_with_tool_results(real_gateway: RealGateway) -> None:
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}]
    out = await create(real_gateway, "standard", messages=messages, tool_choice="none",
                       max_tokens=30)
    (choice,) = out.choices
    assert choice.message.content and not choice.message.tool_calls


@pytest.mark.parametrize("mode", ["standard", "eagle3"])
async def test_streamed_calls_accumulate(real_gateway: RealGateway, mode: str) -> None:
    c = client(real_gateway)
    stream = await c.chat.completions.create(
        model=real_gateway.model, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120,
        parallel_tool_calls=False, tool_choice="required", stream=True,
        extra_headers={"x-spec-mode": mode})
    calls: dict[int, dict[str, str]] = {}
    finish = None
    async for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or ():
                call = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += d.id or ""
                if d.function is not None:
                    call["name"] += d.function.name or ""
                    call["arguments"] += d.function.arguments or ""
    await c.close()
    assert finish == "tool_calls"
    (call,) = calls.values()
    assert call["id"].startswith("call_")
    assert_valid(call["name"], call["arguments"])
