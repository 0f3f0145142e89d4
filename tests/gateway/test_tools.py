"""Tools on /v1/chat/completions, over real HTTP with fake engines and vLLM's own
hermes parser: the wire, the constraint for required / named, calls read back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio

from engines.tool_calls import ToolCallParser
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.fakes.engine import FakeTokenizer

CHAT = "/v1/chat/completions"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}}}}
ASK: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
HERMES_REPLY = ('Let me check. <tool_call>\n{"name": "get_weather", "arguments": '
                '{"city": "Paris"}}\n</tool_call>')



@pytest.fixture(scope="module", autouse=True)
def vllm_parser() -> None:
    """vLLM's parsers, imported once for the module (seconds; this module's tier has a
    longer time limit for it, ``tests/tiers.py``)."""
    ToolCallParser("hermes", FakeTokenizer()).load()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def refusing() -> AsyncIterator[FakeGateway]:
    """One gateway for every bad request of the module: none reaches an engine."""
    async for g in serve(fake_engines()):
        yield g


def body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": ASK, "max_tokens": 64, "tools": [WEATHER, TIME],
            **fields}


async def post(gateway: FakeGateway, mode: str = "standard", **fields: Any) -> Any:
    r = await gateway.client.post(CHAT, json=body(**fields), headers={"x-spec-mode": mode})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("fields, param", [
    ({"tools": []}, "tools"),
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"function": WEATHER["function"]}]}, "tools.0.type"),
    ({"tools": [{"type": "retrieval", "function": WEATHER["function"]}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]},
     "tools.0.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f" * 65}}]},
     "tools.0.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools.0.function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "extra": 1}}]},
     "tools.0.function.extra"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, "tool_choice"),
    ({"tool_choice": {"type": "function"}}, "tool_choice.function"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}},
      "structured_outputs": {"regex": "a+"}}, "tool_choice"),
    ({"functions": [WEATHER["function"]]}, "functions"),
    ({"messages": [{"role": "tool", "content": "18C"}]}, "messages.0"),
    ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}, "messages.0"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]},
     "messages.0"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]},
     "messages.0.tool_calls.0.function.arguments"),
])
@pytest.mark.asyncio(loop_scope="module")
async def test_bad_tools_are_400_naming_the_field(refusing: FakeGateway,
                                                  fields: dict[str, Any], param: str) -> None:
    r = await refusing.client.post(CHAT, json={k: v for k, v in body(**fields).items()
                                              if v is not None})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


async def test_required_is_constrained_to_vllms_schema(gateway: FakeGateway) -> None:
    engine = gateway.engines["standard"]
    engine.reply = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    out = await post(gateway, tool_choice="required", response_format={"type": "json_object"})
    (served,) = engine.served
    structured = served.sampling.structured
    assert structured is not None and structured.kind == "json"
    schema = json.loads(structured.spec)
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    assert [s["properties"]["name"]["enum"] for s in schema["items"]["anyOf"]] == \
        [["get_weather"], ["get_time"]]
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


async def test_required_without_parallel_calls_allows_one(gateway: FakeGateway) -> None:
    gateway.engines["ngram"].reply = '[{"name": "get_time", "parameters": {}}]'
    await post(gateway, "ngram", tool_choice="required", parallel_tool_calls=False)
    structured = gateway.engines["ngram"].served[0].sampling.structured
    assert structured is not None and json.loads(structured.spec)["maxItems"] == 1


async def test_named_function_is_constrained_to_its_parameters(gateway: FakeGateway) -> None:
    engine = gateway.engines["eagle3"]
    engine.reply = '{"city": "Paris"}'
    out = await post(gateway, "eagle3",
                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
    structured = engine.served[0].sampling.structured
    assert structured is not None and json.loads(structured.spec) == \
        WEATHER["function"]["parameters"]  # type: ignore[index]
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "stop"  # OpenAI's (and vLLM's) for a named call
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


async def test_auto_reads_hermes_calls_from_free_text(gateway: FakeGateway) -> None:
    engine = gateway.engines["standard"]
    engine.reply = HERMES_REPLY
    out = await post(gateway)
    sampling = engine.served[0].sampling
    # Free text; hermes keeps special tokens (some models write <tool_call> as one).
    assert sampling.structured is None and sampling.skip_special_tokens is False
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check. "
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


async def test_auto_without_a_call_is_text(gateway: FakeGateway) -> None:
    out = await post(gateway, max_tokens=3)
    (choice,) = out["choices"]
    assert choice["message"]["content"] == " the quick brown"
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "length"


async def test_none_offers_tools_but_reads_no_calls(gateway: FakeGateway) -> None:
    engine = gateway.engines["standard"]
    engine.reply = HERMES_REPLY
    out = await post(gateway, tool_choice="none")
    prompt = FakeTokenizer().decode(engine.served[0].prompt_token_ids)
    assert '"name": "get_weather"' in prompt  # rendered, as vLLM does by default
    (choice,) = out["choices"]
    assert choice["message"]["content"] == HERMES_REPLY and choice["finish_reason"] == "stop"


async def test_history_with_calls_and_results_renders(gateway: FakeGateway) -> None:
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}]
    await post(gateway, messages=messages, max_tokens=2, tools=[WEATHER])
    prompt = FakeTokenizer().decode(gateway.engines["standard"].served[0].prompt_token_ids)
    assert ('<assistant><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
            '</tool_call>\n<tool:call_1>18C, sunny\n<assistant>') in prompt


@pytest.fixture
async def no_parser() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines(), tools=False):
        yield g


async def test_without_a_parser_tools_are_refused(no_parser: FakeGateway) -> None:
    r = await no_parser.client.post(CHAT, json=body())
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("tools", "unsupported_parameter")
    assert "tool_call_parser" in error["message"]


async def _stream(gateway: FakeGateway, mode: str, **fields: Any) -> tuple[Any, str | None]:
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused")
    calls: dict[int, dict[str, Any]] = {}
    content, finish = "", None
    stream: Any = await client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], stream=True,  # type: ignore[list-item]
        extra_headers={"x-spec-mode": mode}, **fields)
    async for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or ():
                call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                assert d.id is None or call["id"] is None, "one id per call"
                call["id"] = call["id"] or d.id
                if d.function is not None:
                    call["name"] += d.function.name or ""
                    call["arguments"] += d.function.arguments or ""
    await client.close()
    return (content, [calls[i] for i in sorted(calls)]), finish


@pytest.mark.parametrize("choice, reply, mode", [
    ("auto", HERMES_REPLY, "standard"),
    ("required", '[{"name": "get_weather", "parameters": {"city": "Paris"}}]', "dflash"),
])
async def test_streamed_calls_accumulate_in_the_sdk(gateway: FakeGateway, choice: str,
                                                    reply: str, mode: str) -> None:
    gateway.engines[mode].reply = reply
    (content, calls), finish = await _stream(gateway, mode, tool_choice=choice)
    assert finish == "tool_calls"
    assert content == ("Let me check. " if choice == "auto" else "")
    (call,) = calls
    assert call["id"].startswith("call_") and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}


async def test_streamed_named_call(gateway: FakeGateway) -> None:
    gateway.engines["standard"].reply = '{"zone": "UTC"}'
    (content, calls), finish = await _stream(
        gateway, "standard", tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert (content, finish) == ("", "stop")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == \
        [("get_time", {"zone": "UTC"})]
