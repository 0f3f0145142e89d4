"""Property-based fuzzing of ``/v1/*`` against the gateway's own OpenAPI schema.

Schemathesis reads ``/openapi.json`` from the running gateway and generates
requests that fit the schema (positive) and requests that break it (negative);
each goes over real HTTP on loopback. No response may be a 5xx, every 4xx must
be the OpenAI envelope, responses must match what the schema documents, and no
engine request may be left running when the run ends.

Schemathesis calls are synchronous, so the gateway runs on its own event loop
in a thread for the module.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import MODEL, FakeGateway, fake_engines, serve

# Enough to find the bugs hand-written cases missed, bounded so that the
# module stays well under two minutes on two shared cores.
EXAMPLES = {"POST": 200, "GET": 50}
GENERATE = [("/v1/chat/completions", "POST", GenerationMode.POSITIVE),
            ("/v1/chat/completions", "POST", GenerationMode.NEGATIVE),
            ("/v1/completions", "POST", GenerationMode.POSITIVE),
            ("/v1/completions", "POST", GenerationMode.NEGATIVE),
            ("/v1/responses", "POST", GenerationMode.POSITIVE),
            ("/v1/responses", "POST", GenerationMode.NEGATIVE),
            ("/v1/models", "GET", GenerationMode.POSITIVE),  # no input to break
            ("/v1/models/{model_id}", "GET", GenerationMode.POSITIVE)]  # any string fits
MODES = ["auto", "standard", "ngram", "eagle3", "dflash"]


class GatewayThread:
    """The fake-engine gateway of ``tests.conftest.serve``, on a loop of its own."""

    def __init__(self) -> None:
        self.gateway: FakeGateway | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async for gateway in serve(fake_engines()):
            self.gateway = gateway
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> FakeGateway:
        self._thread.start()
        if not self._ready.wait(30) or self.gateway is None:
            raise RuntimeError("the gateway did not start")
        return self.gateway

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def live() -> Iterator[FakeGateway]:
    with GatewayThread() as gateway:
        yield gateway


def error_envelope(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx carries exactly the OpenAI envelope, with a message saying what is wrong."""
    if 400 <= response.status_code < 500:
        assert response.headers.get("content-type", [""])[0].startswith("application/json")
        body = response.json()
        assert isinstance(body, dict) and set(body) == {"error"}, body
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"], error
        assert "Traceback" not in error["message"], error
    return None


CHECKS = [not_a_server_error, error_envelope, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@st.composite
def steered(draw: st.DrawFn, cases: st.SearchStrategy[Case]) -> Case:
    """Aim half of the valid requests at the engines.

    The schema cannot say which model is served, which ``x-spec-mode`` values
    exist, that only an assistant message may omit ``content`` or that one
    prompt is allowed; left alone, nearly every generated request would be
    refused before reaching an engine.
    """
    case = draw(cases)
    if not draw(st.booleans()):
        return case
    if case.path_parameters:
        case.path_parameters["model_id"] = MODEL
    if isinstance(case.body, dict):
        case.body["model"] = MODEL
        for message in case.body.get("messages") or []:
            if message.get("content") is None and message.get("role") != "assistant":
                message["content"] = "hi"
        if "prompt" in case.body:
            case.body.update(prompt="hi", echo=None, best_of=None)
        if "input" in case.body:  # no stored state, no tools, no summaries or logprobs
            for name in ("store", "background", "previous_response_id", "conversation",
                         "prompt", "truncation", "top_logprobs", "tools", "tool_choice",
                         "reasoning", "include"):
                case.body.pop(name, None)
    if case.headers:
        case.headers.pop("x-workload-class", None)
        if "x-spec-mode" in case.headers:
            case.headers["x-spec-mode"] = draw(st.sampled_from(MODES))
    return case


@pytest.mark.parametrize("path, method, mode", GENERATE,
                         ids=[f"{m} {p} {g.value}" for p, m, g in GENERATE])
def test_fuzz_v1(live: FakeGateway, path: str, method: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    operation = schema[path][method]
    if mode.is_positive:
        checks = CHECKS
        cases = steered(operation.as_strategy(generation_mode=mode))
    else:
        checks = [*CHECKS, negative_data_rejection]
        cases = operation.as_strategy(generation_mode=mode)

    @settings(max_examples=EXAMPLES[method], derandomize=True, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large])
    @given(case=cases)
    def run(case: Case) -> None:
        case.call_and_validate(base_url=live.url, checks=checks, timeout=10)

    served = sum(len(e.served) for e in live.engines.values())
    run()
    assert_nothing_running(live)
    if method == "POST" and mode.is_positive:  # the engines were reached, not only refusals
        assert sum(len(e.served) for e in live.engines.values()) > served


def assert_nothing_running(live: FakeGateway) -> None:
    # Schemathesis stops reading a stream after a few events and hangs up; the
    # server thread may take a moment to notice. A leak would not go away.
    deadline = time.monotonic() + 5
    while any(e.running for e in live.engines.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(e.running for e in live.engines.values()), "an engine request leaked"
