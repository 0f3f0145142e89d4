"""Draining: refuse new work, let admitted requests finish for a while, stop the rest.

``gateway/shutdown.py`` runs ``Drain.run`` when the HTTP server is told to stop
(SIGTERM), before the server's own shutdown; ``Runtime.stop`` ends with
``stop_now`` whatever server ran it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from service.admission import Admission

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
