"""Parity with the vLLM OpenAI server the gateway fronts, field by field.

The field list comes from the installed vLLM's own request models, so a field
a new vLLM adds fails here until ``gateway/fields.py`` says what SpecGate does
with it; every field the table accepts is tried over HTTP, and every field it
refuses must be a 400 that says why (and must pass when it asks for nothing).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pydantic import BaseModel

from gateway.chat.protocol import ChatCompletionRequest
from gateway.completions.protocol import CompletionRequest
from gateway.fields import FIELDS, STREAM_OPTIONS, UNSUPPORTED, Endpoint, Handling, markdown_table
from gateway.protocol import StreamOptions
from tests.conftest import MODEL, FakeGateway, fake_engines, serve

ROOT = Path(__file__).resolve().parents[2]
PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
BASE: dict[Endpoint, dict[str, Any]] = {
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    "completions": {"model": MODEL, "prompt": "hi", "max_tokens": 3}}
OURS: dict[Endpoint, type[BaseModel]] = {"chat": ChatCompletionRequest,
                                         "completions": CompletionRequest}


def _vllm_models() -> dict[str, type[BaseModel]]:
    try:
        with warnings.catch_warnings():  # vLLM's own import-time warnings are not ours
            warnings.simplefilter("ignore")
            from vllm.entrypoints.generate.base.protocol import StreamOptions as VllmStream
            from vllm.entrypoints.openai.chat_completion.protocol import (
                ChatCompletionRequest as VllmChat,
            )
            from vllm.entrypoints.openai.completion.protocol import (
                CompletionRequest as VllmCompletion,
            )
    except ImportError as e:
        pytest.skip(f"vLLM is not installed here ({e}); the field list comes from it")
    return {"chat": VllmChat, "completions": VllmCompletion, "stream_options": VllmStream}


@pytest.fixture(scope="module")
def vllm() -> dict[str, type[BaseModel]]:
    return _vllm_models()


# One gateway takes every field of the module: a refused or accepted field must leave
# it serving the next.
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway() -> AsyncIterator[FakeGateway]:
    async for g in serve(fake_engines()):
        yield g


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_every_vllm_field_is_handled_or_refused(vllm: dict[str, type[BaseModel]],
                                                 endpoint: Endpoint) -> None:
    theirs = set(vllm[endpoint].model_fields)
    missing = sorted(f for f in theirs
                     if f not in FIELDS or endpoint not in FIELDS[f].endpoints)
    assert not missing, (f"vLLM's {endpoint} request has fields gateway/fields.py does not "
                         f"handle or refuse: {missing}")
    stale = sorted(f for f, rule in FIELDS.items()
                   if rule.vllm and endpoint in rule.endpoints and f not in theirs)
    assert not stale, f"gateway/fields.py lists {stale} as vLLM {endpoint} fields; vLLM has none"


def test_every_vllm_stream_option_is_handled(vllm: dict[str, type[BaseModel]]) -> None:
    theirs = set(vllm["stream_options"].model_fields)
    assert theirs <= set(STREAM_OPTIONS), sorted(theirs - set(STREAM_OPTIONS))
    assert set(StreamOptions.model_fields) == set(STREAM_OPTIONS)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_the_wire_models_follow_the_table(endpoint: Endpoint) -> None:
    ours = set(OURS[endpoint].model_fields)
    table = {f for f, rule in FIELDS.items() if endpoint in rule.endpoints}
    accepted = {f for f in table if FIELDS[f].handling is not Handling.REFUSED}
    assert accepted - ours == set(), "the table accepts fields the wire model lacks"
    assert ours - accepted == set(), "the wire model accepts fields the table does not list"


# A valid, non-default value for every accepted field (prompt fields come from BASE).
SAMPLES: dict[str, Any] = {
    "add_generation_prompt": True, "continue_final_message": False,
    "documents": [{"title": "t", "text": "x"}], "chat_template_kwargs": {"enable_thinking": False},
    "reasoning_effort": "low", "add_special_tokens": True, "truncate_prompt_tokens": 100,
    "truncation_side": "right", "mm_payload": "none", "return_mm_kwargs": False,
    "cache_salt": "salt-1", "max_completion_tokens": 3, "temperature": 0.5, "top_p": 0.9,
    "top_k": 5, "min_p": 0.05, "seed": 7, "n": 2, "stop": ["zzz"], "stop_token_ids": [7],
    "include_stop_str_in_output": True, "ignore_eos": True, "min_tokens": 2,
    "presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1,
    "logit_bias": {"50": -100, "51": 5.5}, "allowed_token_ids": [1, 2, 3],
    "bad_words": ["hello world"], "skip_special_tokens": False,
    "spaces_between_special_tokens": False, "top_logprobs": 2, "length_penalty": 0.5,
    "watermarking": False, "response_format": {"type": "text"}, "parallel_tool_calls": False,
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
    "structured_outputs": {"choice": ["yes", "no"]},
    "include_reasoning": False, "stream": False, "return_token_offsets": True,
    "routed_experts_prompt_start": 3, "session_id": "s-1", "user": "u-1",
    "metadata": {"workload_class": "chat"}, "store": False, "service_tier": "flex",
    "prompt_cache_key": "k", "safety_identifier": "sid", "verbosity": "low",
    "modalities": ["text"], "best_of": 1, "max_tokens": 3,
}
LOGPROBS: dict[Endpoint, Any] = {"chat": True, "completions": 2}
PROMPT_FIELDS = {"model", "messages", "prompt", "stream_options", "logprobs"}


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.asyncio(loop_scope="module")
async def test_every_accepted_field_is_accepted(gateway: FakeGateway, endpoint: Endpoint) -> None:
    accepted = [f for f, rule in FIELDS.items() if endpoint in rule.endpoints
                and rule.handling is not Handling.REFUSED and f not in PROMPT_FIELDS]
    assert not [f for f in accepted if f not in SAMPLES], "add a sample value for new fields"
    for name in accepted:
        body = {**BASE[endpoint], name: SAMPLES[name]}
        if name == "top_logprobs":
            body["logprobs"] = True
        if name == "best_of":
            body["n"] = 1
        r = await gateway.client.post(PATHS[endpoint], json=body)
        assert r.status_code == 200, (name, r.text)
    body = {**BASE[endpoint], "logprobs": LOGPROBS[endpoint], "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True,
                               "include_obfuscation": False}}
    assert (await gateway.client.post(PATHS[endpoint], json=body)).status_code == 200


def _refused(endpoint: Endpoint) -> list[str]:
    return sorted(f for f, rule in FIELDS.items()
                  if rule.handling is Handling.REFUSED and endpoint in rule.endpoints)


@pytest.mark.parametrize("endpoint, name",
                         [(e, f) for e in ("chat", "completions") for f in _refused(e)])
@pytest.mark.asyncio(loop_scope="module")
async def test_refused_fields_say_why(gateway: FakeGateway, endpoint: Endpoint,
                                      name: str) -> None:
    rule = FIELDS[name]
    for asks_nothing in (None, *rule.neutral):
        r = await gateway.client.post(PATHS[endpoint], json={**BASE[endpoint],
                                                             name: asks_nothing})
        assert r.status_code == 200, (asks_nothing, r.text)
    for value in ("on", 2, {"a": 1}, [1], True):
        if any(type(value) is type(n) and value == n for n in rule.neutral):
            continue
        r = await gateway.client.post(PATHS[endpoint], json={**BASE[endpoint], name: value})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["param"], error["code"]) == (name, UNSUPPORTED), error
        assert rule.meaning in error["message"], error
    assert not any(e.running for e in gateway.engines.values())


def test_the_docs_table_is_the_code_table() -> None:
    doc = (ROOT / "docs" / "api-fields.md").read_text()
    assert markdown_table() in doc, ("docs/api-fields.md is out of date: regenerate its "
                                     "table with `python -m gateway.fields`")
