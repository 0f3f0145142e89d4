"""One error shape for every failure: the OpenAI envelope with a fitting status.

Exception text from inside the server never reaches a client: unexpected
errors are logged with the request id and answered with a generic message.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.disconnect import ClientDisconnected

log = logging.getLogger(__name__)


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


def unavailable(message: str, code: str = "mode_unavailable") -> OpenAIError:
    return OpenAIError(503, message, type="server_error", code=code,
                       headers={"Retry-After": "1"})


_STATUS_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                 429: "rate_limit_error"}


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON: " + str(first.get("msg", "")), None
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param
    if first.get("type") == "missing" and param:
        return f"'{param}' is a required property", param
    msg = str(first.get("msg", "invalid value"))
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return (f"{param}: {msg}{more}" if param else msg + more), param


def install_error_handlers(app: FastAPI) -> None:
    def count(request: Request, type_: str, code: str | None) -> None:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.on_error(type_, code)

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        count(request, exc.type, exc.code)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        count(request, "invalid_request_error", "validation")
        return JSONResponse(error_body(message, "invalid_request_error", param), status_code=400)

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected) -> Response:
        # Nobody reads this; 499 (nginx's "client closed request") marks it in access logs.
        return Response(status_code=499)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            message = f"no route for {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        kind = _STATUS_TYPES.get(exc.status_code, "invalid_request_error"
                                 if exc.status_code < 500 else "server_error")
        count(request, kind, str(exc.status_code))
        return JSONResponse(error_body(message, kind), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        count(request, "server_error", "internal")
        error_id = uuid.uuid4().hex[:16]
        log.exception("unhandled error %s in %s %s", error_id, request.method, request.url.path)
        return JSONResponse(
            error_body(f"internal server error (error id {error_id})", "server_error"),
            status_code=500)
