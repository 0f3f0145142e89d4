"""One error shape for every failure: the OpenAI envelope with a fitting status.

Exception text from inside the server never reaches a client: unexpected
errors are logged with the request id and answered with a generic message.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from gateway.disconnect import ClientDisconnected
from gateway.fields import UNSUPPORTED
from service.errors import (
    AtCapacity,
    EngineFailed,
    InvalidRequest,
    InvalidSetting,
    ModelNotFound,
    ServiceError,
    TimedOut,
    Unavailable,
)

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(BaseModel):
    """The OpenAI error envelope, documented in the OpenAPI schema."""

    error: ErrorDetail


# Declared on the API routers: documents the real error shape and keeps FastAPI
# from advertising its default 422 body, which this gateway never sends.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorEnvelope, "description": "Invalid request (OpenAI error envelope)"},
    "5XX": {"model": ErrorEnvelope, "description": "Server error, overload, mode down"},
}


# Where an error response notes what it said, for the access log (gateway/access_log.py).
ERROR_SCOPE_KEY = "specgate.error"


@dataclass(frozen=True, slots=True)
class ErrorNote:
    type: str
    code: str | None
    param: str | None


class EnvelopeResponse(JSONResponse):
    """JSON rendered ASCII-only, so that no echoed input can make rendering fail.

    Error messages quote what the client sent (a key, a header value); a lone
    surrogate from a ``\\udXXX`` escape would make a UTF-8 encode raise and turn
    a 400 into a 500. Escaped, it is valid JSON that every client decodes.
    """

    note: ErrorNote | None = None

    def render(self, content: Any) -> bytes:
        error = content.get("error") if isinstance(content, dict) else None
        if isinstance(error, dict):
            self.note = ErrorNote(str(error.get("type")), error.get("code"), error.get("param"))
        return json.dumps(content, ensure_ascii=True, allow_nan=False,
                          separators=(",", ":")).encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.note is not None:
            scope[ERROR_SCOPE_KEY] = self.note
        await super().__call__(scope, receive, send)


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
        return EnvelopeResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


# How each service error reads over HTTP: (status, OpenAI error type, Retry-After).
_SERVICE_HTTP: dict[type[ServiceError], tuple[int, str, bool]] = {
    InvalidRequest: (400, "invalid_request_error", False),
    InvalidSetting: (422, "invalid_request_error", False),
    ModelNotFound: (404, "not_found_error", False),
    AtCapacity: (429, "rate_limit_error", True),
    Unavailable: (503, "server_error", True),
    TimedOut: (504, "server_error", False),  # the upstream (engine) did not finish in time
}


def http_error(e: ServiceError) -> OpenAIError:
    """The one mapping from the service's typed errors to HTTP."""
    if isinstance(e, EngineFailed):  # 503 and retry when the engine is being restarted
        status, kind, retry = (503, "server_error", True) if e.retryable else \
            (502, "server_error", False)
    else:
        status, kind, retry = next(v for t, v in _SERVICE_HTTP.items() if isinstance(e, t))
    return OpenAIError(status, e.message, type=kind, param=e.param, code=e.code,
                       headers={"Retry-After": "1"} if retry else None)


_STATUS_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                 429: "rate_limit_error"}


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean"}
_BODY_HINT = "send a JSON object with 'Content-Type: application/json'"


def _is_union_tag(part: str | int) -> bool:
    # Pydantic names the union member that failed inside the location
    # ('str', 'list[TextPart]', 'function-after[...]', '[key]'); field names are
    # plain identifiers, so anything else is a tag and not part of ``param``.
    return isinstance(part, str) and (not part.isidentifier() or part[:1].isupper()
                                      or part in {"str", "int", "float", "bool"})


def _best_of_group(group: Sequence[Any]) -> tuple[list[str | int], str]:
    """One message for the errors of one field, however many union members failed."""
    # A member whose type matched the input explains the problem best
    # (stop [""]: "at least 1 character", not "should be a valid string").
    matched = [e for e in group if not str(e.get("type", "")).endswith("_type")] or list(group)
    depth = max(len(_strip(e)) for e in matched)
    deepest = [e for e in matched if len(_strip(e)) == depth]
    messages = list(dict.fromkeys(_clean(str(e.get("msg", "invalid value"))) for e in deepest))
    prefix = "Input should be "
    if len(messages) > 1 and all(m.startswith(prefix) for m in messages):
        message = prefix + " or ".join(m[len(prefix):] for m in messages)
    else:
        message = messages[0]
    return _strip(deepest[0]), message


def _strip(error: Any) -> list[str | int]:
    return [p for p in error.get("loc", ())[1:] if not _is_union_tag(p)]


def _clean(message: str) -> str:
    return message.removeprefix("Value error, ")


def _group_key(error: Any, index: int) -> tuple[Any, ...]:
    loc = list(error.get("loc", ())[1:])
    for i, part in enumerate(loc):
        if _is_union_tag(part):
            return ("union", *[p for p in loc[:i] if not _is_union_tag(p)])
    return ("single", index)


def _body_message(error: Any) -> str | None:
    """A message for a problem with the body as a whole, if it is one."""
    kind = error.get("type")
    if kind == "missing":
        return f"the request body is empty or null; {_BODY_HINT}"
    if kind == "string_unicode":  # an object key holding a lone surrogate
        return ("the request body contains text that is not valid Unicode "
                "(an unpaired surrogate escape such as \\ud800)")
    if kind not in ("model_type", "model_attributes_type", "dict_type"):
        return None
    given = error.get("input")
    if isinstance(given, bytes | bytearray):  # not parsed: the Content-Type is not JSON
        return f"the request body was not read as JSON; {_BODY_HINT}"
    return f"the request body must be a JSON object, not {_JSON_KINDS.get(type(given), 'that')}"


def _unsupported(errors: list[Any]) -> tuple[str, str] | None:
    """A field refused by the table in gateway/fields.py: (message, param)."""
    first = errors[0] if errors else {}
    if first.get("type") != UNSUPPORTED:
        return None
    return _clean(str(first.get("msg"))), str((first.get("ctx") or {}).get("param"))


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = list(exc.errors())
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        loc = first.get("loc", ())
        reason = str((first.get("ctx") or {}).get("error") or "syntax error")
        if len(loc) > 1 and isinstance(loc[1], int):  # stdlib says "starting at", "Expecting"
            reason += f" character {loc[1]}" if reason.endswith(" at") \
                else f" at character {loc[1]}"
        return f"the request body is not valid JSON: {reason}", None
    whole = _body_message(first) if tuple(first.get("loc", ())) == ("body",) else None
    if whole is not None:
        return whole, None
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for i, error in enumerate(errors):
        groups.setdefault(_group_key(error, i), []).append(error)
    key = _group_key(first, 0)
    loc, msg = _best_of_group(groups[key])
    param = ".".join(str(p) for p in loc) or None
    if key[0] == "single" and first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param
    if key[0] == "single" and first.get("type") == "missing" and param:
        return f"'{param}' is a required property", param
    more = f" (and {len(groups) - 1} more problems)" if len(groups) > 1 else ""
    return (f"{param}: {msg}{more}" if param else msg + more), param


def _parse_failure_message(cause: BaseException | None) -> str:
    """Why the body could not be parsed (FastAPI only says that it could not)."""
    if isinstance(cause, RecursionError):
        return "the request body is nested too deeply to parse"
    if isinstance(cause, UnicodeDecodeError):
        return f"the request body is not valid UTF-8 (byte {cause.start})"
    if isinstance(cause, ValueError):
        return "the request body could not be parsed as JSON (a number may be too long)"
    return "the request body could not be parsed as JSON"


def install_error_handlers(app: FastAPI) -> None:
    def count(request: Request, type_: str, code: str | None) -> None:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.on_error(type_, code)

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        count(request, exc.type, exc.code)
        return exc.response()

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        error = http_error(exc)
        count(request, error.type, error.code)
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        unsupported = _unsupported(errors)
        if unsupported is not None:
            count(request, "invalid_request_error", UNSUPPORTED)
            return EnvelopeResponse(error_body(unsupported[0], "invalid_request_error",
                                               unsupported[1], UNSUPPORTED), status_code=400)
        message, param = _validation_message(exc)
        count(request, "invalid_request_error", "validation")
        return EnvelopeResponse(error_body(message, "invalid_request_error", param),
                                status_code=400)

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected) -> Response:
        # Nobody reads this; 499 (nginx's "client closed request") marks it in access logs.
        return Response(status_code=499)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI's body parsing
            message = _parse_failure_message(exc.__cause__)
        elif exc.status_code == 404:
            message = f"no route for {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        kind = _STATUS_TYPES.get(exc.status_code, "invalid_request_error"
                                 if exc.status_code < 500 else "server_error")
        count(request, kind, str(exc.status_code))
        return EnvelopeResponse(error_body(message, kind), status_code=exc.status_code,
                                headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        count(request, "server_error", "internal")
        error_id = uuid.uuid4().hex[:16]
        log.exception("unhandled error %s in %s %s", error_id, request.method, request.url.path)
        return EnvelopeResponse(
            error_body(f"internal server error (error id {error_id})", "server_error"),
            status_code=500)
