"""Keeping the kind of request that killed an engine away from it for a while.

An engine whose core process dies fails every request it holds and is restarted
by the supervisor (tens of seconds on CPU). If a request's own parameters killed
it, the same request sent again, by a retrying client or by auto routing, would
kill it again as soon as it is back, taking the other requests it serves along.
So when an engine dies, the needs (``engines.capabilities.needs``) of each request
it was serving are held against that mode for ``hold_s``: a request that has all
the needs of one of them is routed elsewhere under auto, and refused with a 400
naming the field when forced there. A plain request (no needs) is never held:
nothing in it can be told apart from the traffic every engine serves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Fields nearly every sampled request sets: named last, as they tell a caller little.
COMMON_FIELDS = frozenset({"temperature", "top_p", "stop", "seed", "n"})


class Containment:
    def __init__(self, hold_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_s = hold_s
        self.clock = clock
        self._held: dict[str, dict[frozenset[str], float]] = {}   # mode -> needs -> until

    def engine_died(self, mode: str, needs: frozenset[str]) -> None:
        """The ``mode`` engine died while serving a request with ``needs``."""
        if not needs or self.hold_s <= 0:
            return
        log.warning("engine %r died serving a request with %s: such requests are kept off "
                    "it for %.0f s", mode, ", ".join(sorted(needs)), self.hold_s)
        self._held.setdefault(mode, {})[needs] = self.clock() + self.hold_s

    def refusal(self, mode: str, needs: frozenset[str]) -> tuple[str, str] | None:
        """(field, reason) when a request with ``needs`` is held off ``mode``."""
        held = self._held.get(mode)
        if not held or not needs:
            return None
        now = self.clock()
        for killer, until in list(held.items()):
            if until <= now:
                del held[killer]
            elif killer <= needs:
                left = until - now
                name = min(killer, key=lambda f: (f in COMMON_FIELDS, f))
                return (name, f"a request with {', '.join(sorted(killer))} stopped "
                        f"this engine; such requests are kept off it for {left:.0f} s more")
        return None

    def held(self) -> dict[str, list[list[str]]]:
        """What is held now, mode -> needs (for ``/ready``)."""
        now = self.clock()
        return {mode: [sorted(n) for n, until in held.items() if until > now]
                for mode, held in self._held.items() if any(u > now for u in held.values())}
