"""Structured output through real engines: every mode and auto return JSON that
matches the caller's schema, and vLLM's other constraint kinds hold too."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.real.conftest import RealGateway

MODES = ("standard", "ngram", "eagle3", "dflash", "auto")
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24},
                   "population": {"type": "integer"}},
    "required": ["city", "population"], "additionalProperties": False,
}


class City(BaseModel):
    city: str
    country: str


def client(gw: RealGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0,
                              timeout=600)


@pytest.mark.parametrize("mode", MODES)
async def test_json_schema_output_matches_the_schema_on_every_mode(
        real_gateway: RealGateway, mode: str) -> None:
    c = client(real_gateway)
    for stream in (False, True):
        ask = dict(
            model=real_gateway.model, temperature=0, max_tokens=80,
            extra_headers={"x-spec-mode": mode},
            messages=[{"role": "user", "content": "Give the largest city of France and its "
                                                  "population as JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "city", "schema": SCHEMA,
                                             "strict": True}})
        if stream:
            chunks = await c.chat.completions.create(stream=True, **ask)  # type: ignore[call-overload]
            text = "".join([ch.choices[0].delta.content or "" async for ch in chunks
                            if ch.choices])
        else:
            raw = await c.chat.completions.with_raw_response.create(**ask)  # type: ignore[call-overload]
            if mode != "auto":
                assert raw.headers["x-spec-mode"] == mode
            text = raw.parse().choices[0].message.content or ""
        jsonschema.validate(json.loads(text), SCHEMA)
    await c.close()


async def test_the_sdk_parse_helper_gets_its_model_back(real_gateway: RealGateway) -> None:
    c = client(real_gateway)
    completion = await c.chat.completions.parse(
        model=real_gateway.model, temperature=0, max_tokens=60, response_format=City,
        messages=[{"role": "user", "content": "Name a city and its country."}])
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City) and parsed.city
    await c.close()


@pytest.mark.parametrize("mode", ("standard", "eagle3"))
async def test_choice_regex_and_json_object_constraints_hold(real_gateway: RealGateway,
                                                             mode: str) -> None:
    c = client(real_gateway)
    base = dict(model=real_gateway.model, temperature=0, max_tokens=20,
                extra_headers={"x-spec-mode": mode},
                messages=[{"role": "user", "content": "Is the sky blue?"}])
    reply = await c.chat.completions.create(
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}}, **base)  # type: ignore[call-overload]
    assert reply.choices[0].message.content in ("yes", "no")
    reply = await c.chat.completions.create(
        extra_body={"structured_outputs": {"regex": "[0-9]{3}-[0-9]{4}"}}, **base)  # type: ignore[call-overload]
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", reply.choices[0].message.content or "")
    reply = await c.chat.completions.create(
        response_format={"type": "json_object"}, **{**base, "max_tokens": 60})  # type: ignore[call-overload]
    assert reply.choices[0].finish_reason == "length" or \
        isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    await c.close()


async def test_a_schema_the_grammar_compiler_refuses_is_a_400(
        real_gateway: RealGateway) -> None:
    c = client(real_gateway)
    with pytest.raises(openai.BadRequestError):
        await c.chat.completions.create(
            model=real_gateway.model, max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"structured_outputs": {"regex": "(unclosed"}})
    await c.close()
