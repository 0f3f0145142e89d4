"""HTTP mapping of ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Both endpoints run the same steps: ``Serving.start`` (checks, the routing decision,
the engine stream opened), then a JSON body or an SSE stream shaped by the
endpoint. The chosen routing is left on the request's state for the response
metrics middleware (``gateway/metrics.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from gateway.chat.endpoint import ChatEndpoint
from gateway.chat.protocol import ChatCompletionRequest
from gateway.completions.endpoint import CompletionEndpoint
from gateway.completions.protocol import CompletionRequest
from gateway.deps import RoutingHeadersDep, RuntimeDep
from gateway.disconnect import cancel_on_disconnect
from gateway.endpoint import OpenAIEndpoint, dump
from gateway.errors import ERROR_RESPONSES
from gateway.protocol import STREAM_RESPONSES, SamplingFields
from gateway.sse import StreamErrorObserver, sse_body
from service.serving import Call, RoutingHeaders

router = APIRouter(responses=ERROR_RESPONSES)
W = TypeVar("W", bound=SamplingFields)


@dataclass(frozen=True)
class Endpoints:
    """Built by the app factory; ``on_stream_error`` counts errors sent inside streams."""

    chat: ChatEndpoint
    completions: CompletionEndpoint
    on_stream_error: StreamErrorObserver


@router.post("/v1/chat/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 runtime: RuntimeDep, routing: RoutingHeadersDep
                                 ) -> Response:
    endpoints: Endpoints = request.app.state.endpoints
    return await _serve(runtime, endpoints.chat, body, request, routing)


@router.post("/v1/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request,
                            runtime: RuntimeDep, routing: RoutingHeadersDep) -> Response:
    endpoints: Endpoints = request.app.state.endpoints
    return await _serve(runtime, endpoints.completions, body, request, routing)


async def _serve(runtime: RuntimeDep, endpoint: OpenAIEndpoint[W], body: W,
                 request: Request, routing: RoutingHeaders) -> Response:
    serving = runtime.serving()
    call = await cancel_on_disconnect(request, serving.start(endpoint, body, routing))
    request.state.routing = call.stream.routing
    headers = response_headers(call)
    if body.stream:
        # The background task closes the call even when the client leaves before
        # the body starts, which the body iterator alone would never notice.
        endpoints: Endpoints = request.app.state.endpoints
        return StreamingResponse(sse_body(serving, endpoint, call, endpoints.on_stream_error),
                                 media_type="text/event-stream", headers=headers,
                                 background=BackgroundTask(call.stream.aclose))
    finished = await cancel_on_disconnect(request, serving.collect(call))
    # The mode that served the end: a request moved mid-way (service/moves.py) reports
    # where it finished.
    request.state.routing = call.stream.routing
    return JSONResponse(dump(endpoint.json_body(call, finished)),
                        headers=response_headers(call))


def response_headers(call: Call) -> dict[str, str]:
    decision = call.stream.routing.decision
    headers = {"x-spec-mode": decision.mode, "x-spec-decision": decision.reason,
               "x-request-id": call.id}
    if call.stream.moves:
        headers["x-spec-moves"] = str(call.stream.moves)
    return headers
