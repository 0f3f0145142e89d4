"""One access-log line per HTTP request, with the error's code and ``param`` on a 4xx/5xx.

It replaces uvicorn's access log (``specgate serve`` turns that off), whose
line has only the status: a caller's 400 could not be told from another
without the body, and the body is never logged (it may hold prompts). The
error's type, code and param come from the envelope the gateway itself wrote
(``gateway.errors.EnvelopeResponse`` notes them in the ASGI scope); its
message is not logged either, as it may quote what the caller sent.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ERROR_SCOPE_KEY, ErrorNote

log = logging.getLogger("gateway.access")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        status = 0

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            log.info("%s", access_line(scope, status or 499, time.monotonic() - began))


def access_line(scope: Scope, status: int, seconds: float) -> str:
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "-"
    version = scope.get("http_version", "1.1")
    line = (f'{where} - "{scope.get("method", "-")} {scope.get("path", "")} HTTP/{version}" '
            f"{status} {seconds * 1000:.1f}ms")
    note: ErrorNote | None = scope.get(ERROR_SCOPE_KEY)
    if note is not None and status >= 400:
        line += (f" type={_safe(note.type)} code={_safe(note.code)} "
                 f"param={_safe(note.param)}")
    return line


def _safe(value: str | None) -> str:
    """A param can hold a caller's JSON key: keep it to one short, printable token."""
    if not value:
        return "-"
    cleaned = "".join(c if c.isprintable() and not c.isspace() else "?" for c in value[:64])
    return cleaned + ("..." if len(value) > 64 else "")
