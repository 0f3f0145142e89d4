"""The Responses API (``POST /v1/responses``) through the official ``openai`` SDK,
against the gateway over real HTTP with fake engines."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio

from engines.request import StructuredOutput
from tests.conftest import MODEL, FakeGateway, fake_engines, serve
from tests.gateway.test_metrics import scrape, value

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"], "additionalProperties": False}
STREAM_ORDER = ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done",
           "response.output_item.done"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g




def last_served(g: FakeGateway, mode: str = "standard") -> Any:
    return g.engines[mode].served[-1]


async def test_plain_response_cut_by_max_output_tokens(gw: FakeGateway,
                                                       client: openai.AsyncOpenAI) -> None:
    raw = await client.responses.with_raw_response.create(
        model=MODEL, input="Hello", instructions="Be brief.", max_output_tokens=4)
    response = raw.parse()
    assert response.id.startswith("resp_") and raw.headers["x-request-id"] == response.id
    assert raw.headers["x-spec-mode"] and raw.headers["x-spec-decision"]
    assert response.object == "response" and response.model == MODEL
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == " the quick brown fox"
    (message,) = response.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.status == "incomplete"
    usage = response.usage
    assert usage is not None and usage.output_tokens == 4
    assert usage.total_tokens == usage.input_tokens + 4
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert response.instructions == "Be brief." and response.max_output_tokens == 4


async def test_completed_when_the_reply_ends(client: openai.AsyncOpenAI) -> None:
    response = await client.responses.create(model=MODEL, input="Hello", max_output_tokens=9,
                                             extra_body={"stop": ["fox"]})
    assert response.status == "completed" and response.incomplete_details is None
    assert response.output_text == " the quick brown"
    assert response.output[0].status == "completed"


async def test_input_renders_exactly_as_chat_messages(gw: FakeGateway,
                                                      client: openai.AsyncOpenAI) -> None:
    headers = {"x-spec-mode": "standard"}
    await client.chat.completions.create(
        model=MODEL, max_tokens=2, extra_headers=headers, messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Rules."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Name a fox."}])
    chat_prompt = last_served(gw).prompt_token_ids
    await client.responses.create(
        model=MODEL, max_output_tokens=2, extra_headers=headers, instructions="Be brief.",
        input=[{"role": "developer", "content": "Rules."},
               {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Hi"}]},
               # An earlier reply sent back as the SDK returned it (the Agents SDK does).
               {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                "content": [{"type": "output_text", "text": "Hello!", "annotations": [],
                             "logprobs": []}]},
               {"role": "user", "content": [{"type": "input_text", "text": "Name a "},
                                            {"type": "input_text", "text": "fox."}]}])
    assert last_served(gw).prompt_token_ids == chat_prompt
    await client.responses.create(model=MODEL, input="Hi", max_output_tokens=2,
                                  extra_headers=headers)
    assert "".join(map(chr, last_served(gw).prompt_token_ids)) == "<user>Hi\n<assistant>"


async def test_a_reply_sent_back_as_input(client: openai.AsyncOpenAI) -> None:
    first = await client.responses.create(model=MODEL, input="Hi", max_output_tokens=3)
    history: list[Any] = [{"role": "user", "content": "Hi"}]
    history += [item.model_dump(exclude_unset=True) for item in first.output]
    history.append({"role": "user", "content": "More."})
    second = await client.responses.create(model=MODEL, input=history, max_output_tokens=3)
    assert second.output_text == " the quick brown"


async def test_stream_helper_events_in_order(client: openai.AsyncOpenAI) -> None:
    async with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=9,
                                       extra_body={"stop": ["fox"]}) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == STREAM_ORDER
    assert types[-4:] == [*CLOSING, "response.completed"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == " the quick brown"
    assert final.status == "completed" and final.usage is not None
    assert final.usage.output_tokens == 3  # the stop string's token is not counted


async def test_stream_cut_by_length_ends_incomplete(gw: FakeGateway,
                                                    client: openai.AsyncOpenAI) -> None:
    stream = await client.responses.create(model=MODEL, input="Hi", max_output_tokens=3,
                                           stream=True)
    events = [event async for event in stream]
    assert [e.type for e in events][-4:] == [*CLOSING, "response.incomplete"]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete"
    assert last.response.output_text == " the quick brown"
    assert last.response.usage is not None and last.response.usage.output_tokens == 3


async def test_stream_framing_and_headers(gw: FakeGateway) -> None:
    r = await gw.client.post("/v1/responses", headers={"x-spec-mode": "ngram"}, json={
        "model": MODEL, "input": "Hi", "max_output_tokens": 2, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-spec-mode"] == "ngram" and r.headers["x-request-id"].startswith("resp_")
    blocks = [b for b in r.text.split("\n\n") if b]
    for block in blocks:
        event, data = block.split("\n")
        assert event.removeprefix("event: ") == json.loads(data.removeprefix("data: "))["type"]
    last = json.loads(blocks[-1].split("\n")[1].removeprefix("data: "))
    assert last["spec_mode"] == "ngram" and last["response"]["id"] == r.headers["x-request-id"]
    assert "[DONE]" not in r.text


@pytest.mark.parametrize("mode", ["eagle3", "standard"])
async def test_spec_mode_header_forces_the_mode(gw: FakeGateway, client: openai.AsyncOpenAI,
                                                mode: str) -> None:
    before = len(gw.engines[mode].served)
    raw = await client.responses.with_raw_response.create(
        model=MODEL, input="Hi", max_output_tokens=3, extra_headers={"x-spec-mode": mode})
    assert raw.headers["x-spec-mode"] == mode
    assert raw.headers["x-spec-decision"] == "override"
    assert raw.parse().output_text == " the quick brown"
    stream = await client.responses.create(model=MODEL, input="Hi", max_output_tokens=3,
                                           stream=True, extra_headers={"x-spec-mode": mode})
    assert [e.type async for e in stream][-1] == "response.incomplete"
    assert len(gw.engines[mode].served) == before + 2


@pytest.mark.parametrize(("text", "expected"), [
    ({"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}},
     StructuredOutput("json", json.dumps(SCHEMA))),
    ({"format": {"type": "json_object"}}, StructuredOutput("json_object")),
    ({"format": {"type": "text"}, "verbosity": "low"}, None),
])
async def test_text_format_is_the_engine_constraint(gw: FakeGateway, client: openai.AsyncOpenAI,
                                                    text: Any, expected: Any) -> None:
    response = await client.responses.create(model=MODEL, input="A city?", max_output_tokens=3,
                                             text=text, extra_headers={"x-spec-mode": "standard"})
    assert last_served(gw).sampling.structured == expected
    assert response.text is not None and response.text.format is not None
    assert response.text.format.to_dict() == text["format"]  # echoed as sent


async def test_sampling_fields_reach_the_engine(gw: FakeGateway,
                                                client: openai.AsyncOpenAI) -> None:
    await client.responses.create(
        model=MODEL, input="Hi", max_output_tokens=5, temperature=0.3, top_p=0.9,
        metadata={"team": "a"}, user="u1", store=False, tools=[], include=[],
        truncation="disabled", parallel_tool_calls=False, reasoning={"effort": "low"},
        extra_headers={"x-spec-mode": "standard"}, extra_body={"top_k": 5, "seed": 7})
    s = last_served(gw).sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.seed) == (5, 0.3, 0.9, 5, 7)


async def test_tools_with_tool_choice_none_are_accepted(client: openai.AsyncOpenAI) -> None:
    tool: Any = {"type": "function", "name": "weather", "parameters": {"type": "object"},
                 "strict": False}
    response = await client.responses.create(model=MODEL, input="Hi", max_output_tokens=2,
                                             tools=[tool], tool_choice="none")
    assert response.tool_choice == "none" and response.tools[0].name == "weather"


async def test_engine_failure_mid_stream_is_an_error_event(gw: FakeGateway,
                                                           client: openai.AsyncOpenAI) -> None:
    gw.engines["dflash"].fail_after_tokens = 2
    before = await scrape(gw)
    try:
        r = await gw.client.post("/v1/responses", headers={"x-spec-mode": "dflash"}, json={
            "model": MODEL, "input": "Hi", "max_output_tokens": 5, "stream": True})
        event, data = [b for b in r.text.split("\n\n") if b][-1].split("\n")
        error = json.loads(data.removeprefix("data: "))
        assert event == "event: error" and error["type"] == "error"
        assert error["code"] == error["error"]["code"] == "engine_failed"
        with pytest.raises(openai.APIError):
            stream = await client.responses.create(
                model=MODEL, input="Hi", max_output_tokens=5, stream=True,
                extra_headers={"x-spec-mode": "dflash"})
            async for _ in stream:
                pass
    finally:
        gw.engines["dflash"].fail_after_tokens = None
    after = await scrape(gw)
    labels = {"endpoint": "/v1/responses", "mode": "dflash", "status": "200", "forced": "1"}
    assert value(after, "specgate_requests_total", **labels) - \
        value(before, "specgate_requests_total", **labels) == 2
    assert value(after, "specgate_errors_total", type="server_error", code="engine_failed") - \
        value(before, "specgate_errors_total", type="server_error", code="engine_failed") == 2
