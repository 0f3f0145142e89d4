"""HTTP mapping of ``POST /v1/chat/completions``; the work is in ``ChatService``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gateway.chat.protocol import ChatCompletionRequest
from gateway.deps import RoutingHeadersDep, RuntimeDep
from gateway.disconnect import cancel_on_disconnect

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 runtime: RuntimeDep, routing: RoutingHeadersDep
                                 ) -> Response:
    service = runtime.services().chat
    call = await cancel_on_disconnect(request, service.start(body, routing))
    if body.stream:
        return StreamingResponse(service.sse(call), media_type="text/event-stream",
                                 headers=call.headers)
    result = await cancel_on_disconnect(request, service.collect(call))
    return JSONResponse(result, headers=call.headers)
