"""The Responses API end to end: the official openai client, real vLLM CPU engines."""

from __future__ import annotations

import json

import openai
import pytest

from tests.real.conftest import RealGateway

PROMPT = "Name three colours."


def client(gw: RealGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                              timeout=600)


@pytest.mark.parametrize("mode", ["ngram", "auto"])
async def test_plain_and_streamed_agree(real_gateway: RealGateway, mode: str) -> None:
    c = client(real_gateway)
    headers = {"x-spec-mode": mode}
    raw = await c.responses.with_raw_response.create(
        model=real_gateway.model, input=PROMPT, instructions="Answer in one line.",
        temperature=0, max_output_tokens=12, extra_headers=headers)
    response = raw.parse()
    assert raw.headers["x-request-id"] == response.id and response.id.startswith("resp_")
    if mode != "auto":
        assert raw.headers["x-spec-mode"] == mode
        assert raw.headers["x-spec-decision"] == "override"
    assert response.output_text
    assert response.status in ("completed", "incomplete")
    assert response.usage is not None and 0 < response.usage.output_tokens <= 12

    # Greedy: the stream says what the plain response said, on whichever mode serves it.
    async with c.responses.stream(
            model=real_gateway.model, input=PROMPT, instructions="Answer in one line.",
            temperature=0, max_output_tokens=12, extra_headers=headers) as stream:
        events = [event async for event in stream]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    assert last.response.status == response.status
    assert last.response.usage is not None
    assert last.response.usage.output_tokens == response.usage.output_tokens
    await c.close()


async def test_json_schema_output_parses(real_gateway: RealGateway) -> None:
    c = client(real_gateway)
    schema = {"type": "object", "properties": {"colour": {"type": "string"}},
              "required": ["colour"], "additionalProperties": False}
    response = await c.responses.create(
        model=real_gateway.model, input="Pick a colour.", temperature=0, max_output_tokens=100,
        text={"format": {"type": "json_schema", "name": "colour", "schema": schema,
                         "strict": True}},
        extra_headers={"x-spec-mode": "standard"})
    assert response.status == "completed"
    assert isinstance(json.loads(response.output_text)["colour"], str)
    await c.close()
