"""Stop work for clients that have gone away.

A non-streaming request spends all its time inside the engine before any
byte is written, so nothing would notice a client hanging up: the engine
would decode to ``max_tokens`` for nobody. We race the work against the
ASGI ``http.disconnect`` message and cancel it, which aborts the engine
request (the engine stream aborts on cancellation). Streaming responses
get the same from Starlette, which cancels the body iterator on disconnect.
The cancelled work gets ``CANCEL_GRACE_S`` to end: work that loses its
cancellation (see ``policies/bounded.py``) must not keep a handler whose
client is gone, which would also block the server's shutdown for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from policies.bounded import stop_tasks

T = TypeVar("T")

CANCEL_GRACE_S = 10.0


class ClientDisconnected(Exception):
    """The client hung up before the response was ready."""


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watcher.cancel()
        raise
    if task.done():
        watcher.cancel()
        return task.result()
    await stop_tasks([task], CANCEL_GRACE_S, "request")
    if task.done() and not task.cancelled():
        task.exception()  # nobody is left to tell
    raise ClientDisconnected


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
