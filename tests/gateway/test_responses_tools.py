"""Function tools on /v1/responses through the official ``openai`` SDK: flat tools and
tool_choice served by chat's machinery (constraint, vLLM's hermes parser), calls as
``function_call`` items, earlier calls and their outputs rendered as chat's."""

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
from tests.gateway.test_tools import HERMES_REPLY, WEATHER

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOOL: Any = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]
TIME: Any = {"type": "function", "name": "get_time",
             "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}
REQUIRED_REPLY = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'



@pytest.fixture(scope="module", autouse=True)
def vllm_parser() -> None:
    """vLLM's parsers, imported once for the module (``tests/tiers.py``: a longer limit)."""
    ToolCallParser("hermes", FakeTokenizer()).load()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines(), max_model_len=4096):  # one token per character
        yield g




def reply(gw: FakeGateway, mode: str, text: str | None) -> dict[str, str]:
    gw.engines[mode].reply = text
    return {"x-spec-mode": mode}


async def test_required_returns_a_function_call_item(gw: FakeGateway,
                                                     client: openai.AsyncOpenAI) -> None:
    headers = reply(gw, "standard", REQUIRED_REPLY)
    response = await client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=[TOOL, TIME], tool_choice="required",
        extra_headers=headers)
    structured = gw.engines["standard"].served[-1].sampling.structured
    assert structured is not None and json.loads(structured.spec)["type"] == "array"
    assert response.status == "completed" and response.tool_choice == "required"
    assert [t.name for t in response.tools] == ["get_weather", "get_time"]  # type: ignore[union-attr]
    (call,) = response.output
    assert call.type == "function_call" and call.status == "completed"
    assert call.id is not None and call.id.startswith("fc_")
    assert call.call_id.startswith("call_") and call.id[3:] == call.call_id[5:]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert response.output_text == ""


async def test_named_function_is_constrained_and_echoed(gw: FakeGateway,
                                                        client: openai.AsyncOpenAI) -> None:
    headers = reply(gw, "eagle3", '{"zone": "UTC"}')
    response = await client.responses.create(
        model=MODEL, input="Time?", tools=[TOOL, TIME], extra_headers=headers,
        tool_choice={"type": "function", "name": "get_time"})
    structured = gw.engines["eagle3"].served[-1].sampling.structured
    assert structured is not None and json.loads(structured.spec) == TIME["parameters"]
    assert response.tool_choice.type == "function"  # type: ignore[union-attr]
    assert [(c.name, c.arguments) for c in response.output] == \
        [("get_time", '{"zone": "UTC"}')]  # type: ignore[union-attr]


async def test_auto_text_then_call_in_openais_order(gw: FakeGateway,
                                                    client: openai.AsyncOpenAI) -> None:
    headers = reply(gw, "standard", HERMES_REPLY)
    response = await client.responses.create(model=MODEL, input="Weather in Paris?",
                                             tools=[TOOL], extra_headers=headers)
    message, call = response.output
    assert message.type == "message" and response.output_text == "Let me check. "
    assert call.type == "function_call" and call.name == "get_weather"
    prompt = FakeTokenizer().decode(gw.engines["standard"].served[-1].prompt_token_ids)
    assert '<tools>{"type": "function", "function": {"name": "get_weather"' in prompt


async def test_auto_without_a_call_is_a_message(gw: FakeGateway,
                                                client: openai.AsyncOpenAI) -> None:
    headers = reply(gw, "standard", None)
    response = await client.responses.create(model=MODEL, input="Hi", tools=[TOOL],
                                             max_output_tokens=3, extra_headers=headers)
    (message,) = response.output
    assert message.type == "message" and message.status == "incomplete"
    assert response.output_text == " the quick brown"


async def test_calls_and_outputs_render_as_chat_tool_turns(gw: FakeGateway,
                                                           client: openai.AsyncOpenAI) -> None:
    headers = reply(gw, "standard", None)
    history: Any = [
        {"role": "user", "content": "Weather and time in Paris?"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "noon"}]}]
    await client.responses.create(model=MODEL, input=history, tools=[TOOL, TIME],
                                  max_output_tokens=2, extra_headers=headers)
    prompt = FakeTokenizer().decode(gw.engines["standard"].served[-1].prompt_token_ids)
    assert ('<assistant>Checking.<tool_call>{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}</tool_call><tool_call>{"name": "get_time", "arguments": {}}'
            '</tool_call>\n<tool:call_1>18C\n<tool:call_2>noon\n<assistant>') in prompt


async def test_an_output_answering_no_call_is_400(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="call_9") as e:
        await client.responses.create(model=MODEL, tools=[TOOL], input=[
            {"role": "user", "content": "Hi"},
            {"type": "function_call_output", "call_id": "call_9", "output": "x"}])
    assert e.value.param == "input.1"  # type: ignore[attr-defined]


async def _events(client: openai.AsyncOpenAI, **fields: Any) -> list[Any]:
    stream = await client.responses.create(model=MODEL, input="Weather in Paris?",
                                           stream=True, **fields)
    return [event async for event in stream]


@pytest.mark.parametrize("choice, text, mode", [
    ("auto", HERMES_REPLY, "standard"), ("required", REQUIRED_REPLY, "dflash"),
    ({"type": "function", "name": "get_weather"}, '{"city": "Paris"}', "ngram")])
async def test_streamed_calls_in_openais_order(gw: FakeGateway, client: openai.AsyncOpenAI,
                                               choice: Any, text: str, mode: str) -> None:
    events = await _events(client, tools=[TOOL, TIME], tool_choice=choice,
                           extra_headers=reply(gw, mode, text))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events if not e.type.endswith(".delta")]
    call_events = ["response.output_item.added", "response.function_call_arguments.done",
                   "response.output_item.done", "response.completed"]
    message_events = ["response.output_item.added", "response.content_part.added",
                      "response.output_text.done", "response.content_part.done",
                      "response.output_item.done"] if choice == "auto" else []
    assert kinds == ["response.created", "response.in_progress", *message_events,
                     *call_events]
    added = next(e for e in events if e.type == "response.output_item.added"
                 and e.item.type == "function_call")
    assert added.item.arguments == "" and added.item.status == "in_progress"
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    assert {e.item_id for e in events if e.type.startswith("response.function_call")} == \
        {added.item.id}
    done = events[-2].item
    assert (done.id, done.call_id, done.name) == \
        (added.item.id, added.item.call_id, "get_weather")
    assert json.loads(deltas) == json.loads(done.arguments) == {"city": "Paris"}
    final = events[-1].response
    assert final.output[-1] == done and final.output[-1].status == "completed"
    if choice == "auto":
        assert final.output_text == "Let me check. " and final.output[0].status == "completed"


async def test_streamed_text_without_a_call(gw: FakeGateway,
                                            client: openai.AsyncOpenAI) -> None:
    events = await _events(client, tools=[TOOL], max_output_tokens=2,
                           extra_headers=reply(gw, "standard", None))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == " the quick"
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0]


async def test_auto_without_tools_and_untyped_items_are_plain(gw: FakeGateway) -> None:
    headers = reply(gw, "standard", None)
    r = await gw.client.post("/v1/responses", headers=headers, json={
        "model": MODEL, "tools": [], "tool_choice": "auto", "max_output_tokens": 2,
        "input": [{"type": None, "role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
