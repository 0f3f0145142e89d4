"""HTTP mapping of ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Both endpoints run the same steps; the work is in ``ChatService`` and
``CompletionService``. The chosen routing is left on the request's state for the
response metrics middleware (``gateway/metrics.py``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from gateway.chat.protocol import ChatCompletionRequest
from gateway.completions.protocol import CompletionRequest
from gateway.deps import RoutingHeadersDep, RuntimeDep
from gateway.disconnect import cancel_on_disconnect
from gateway.errors import ERROR_RESPONSES
from gateway.protocol import STREAM_RESPONSES
from gateway.serving import RoutingHeaders, Serving

router = APIRouter(responses=ERROR_RESPONSES)


@router.post("/v1/chat/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 runtime: RuntimeDep, routing: RoutingHeadersDep
                                 ) -> Response:
    return await _serve(runtime.services().chat, body, request, routing)


@router.post("/v1/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request,
                            runtime: RuntimeDep, routing: RoutingHeadersDep) -> Response:
    return await _serve(runtime.services().completions, body, request, routing)


async def _serve(service: Serving, body: ChatCompletionRequest | CompletionRequest,
                 request: Request, routing: RoutingHeaders) -> Response:
    call = await cancel_on_disconnect(request, service.start(body, routing))
    request.state.routing = call.stream.routing
    if body.stream:
        # The background task closes the call even when the client leaves before
        # the body starts, which the body iterator alone would never notice.
        return StreamingResponse(service.sse(call), media_type="text/event-stream",
                                 headers=call.headers,
                                 background=BackgroundTask(call.stream.aclose))
    result = await cancel_on_disconnect(request, service.collect(call))
    return JSONResponse(result, headers=call.headers)
