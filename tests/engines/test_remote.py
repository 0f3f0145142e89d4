"""RemoteVllmEngine against a scripted vLLM-like server (httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from engines.base import InvalidGenerationRequest
from engines.events import Failed, Finished, TextDelta
from engines.remote import RemoteVllmEngine
from engines.request import GenerationRequest, SamplingOptions

METRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %(drafts)s
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %(draft_tokens)s
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %(accepted)s
"""


def sse(*chunks: object) -> bytes:
    return b"".join(f"data: {json.dumps(c) if not isinstance(c, str) else c}\n\n".encode()
                    for c in chunks)


class Server:
    def __init__(self) -> None:
        self.counters = {"drafts": 10, "draft_tokens": 40, "accepted": 20}
        self.bodies: list[dict[str, object]] = []
        self.status = 200

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "remote-model"}]})
        if path == "/metrics":
            return httpx.Response(200, text=METRICS % self.counters)
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "bad max_tokens"}})
        return httpx.Response(200, content=sse(
            {"choices": [{"index": 0, "text": "Hel", "token_ids": [1, 2]}]},
            {"choices": [{"index": 0, "text": "lo", "token_ids": [3],
                          "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3},
             "metrics": {"speculative_decoding": {"num_spec_steps": 2, "num_draft_tokens": 8,
                                                  "num_accepted_draft_tokens": 1}}},
            "[DONE]"), headers={"content-type": "text/event-stream"})


REQUEST = GenerationRequest("r1", (5, 6, 7), SamplingOptions(max_tokens=3, temperature=0.0,
                                                             stop=("x",), seed=3))


async def started(server: Server) -> RemoteVllmEngine:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    engine = RemoteVllmEngine("ngram", "http://vllm:8000/", client, speculative=True,
                              poll_interval_s=60)
    await engine.start()
    return engine


async def test_streams_typed_events_with_token_ids_and_acceptance() -> None:
    server = Server()
    engine = await started(server)
    events = [e async for e in engine.generate(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert isinstance(events[1], TextDelta) and events[1].finish_reason == "length"
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert (finished.prompt_tokens, finished.completion_tokens) == (3, 3)
    assert finished.spec_decode is not None and finished.spec_decode.num_drafts == 2
    body = server.bodies[0]
    assert body["model"] == "remote-model" and body["prompt"] == [5, 6, 7]
    assert body["return_token_ids"] is True and body["stop"] == ["x"] and body["seed"] == 3
    await engine.shutdown()


async def test_vllm_extras_reach_the_server_and_defaults_are_left_out() -> None:
    server = Server()
    engine = await started(server)
    extras = SamplingOptions(
        max_tokens=3, top_k=5, min_p=0.1, repetition_penalty=1.2, min_tokens=2,
        ignore_eos=True, logit_bias=((7, -100.0),), stop_token_ids=(9,),
        include_stop_str_in_output=True, skip_special_tokens=False,
        spaces_between_special_tokens=False, allowed_token_ids=(1, 2), bad_words=("no",))
    [e async for e in engine.generate(GenerationRequest("r2", (5,), extras, cache_salt="s"))]
    [e async for e in engine.generate(REQUEST)]
    sent, plain = server.bodies
    assert {k: sent[k] for k in (
        "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "logit_bias",
        "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens",
        "spaces_between_special_tokens", "allowed_token_ids", "bad_words", "cache_salt")} == {
        "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "min_tokens": 2,
        "ignore_eos": True, "logit_bias": {"7": -100.0}, "stop_token_ids": [9],
        "include_stop_str_in_output": True, "skip_special_tokens": False,
        "spaces_between_special_tokens": False, "allowed_token_ids": [1, 2],
        "bad_words": ["no"], "cache_salt": "s"}
    assert not {"top_k", "ignore_eos", "logit_bias", "cache_salt", "min_tokens"} & set(plain)
    await engine.shutdown()


async def test_load_and_acceptance_come_from_remote_metrics() -> None:
    server = Server()
    engine = await started(server)
    stats = engine.stats()
    assert (stats.running, stats.waiting, stats.kv_cache_usage) == (2, 1, 0.25)
    assert stats.spec is not None and stats.spec.num_draft_tokens == 40
    server.counters = {"drafts": 20, "draft_tokens": 80, "accepted": 60}
    await engine._poll_once()
    stats = engine.stats()
    assert stats.recent_acceptance_rate == pytest.approx(1.0)   # (60-20)/(80-40)
    assert stats.up
    await engine.shutdown()
    assert not engine.stats().up


async def test_client_errors_become_invalid_requests() -> None:
    server = Server()
    server.status = 400
    engine = await started(server)
    with pytest.raises(InvalidGenerationRequest, match="bad max_tokens"):
        async for _ in engine.generate(REQUEST):
            pass
    await engine.shutdown()


async def test_stream_cut_short_is_a_failure() -> None:
    def truncated(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            return httpx.Response(200, content=sse(
                {"choices": [{"index": 0, "text": "Hel", "token_ids": [1]}]}))
        return Server()(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(truncated))
    engine = RemoteVllmEngine("standard", "http://vllm:8000", client)
    await engine.start()
    events = [e async for e in engine.generate(REQUEST)]
    assert isinstance(events[-1], Failed)
    await engine.shutdown()


async def test_any_well_formed_event_stream_is_read_comments_and_split_data_included() -> None:
    """Servers differ in how they frame SSE: comments (keep-alives), ``data:`` with no
    space, a JSON payload split over two ``data`` lines, CRLF line ends."""
    class Framed(Server):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path != "/v1/completions":
                return super().__call__(request)
            body = (": keep-alive\r\n\r\n"
                    'data:{"choices": [{"index": 0, "text": "Hi", "token_ids": [1]}]}\r\n\r\n'
                    'data: {"choices": [{"index": 0, "text": "!",\n'
                    'data: "token_ids": [2], "finish_reason": "stop"}]}\n\n'
                    'data: {"choices": [], "usage": {"prompt_tokens": 3, '
                    '"completion_tokens": 2}}\n\n'
                    "data: [DONE]\n\n")
            return httpx.Response(200, content=body.encode(),
                                  headers={"content-type": "text/event-stream; charset=utf-8"})

    engine = await started(Framed())
    events = [e async for e in engine.generate(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi", "!"]
    assert isinstance(events[-1], Finished) and events[-1].completion_tokens == 2
