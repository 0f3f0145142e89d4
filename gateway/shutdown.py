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

import asyncio
import logging
import socket
import time
from collections.abc import Callable

import uvicorn

from gateway.admission import Admission

log = logging.getLogger(__name__)

_POLL_S = 0.05


class Drain:
    def __init__(self, admission: Admission, timeout_s: float) -> None:
        self.admission = admission
        self.timeout_s = timeout_s

    @property
    def draining(self) -> bool:
        return self.admission.closed

    async def run(self, force: Callable[[], bool] = lambda: False) -> None:
        """Close admission, wait up to ``timeout_s`` (or until ``force()``), interrupt the rest."""
        self.admission.close()
        waiting = self.admission.total
        if waiting:
            log.info("draining: %d requests in flight; waiting up to %g s for them",
                     waiting, self.timeout_s)
        ends = time.monotonic() + self.timeout_s
        while self.admission.total and time.monotonic() < ends and not force():
            await asyncio.sleep(_POLL_S)
        self.stop_now()

    def stop_now(self) -> None:
        """Close admission and interrupt every admitted request (each aborts its engine
        request and ends its response)."""
        self.admission.close()
        stopped = self.admission.interrupt_all("shutdown")
        if stopped:
            log.warning("drain: %d requests still in flight were stopped", stopped)


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the ``Drain`` run before its own shutdown."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.drain.run(force=lambda: self.force_exit)
        await super().shutdown(sockets)
