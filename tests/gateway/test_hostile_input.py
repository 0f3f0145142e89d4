"""Hostile input over real HTTP: every bad request is a 4xx with the OpenAI envelope.

Each case also checks that the request never reached an engine, that no engine
request is left running, and that a normal request still succeeds afterwards.
One gateway serves the whole module, so a case that disturbed it would show up
in the cases after it too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from service.settings import Settings
from tests.conftest import MODEL, FakeGateway, fake_engines, serve

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
OK_MESSAGES = [{"role": "user", "content": "hi"}]
BASE = {CHAT: {"model": MODEL, "messages": OK_MESSAGES}, COMPLETIONS: {"model": MODEL,
                                                                        "prompt": "hi"}}
JSON = {"content-type": "application/json"}
ANY = object()
SMALL_BODY_LIMIT = 64 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw() -> AsyncIterator[FakeGateway]:
    # Room for the 100k-message and 1 MB-prompt cases, whatever the default limit.
    settings = Settings(policy={"name": "rule"},  # type: ignore[arg-type]
                        max_body_bytes=16 * 1024 * 1024)
    async for g in serve(fake_engines(), settings=settings):
        yield g


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def small_gw() -> AsyncIterator[FakeGateway]:
    settings = Settings(policy={"name": "rule"},  # type: ignore[arg-type]
                        max_body_bytes=SMALL_BODY_LIMIT)
    async for g in serve(fake_engines(), settings=settings):
        yield g


def served(g: FakeGateway) -> int:
    return sum(len(e.served) for e in g.engines.values())


async def post(g: FakeGateway, path: str, *, body: Any = None, content: bytes | None = None,
               headers: Any = None) -> httpx.Response:
    """POST once, failing if the request hangs or a refused one reached an engine."""
    before = served(g)
    if content is None:
        content = json.dumps(body).encode()  # NaN/Infinity stay as JSON extensions
        headers = headers if headers is not None else JSON
    r = await asyncio.wait_for(g.client.post(path, content=content, headers=headers), 15)
    if r.status_code >= 400:
        assert served(g) == before, "a refused request reached an engine"
    return r


async def assert_rejected(g: FakeGateway, r: httpx.Response, status: int = 400, *,
                          param: object = ANY, contains: str = "",
                          code: object = ANY) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and len(error["message"]) >= 10, error
    assert contains.lower() in error["message"].lower(), error
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    if param is not ANY:
        assert error["param"] == param, error
    if code is not ANY:
        assert error["code"] == code, error
    await assert_undisturbed(g)
    return dict(error)


async def assert_undisturbed(g: FakeGateway) -> None:
    assert not any(e.running for e in g.engines.values()), "an engine request leaked"
    for stream in (False, True):
        r = await g.client.post(CHAT, json={"model": MODEL, "messages": OK_MESSAGES,
                                            "max_tokens": 2, "stream": stream})
        assert r.status_code == 200, r.text
    assert not any(e.running for e in g.engines.values()), "an engine request leaked"


# -- bodies that are not a JSON object -----------------------------------------------------

BAD_BODIES = [
    ("not-json", b"hello", "not valid JSON"),
    ("truncated", b'{"model": "fake-model", "messa', "not valid JSON"),
    ("trailing-garbage", b'{"model": "fake-model"} x', "not valid JSON"),
    ("list", b"[1, 2]", "JSON object, not an array"),
    ("string", b'"hello"', "JSON object, not a string"),
    ("number", b"3", "JSON object, not a number"),
    ("boolean", b"true", "JSON object, not a boolean"),
    ("null", b"null", "empty or null"),
    ("empty", b"", "empty or null"),
    ("invalid-utf8", b'{"model": "fake-model\xc3\x28"}', "not valid UTF-8"),
    ("invalid-utf8-in-string", b'{"model":"fake-model","messages":[{"role":"user",'
                               b'"content":"\xff\xfe\xfd"}],"prompt":"\x80"}', "UTF-8"),
    ("lone-surrogate-key", b'{"model":"fake-model","\\ud800":1}', "Unicode"),
    ("nested-100k-lists", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("nested-100k-objects", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    ("nested-in-field", b'{"model":"fake-model","messages":' + b"[" * 100_000
                        + b"]" * 100_000 + b"}", "nested too deeply"),
    ("5000-digit-number", b'{"model":"fake-model","max_tokens":' + b"9" * 5000 + b"}", "JSON"),
]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("content, contains",
                         [pytest.param(c, m, id=i) for i, c, m in BAD_BODIES])
async def test_body_that_is_not_a_json_object(gw: FakeGateway, path: str, content: bytes,
                                              contains: str) -> None:
    started = time.monotonic()
    r = await post(gw, path, content=content, headers=JSON)
    assert time.monotonic() - started < 5
    await assert_rejected(gw, r, param=None, contains=contains)


@pytest.mark.parametrize("field, param", [("metadata", "metadata"), ("stop", "stop.0"),
                                          ("logit_bias", "logit_bias")])
async def test_deep_nesting_that_parses_is_a_field_error(gw: FakeGateway, field: str,
                                                         param: str) -> None:
    # Just under the parser's recursion limit: validation must not recurse into it.
    content = (b'{"model": "fake-model", "prompt": "hi", "%s": ' % field.encode()
               + b"[" * 900 + b"]" * 900 + b"}")
    r = await post(gw, COMPLETIONS, content=content, headers=JSON)
    await assert_rejected(gw, r, param=param)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("headers", [{}, {"content-type": "text/plain"},
                                     {"content-type": "application/x-www-form-urlencoded"},
                                     {"content-type": "multipart/form-data; boundary=x"},
                                     {"content-type": "garbage/;;; =\"x"}],
                         ids=["none", "text", "form", "multipart", "garbage"])
async def test_wrong_content_type_says_what_to_send(gw: FakeGateway, path: str,
                                                    headers: dict[str, str]) -> None:
    r = await post(gw, path, content=json.dumps(BASE[path]).encode(), headers=headers)
    await assert_rejected(gw, r, param=None, contains="Content-Type: application/json")


# -- fields both endpoints share -------------------------------------------------------

NAN, INF = float("nan"), float("inf")
SHARED_FIELDS: list[tuple[str, dict[str, Any], str | None]] = [
    *[(f"temperature={v!r}", {"temperature": v}, "temperature")
      for v in (NAN, INF, -INF, -1, -1e-9, 2.0001, 1e308, "0.5", True, [1])],
    *[(f"top_p={v!r}", {"top_p": v}, "top_p") for v in (NAN, 0, -1, 1.5, 1e308, "1")],
    *[(f"{f}={v!r}", {f: v}, f) for f in ("presence_penalty", "frequency_penalty")
      for v in (NAN, INF, -2.5, 1e308)],
    *[(f"max_tokens={v!r}", {"max_tokens": v}, "max_tokens")
      for v in (0, -1, 1e30, 2.0, 2.5, "10", True, [10], {"n": 1})],
    *[(f"n={v!r}", {"n": v}, "n") for v in (0, -1, 129, 9, 10**30, "2", 1.0, True)],
    *[(f"seed={v!r}", {"seed": v}, "seed") for v in (2**64, -(2**63) - 1, 10**30, "1", 1.5)],
    ("stop-too-many", {"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("stop-empty-string", {"stop": ""}, "stop"),
    ("stop-empty-in-list", {"stop": ["a", ""]}, "stop.1"),
    ("stop-too-long", {"stop": ["x" * 257]}, "stop.0"),
    ("stop-number", {"stop": [1]}, "stop.0"),
    ("stop-object", {"stop": {"a": "b"}}, "stop"),
    ("stream-string", {"stream": "true"}, "stream"),
    ("stream-number", {"stream": 1}, "stream"),
    ("stream-options-wrong-type", {"stream": True, "stream_options": {"include_usage": "y"}},
     "stream_options.include_usage"),
    ("user-number", {"user": 5}, "user"),
    ("user-too-long", {"user": "u" * 513}, "user"),
    ("metadata-not-strings", {"metadata": {"a": {"b": 1}}}, "metadata.a"),
    ("metadata-not-object", {"metadata": "x"}, "metadata"),
    ("metadata-bad-class", {"metadata": {"workload_class": "no spaces"}},
     "metadata.workload_class"),
    ("unknown-field", {"logit_bais": {"1": 100}}, "logit_bais"),
    # vLLM's extras: accepted, and as strict as the OpenAI fields.
    *[(f"logit_bias={v!r}", {"logit_bias": v}, p) for v, p in (
        ({"x": 1}, "logit_bias.x"), ({"-1": 1}, "logit_bias"),
        ({"01": 1}, "logit_bias"), ({"1": 101}, "logit_bias"),
        ({"1": NAN}, "logit_bias"), ({"1": "5"}, "logit_bias"), ([1], "logit_bias"),
        ({"1114112": 1}, "logit_bias"))],
    *[(f"top_k={v!r}", {"top_k": v}, "top_k") for v in (-2, "5", True, 1.5, 2**40)],
    *[(f"min_p={v!r}", {"min_p": v}, "min_p") for v in (-0.1, 1.5, NAN, "0.1")],
    *[(f"repetition_penalty={v!r}", {"repetition_penalty": v}, "repetition_penalty")
      for v in (0, -1, INF, "1.1", 101)],
    *[(f"min_tokens={v!r}", {"min_tokens": v}, "min_tokens")
      for v in (-1, "1", True, 1.5, 10**6)],
    *[(f"{f}={v!r}", {f: v}, f) for f in ("ignore_eos", "include_stop_str_in_output",
                                           "skip_special_tokens") for v in ("true", 1, None)],
    *[(f"stop_token_ids={v!r}", {"stop_token_ids": v}, p) for v, p in (
        ([-1], "stop_token_ids.0"), (["1"], "stop_token_ids.0"),
        ([True], "stop_token_ids.0"), (5, "stop_token_ids"), ([2**40], "stop_token_ids.0"),
        ([1114112], "stop_token_ids"))],
    ("allowed-token-ids-empty", {"allowed_token_ids": []}, "allowed_token_ids"),
    ("bad-words-empty", {"bad_words": [""]}, "bad_words.0"),
    *[(f"cache_salt={v!r}", {"cache_salt": v}, "cache_salt")
      for v in ("", "a/b", "a@b", "x" * 129, 5)],
    ("truncation-side", {"truncation_side": "middle"}, "truncation_side"),
    *[(f"truncate_prompt_tokens={v!r}", {"truncate_prompt_tokens": v},
       "truncate_prompt_tokens") for v in (-2, "5", 10**6)],
    ("continuous-usage-string", {"stream": True, "stream_options": {
        "include_usage": True, "continuous_usage_stats": "yes"}},
     "stream_options.continuous_usage_stats"),
    # Refused with a reason (gateway/fields.py), whatever the endpoint.
    ("beam-search", {"use_beam_search": True}, "use_beam_search"),
    ("beam-search-string", {"use_beam_search": "false"}, "use_beam_search"),
    ("priority", {"priority": 1}, "priority"),
    ("priority-bool", {"priority": False}, "priority"),
    ("structured-outputs-two-kinds", {"structured_outputs": {"regex": "a+", "choice": ["a"]}},
     "structured_outputs"),
    ("structured-outputs-unknown", {"structured_outputs": {"xml": "<a/>"}},
     "structured_outputs.xml"),
    ("structured-outputs-structural-tag", {"structured_outputs": {"structural_tag": "{}"}},
     "structured_outputs.structural_tag"),
    ("structured-outputs-choice-empty", {"structured_outputs": {"choice": []}},
     "structured_outputs.choice"),
    ("response-format-schema-missing", {"response_format": {"type": "json_schema"}},
     "response_format"),
    ("response-format-schema-not-object", {"response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ("response-format-structural-tag", {"response_format": {"type": "structural_tag"}},
     "response_format.type"),
    ("vllm-xargs", {"vllm_xargs": {"a": 1}}, "vllm_xargs"),
    ("prompt-logprobs", {"prompt_logprobs": 1}, "prompt_logprobs"),
    ("request-id", {"request_id": "mine"}, "request_id"),
    ("kv-transfer", {"kv_transfer_params": {"a": 1}}, "kv_transfer_params"),
    ("echo", {"echo": True}, "echo"),
    ("model-missing", {"model": None}, "model"),
    ("model-number", {"model": 5}, "model"),
    ("model-empty", {"model": ""}, "model"),
    ("model-too-long", {"model": "m" * 300}, "model"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("fields, param", [pytest.param(f, p, id=i)
                                           for i, f, p in SHARED_FIELDS])
async def test_bad_sampling_fields(gw: FakeGateway, path: str, stream: bool,
                                   fields: dict[str, Any], param: str) -> None:
    body = {**BASE[path], "stream": stream, **fields}
    body = {k: v for k, v in body.items() if not (k == "model" and v is None)}
    r = await post(gw, path, body=body)
    # Streaming or not, a refused request is a plain 4xx, never an SSE payload.
    await assert_rejected(gw, r, param=param)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("max_tokens", [2**63, 2**64 + 1, 10**40, 10**6])
async def test_giant_max_tokens_is_context_length(gw: FakeGateway, path: str,
                                                  max_tokens: int) -> None:
    r = await post(gw, path, body={**BASE[path], "max_tokens": max_tokens, "stream": True})
    await assert_rejected(gw, r, param="max_tokens", code="context_length_exceeded",
                          contains="maximum context length")


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_unknown_model_is_404(gw: FakeGateway, path: str) -> None:
    r = await post(gw, path, body={**BASE[path], "model": "gpt-9<script>"})
    await assert_rejected(gw, r, 404, param="model", code="model_not_found", contains="gpt-9")


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_stream_options_without_stream(gw: FakeGateway, path: str) -> None:
    r = await post(gw, path, body={**BASE[path], "stream_options": {"include_usage": True}})
    await assert_rejected(gw, r, param=None, contains="stream")


# -- chat messages ---------------------------------------------------------------------

def _msg(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "x", **fields}


CHAT_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("messages-empty", {"messages": []}, "messages"),
    ("messages-missing", {"messages": None}, "messages"),
    ("messages-string", {"messages": "hello"}, "messages"),
    ("messages-object", {"messages": {"role": "user"}}, "messages"),
    ("message-number", {"messages": [1]}, "messages.0"),
    ("role-unknown", {"messages": [_msg(role="wizard")]}, "messages.0.role"),
    ("role-tool-without-call-id", {"messages": [_msg(role="tool")]}, "messages.0"),
    ("role-missing", {"messages": [{"content": "x"}]}, "messages.0.role"),
    ("role-number", {"messages": [_msg(role=1)]}, "messages.0.role"),
    ("content-missing", {"messages": [{"role": "user"}]}, "messages.0"),
    ("content-number", {"messages": [_msg(content=5)]}, "messages.0.content"),
    ("content-object", {"messages": [_msg(content={"text": "x"})]}, "messages.0.content"),
    ("content-image-part", {"messages": [_msg(content=[{"type": "image_url",
                                                        "image_url": {"url": "x"}}])]},
     "messages.0.content.0.type"),
    ("content-part-no-text", {"messages": [_msg(content=[{"type": "text"}])]},
     "messages.0.content.0.text"),
    ("content-lone-surrogate", {"messages": [_msg(content="a\ud800b")]}, "messages.0.content"),
    ("name-too-long", {"messages": [_msg(name="n" * 300)]}, "messages.0.name"),
    ("message-extra-field", {"messages": [_msg(tool_calls=[])]}, "messages.0.tool_calls"),
    ("max-completion-tokens-0", {"max_completion_tokens": 0}, "max_completion_tokens"),
    ("logprobs-number", {"logprobs": 5}, "logprobs"),
    ("top-logprobs-21", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("top-logprobs-negative", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("top-logprobs-without-logprobs", {"top_logprobs": 2}, None),
    ("tools", {"tools": [{"type": "function"}]}, "tools.0.function"),
    ("tool-choice", {"tool_choice": "auto"}, "tool_choice"),
    ("chat-template", {"chat_template": "{{ 7*7 }}"}, "chat_template"),
    ("template-kwarg-call-arg", {"chat_template_kwargs": {"tokenize": True}},
     "chat_template_kwargs"),
    ("template-kwarg-bad-name", {"chat_template_kwargs": {"a b": 1}},
     "chat_template_kwargs"),
    ("continue-without-assistant", {"continue_final_message": True,
                                    "add_generation_prompt": False}, None),
    ("continue-with-generation-prompt", {"continue_final_message": True}, None),
    ("reasoning-effort", {"reasoning_effort": "extreme"}, "reasoning_effort"),
    ("service-tier", {"service_tier": "gold"}, "service_tier"),
    ("modalities-audio", {"modalities": ["audio"]}, "modalities.0"),
    ("verbosity", {"verbosity": 1}, "verbosity"),
    ("mm-processor-kwargs", {"mm_processor_kwargs": {"a": 1}}, "mm_processor_kwargs"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fields, param", [pytest.param(f, p, id=i) for i, f, p in CHAT_CASES])
async def test_bad_chat_requests(gw: FakeGateway, stream: bool, fields: dict[str, Any],
                                 param: str | None) -> None:
    body = {k: v for k, v in {**BASE[CHAT], "stream": stream, **fields}.items()
            if v is not None}
    await assert_rejected(gw, await post(gw, CHAT, body=body), param=param)


async def test_100k_messages_are_refused_fast(gw: FakeGateway) -> None:
    started = time.monotonic()
    r = await post(gw, CHAT, body={"model": MODEL, "messages": OK_MESSAGES * 100_000})
    assert time.monotonic() - started < 5
    await assert_rejected(gw, r, param="messages", contains="4096")


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_huge_prompt_is_context_length_fast(gw: FakeGateway, path: str) -> None:
    text = "x" * 1_000_000
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}]} if path == CHAT \
        else {"model": MODEL, "prompt": text}
    started = time.monotonic()
    r = await post(gw, path, body={**body, "stream": True})
    assert time.monotonic() - started < 5
    await assert_rejected(gw, r, code="context_length_exceeded", contains="context length")


# -- completions prompts ---------------------------------------------------------------

COMPLETION_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("prompt-missing", {"prompt": None}, "prompt"),
    ("prompt-number", {"prompt": 5}, "prompt"),
    ("prompt-empty", {"prompt": ""}, "prompt"),
    ("prompt-empty-list", {"prompt": []}, None),
    ("prompt-batched", {"prompt": ["a", "b"]}, None),
    ("prompt-negative-id", {"prompt": [-1]}, "prompt"),
    ("prompt-huge-id", {"prompt": [2**70]}, "prompt"),
    ("prompt-bool-ids", {"prompt": [True, False]}, "prompt.0"),
    ("prompt-nested", {"prompt": [[1, 2]]}, "prompt.0"),
    ("prompt-float-ids", {"prompt": [1.5]}, "prompt.0"),
    ("prompt-lone-surrogate", {"prompt": "\udfff"}, "prompt"),
    ("logprobs-21", {"logprobs": 21}, "logprobs"),
    ("logprobs-negative", {"logprobs": -1}, "logprobs"),
    ("logprobs-bool", {"logprobs": True}, "logprobs"),
    ("echo", {"echo": True}, "echo"),
    ("best-of", {"best_of": 3}, None),
    ("suffix", {"suffix": "x"}, "suffix"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fields, param",
                         [pytest.param(f, p, id=i) for i, f, p in COMPLETION_CASES])
async def test_bad_completion_requests(gw: FakeGateway, stream: bool, fields: dict[str, Any],
                                       param: str | None) -> None:
    body = {k: v for k, v in {**BASE[COMPLETIONS], "stream": stream, **fields}.items()
            if v is not None}
    await assert_rejected(gw, await post(gw, COMPLETIONS, body=body), param=param)


# -- routing headers -------------------------------------------------------------------

def assert_not_echoed(r: httpx.Response, value: bytes) -> None:
    """No response header carries what the attacker sent (the JSON body may quote it)."""
    for name, sent in r.headers.raw:
        assert name.lower() != b"x-evil", r.headers
        assert value not in sent, r.headers


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("value", [
    b"bogus", b"x" * 8000, "ëagle3".encode(), "日本語".encode(), b"eagle3,standard",
    b"<script>alert(1)</script>", b"eagle3; x-evil=1", b"\xff\xfe", b"eag\tle3",
], ids=["unknown", "8k-long", "latin1", "utf8", "list", "html", "params", "high-bytes", "tab"])
async def test_spec_mode_garbage(gw: FakeGateway, path: str, value: bytes) -> None:
    r = await post(gw, path, body={**BASE[path], "stream": True},
                   headers={"content-type": "application/json", "x-spec-mode": value})
    error = await assert_rejected(gw, r, param="x-spec-mode", code="invalid_spec_mode",
                                  contains="valid values: auto")
    assert len(error["message"]) < 300
    assert_not_echoed(r, value)


async def test_empty_spec_mode_means_auto(gw: FakeGateway) -> None:
    r = await post(gw, CHAT, body={**BASE[CHAT], "max_tokens": 2},
                   headers={"content-type": "application/json", "x-spec-mode": ""})
    assert r.status_code == 200
    assert r.headers["x-spec-mode"] in gw.engines


@pytest.mark.parametrize("name", ["x-spec-mode", "x-workload-class"])
async def test_repeated_routing_header_is_refused(gw: FakeGateway, name: str) -> None:
    r = await post(gw, CHAT, body=BASE[CHAT],
                   headers=[("content-type", "application/json"), (name, "eagle3"),
                            (name, "standard")])
    await assert_rejected(gw, r, param=name, code="duplicate_header")


@pytest.mark.parametrize("value", [b"has space", b"x" * 65, b"a/b", "ü".encode()])
async def test_workload_class_garbage(gw: FakeGateway, value: bytes) -> None:
    r = await post(gw, COMPLETIONS, body=BASE[COMPLETIONS],
                   headers={"content-type": "application/json", "x-workload-class": value})
    await assert_rejected(gw, r, param="x-workload-class")
    assert_not_echoed(r, value)


async def raw_exchange(g: FakeGateway, request: bytes) -> tuple[int, list[bytes], bytes]:
    """Send bytes no HTTP client would (bare CR, folding, ...); return status, headers, body.

    One write, then read to the end: the server closes after answering.
    """
    host, port = g.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *headers = head.split(b"\r\n")
    return int(status_line.split()[1]), headers, payload


async def raw_post(g: FakeGateway, header_lines: bytes) -> tuple[int, list[bytes], bytes]:
    body = json.dumps({**BASE[CHAT], "max_tokens": 2}).encode()
    return await raw_exchange(g, b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\n"
                                 b"Content-Type: application/json\r\n" + header_lines
                              + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                              + body)


async def test_crlf_between_headers_is_two_headers_and_nothing_is_echoed(gw: FakeGateway
                                                                         ) -> None:
    status, headers, _ = await raw_post(gw, b"x-spec-mode: eagle3\r\nx-evil: 1\r\n")
    assert status == 200
    assert b"x-spec-mode: eagle3" in headers
    assert not any(h.lower().startswith(b"x-evil") for h in headers)
    await assert_undisturbed(gw)


@pytest.mark.parametrize("lines", [
    b"x-spec-mode: eagle3\rx-evil: 1\r\n",     # bare CR inside a value
    b"x-spec-mode: eagle3\nx-evil: 1\r\n",     # bare LF inside a value
    b"x-spec-mode: eagle3\r\n x-evil: 1\r\n",  # obs-fold (RFC 9112: reject or unfold)
    b"x-spec-mode: eagle3\r\n\tx-evil: 1\r\n",
    b"x-spec-mode: eag\x00le3\r\n",
    b"x-spec-mode: eagle3\x01\r\n",
    b"x-spec-mode: eagle3\x7f\r\n",
    b"x-spec-mode : eagle3\r\n",               # space before the colon
    b"x spec mode: eagle3\r\n",
    b"Transfer-Encoding: chunked\r\n",         # with Content-Length: a smuggling attempt
], ids=["bare-cr", "bare-lf", "obs-fold-space", "obs-fold-tab", "nul", "ctrl", "del",
        "space-before-colon", "space-in-name", "te-and-cl"])
async def test_malformed_header_lines_are_400(gw: FakeGateway, lines: bytes) -> None:
    before = served(gw)
    status, headers, payload = await raw_post(gw, lines)
    # Refused by the HTTP parser before the app sees it (uvicorn answers with plain
    # text there), or by the gateway with the envelope; either way never served.
    assert status == 400, payload
    assert served(gw) == before
    assert not any(h.lower().startswith(b"x-evil") for h in headers)
    if b"application/json" in b"\n".join(headers).lower():
        assert set(json.loads(payload)["error"]) == {"message", "type", "param", "code"}
    await assert_undisturbed(gw)


# -- oversized bodies ------------------------------------------------------------------

@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_oversized_body_is_413(small_gw: FakeGateway, path: str) -> None:
    padding = "x" * (SMALL_BODY_LIMIT + 1)
    body = {**BASE[path], "user": padding}
    r = await post(small_gw, path, body=body)
    await assert_rejected(small_gw, r, 413, param=None, code="request_too_large",
                          contains=str(SMALL_BODY_LIMIT))


async def test_oversized_chunked_body_is_413(small_gw: FakeGateway) -> None:
    # A chunked body declares no length: the limit must hold while reading it.
    content = b'{"model": "fake-model", "prompt": "' + b"x" * (SMALL_BODY_LIMIT + 1) + b'"}'
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c)
                       for c in (content[i:i + 4096] for i in range(0, len(content), 4096)))
    before = served(small_gw)
    status, _, payload = await raw_exchange(
        small_gw, b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: "
                  b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
                  + b"0\r\n\r\n")
    assert status == 413, payload
    assert json.loads(payload)["error"]["code"] == "request_too_large"
    assert served(small_gw) == before
    await assert_undisturbed(small_gw)
