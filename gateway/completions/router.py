"""HTTP mapping of ``POST /v1/completions``; the work is in ``CompletionService``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from gateway.completions.protocol import CompletionRequest
from gateway.deps import RoutingHeadersDep, RuntimeDep
from gateway.disconnect import cancel_on_disconnect
from gateway.errors import ERROR_RESPONSES
from gateway.protocol import STREAM_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)


@router.post("/v1/completions", response_model=None, responses=STREAM_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request,
                            runtime: RuntimeDep, routing: RoutingHeadersDep
                            ) -> Response:
    service = runtime.services().completions
    call = await cancel_on_disconnect(request, service.start(body, routing))
    if body.stream:
        # The background task closes the call even when the client leaves before
        # the body starts, which the body iterator alone would never notice.
        return StreamingResponse(service.sse(call), media_type="text/event-stream",
                                 headers=call.headers,
                                 background=BackgroundTask(call.stream.aclose))
    result = await cancel_on_disconnect(request, service.collect(call))
    return JSONResponse(result, headers=call.headers)
