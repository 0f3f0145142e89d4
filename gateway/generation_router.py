"""HTTP mapping of ``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``.

Every endpoint runs the same steps: ``Serving.start`` (checks, the routing decision,
the engine stream opened), then a JSON body or an SSE stream shaped by the
endpoint. The chosen routing is left on the request's state for the response
metrics middleware (``gateway/metrics.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

from engines.events import Finished
from gateway.chat.endpoint import ChatEndpoint
from gateway.chat.protocol import ChatCompletionRequest
from gateway.completions.endpoint import CompletionEndpoint
from gateway.completions.protocol import CompletionRequest
from gateway.deps import RoutingHeadersDep, RuntimeDep
from gateway.disconnect import cancel_on_disconnect
from gateway.endpoint import OpenAIEndpoint, dump
from gateway.errors import ERROR_RESPONSES
from gateway.protocol import STREAM_RESPONSES, SamplingFields
from gateway.responses.endpoint import ResponsesEndpoint
from gateway.responses.protocol import RESPONSES_STREAM, ResponsesRequest
from gateway.responses.stream import response_events
from gateway.sse import StreamErrorObserver, sse_body
from service.serving import Call, Endpoint, RoutingHeaders, Serving, WireRequest

router = APIRouter(responses=ERROR_RESPONSES)
W = TypeVar("W", bound=SamplingFields)
R = TypeVar("R", bound=WireRequest)


@dataclass(frozen=True)
class Endpoints:
    """Built by the app factory; ``on_stream_error`` counts errors sent inside streams."""

    chat: ChatEndpoint
    completions: CompletionEndpoint
    responses: ResponsesEndpoint
    on_stream_error: StreamErrorObserver


# An endpoint's output: the JSON body of a finished call, the SSE body of a stream.
JsonBody = Callable[[Call, Finished], BaseModel]
SseBody = Callable[[Serving, Call], AsyncIterator[str]]


@router.post("/v1/chat/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 runtime: RuntimeDep, routing: RoutingHeadersDep
                                 ) -> Response:
    endpoints: Endpoints = request.app.state.endpoints
    return await _serve_openai(runtime, endpoints.chat, body, request, routing)


@router.post("/v1/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request,
                            runtime: RuntimeDep, routing: RoutingHeadersDep) -> Response:
    endpoints: Endpoints = request.app.state.endpoints
    return await _serve_openai(runtime, endpoints.completions, body, request, routing)


@router.post("/v1/responses", response_model=None, responses=RESPONSES_STREAM)
async def create_response(body: ResponsesRequest, request: Request,
                          runtime: RuntimeDep, routing: RoutingHeadersDep) -> Response:
    endpoints: Endpoints = request.app.state.endpoints
    endpoint = endpoints.responses

    def sse(serving: Serving, call: Call) -> AsyncIterator[str]:
        return response_events(serving, endpoint, call, endpoints.on_stream_error)

    return await _serve(runtime, endpoint, body, request, routing, endpoint.json_body, sse)


async def _serve_openai(runtime: RuntimeDep, endpoint: OpenAIEndpoint[W], body: W,
                        request: Request, routing: RoutingHeaders) -> Response:
    endpoints: Endpoints = request.app.state.endpoints

    def sse(serving: Serving, call: Call) -> AsyncIterator[str]:
        return sse_body(serving, endpoint, call, endpoints.on_stream_error)

    return await _serve(runtime, endpoint, body, request, routing, endpoint.json_body, sse)


async def _serve(runtime: RuntimeDep, endpoint: Endpoint[R], body: R, request: Request,
                 routing: RoutingHeaders, json_body: JsonBody, sse: SseBody) -> Response:
    serving = runtime.serving()
    call = await cancel_on_disconnect(request, serving.start(endpoint, body, routing))
    request.state.routing = call.stream.routing
    if body.stream:
        # The background task closes the call even when the client leaves before
        # the body starts, which the body iterator alone would never notice.
        return StreamingResponse(sse(serving, call), media_type="text/event-stream",
                                 headers=response_headers(call),
                                 background=BackgroundTask(call.stream.aclose))
    finished = await cancel_on_disconnect(request, serving.collect(call))
    # The mode that served the end: a request moved mid-way (service/moves.py) reports
    # where it finished.
    request.state.routing = call.stream.routing
    return JSONResponse(dump(json_body(call, finished)), headers=response_headers(call))


def response_headers(call: Call) -> dict[str, str]:
    decision = call.stream.routing.decision
    headers = {"x-spec-mode": decision.mode, "x-spec-decision": decision.reason,
               "x-request-id": call.id}
    if call.stream.moves:
        headers["x-spec-moves"] = str(call.stream.moves)
    if call.stream.failovers:
        headers["x-spec-failovers"] = str(call.stream.failovers)
    return headers
