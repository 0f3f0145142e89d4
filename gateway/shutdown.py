"""Graceful shutdown: stop admitting, let admitted requests finish, then end the rest.

On SIGTERM (a rolling update, a scale-down) uvicorn on its own stops listening
at once and waits for open connections, cancelling them after its graceful
timeout: a stream is then cut mid-token with no ``[DONE]``, which clients
report as a network error, and nothing refuses new work in the meantime.
``DrainingServer`` runs the ``Drain`` first, while still listening:

1. admission closes: new generation requests get 503 with ``Retry-After``
   (the ``openai`` SDK retries them; a load balancer sends them to another
   replica) and ``/ready`` turns 503, so the replica leaves the endpoints;
2. admitted requests have ``drain_timeout_s`` to finish;
3. what is left is interrupted: its engine request is aborted, a stream ends
   with an error event and ``[DONE]``, a non-streaming request gets 503.

Only then does uvicorn's shutdown run (close listeners and connections, the
app's lifespan shutdown stops the engines). A second Ctrl-C skips the wait.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from service.drain import Drain
from service.settings import Settings

# After the drain has ended every request, this bounds how long uvicorn waits for
# their last bytes to reach slow clients.
FLUSH_TIMEOUT_S = 5


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the ``Drain`` run before its own shutdown."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.drain.run(force=lambda: self.force_exit)
        await super().shutdown(sockets)


def http_server(app: Any, settings: Settings) -> DrainingServer:
    """The server ``specgate serve`` runs: the drain first, then uvicorn's shutdown.

    The idle keep-alive timeout outlives clients' pool expiry: if both were 5 s (uvicorn's
    and httpx's defaults), a client could send on a connection just as the server closes
    it, and that request would fail before the gateway ever saw it."""
    # access_log off: gateway/access_log.py writes the access line (with error codes).
    # loop "asyncio", not uvicorn's default uvloop: with uvloop, streams from the vLLM
    # CPU engines reached clients in one burst at their end in many requests (chunks
    # handed to uvicorn early were read by the client only with the last ones); on the
    # asyncio loop none did.
    config = uvicorn.Config(app, host=settings.host, port=settings.port,
                            log_level=settings.log_level, access_log=False,
                            timeout_keep_alive=settings.idle_connection_timeout_s,
                            timeout_graceful_shutdown=FLUSH_TIMEOUT_S, loop="asyncio")
    return DrainingServer(config, app.state.runtime.drain)
