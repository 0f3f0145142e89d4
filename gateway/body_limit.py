"""Refuse request bodies larger than ``max_body_bytes`` with 413, while reading them.

FastAPI reads a whole body into memory before any handler or dependency can
look at it, and a chunked body declares no length up front, so a limit
checked in a handler comes too late: one huge or endless upload could exhaust
memory first. This middleware reads the body itself, counting, and answers
413 as soon as the declared length or the running count passes the limit, so
no request costs more than the limit in memory. A body within the limit is
handed on in one piece; later ``receive()`` calls go straight to the server,
so disconnect detection (``gateway/disconnect.py``) keeps working.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import OpenAIError

# How long the rest of a refused body is read and dropped before the connection closes.
LINGER_S = 2.0


def too_large(limit: int) -> OpenAIError:
    # Connection: close: the rest of an oversized body is never read, so the
    # connection cannot carry another request.
    return OpenAIError(413, f"The request body is too large: the limit is {limit} bytes.",
                       code="request_too_large", headers={"Connection": "close"})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int,
                 count_error: Callable[[str, str | None], None]) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.count_error = count_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limit:
            # A client that sent "Expect: 100-continue" holds its body back until
            # told to send it, which no one will after a final answer: nothing to drain.
            waits = _header(scope, b"expect", b"").lower() == b"100-continue"
            await self._refuse(scope, receive, send, more=not waits)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left mid-upload: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(scope, receive, send, more=message.get("more_body", False))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: Message | None = {"type": "http.request", "body": b"".join(chunks),
                                "more_body": False}

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message, body = body, None
                return message
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, *, more: bool) -> None:
        """Send the 413 at once, but complete the response only after the rest of the
        body was read and dropped (for at most ``LINGER_S``).

        Closing a connection with unread data makes the kernel reset it, and a
        reset can destroy the 413 before the client reads it: the client, still
        sending, would see a broken connection instead (and the ``openai`` SDK
        would send the whole body again). The server closes the connection once
        the response is complete, so the response stays open while we drain.
        """
        error = too_large(self.limit)
        self.count_error(error.type, error.code)

        async def held_open(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "more_body": True}
            await send(message)

        await error.response()(scope, receive, held_open)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_S):
                while more:
                    message = await receive()
                    more = message["type"] != "http.disconnect" and message.get("more_body", False)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _header(scope: Scope, name: bytes, default: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).strip()
    return default
