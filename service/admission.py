"""Overload rejection: a bound on admitted, unfinished requests, per mode and in total.

Past an engine's batch, more requests only wait in its queue, each holding a
connection and its prompt while the caller learns nothing until it times out,
and every request behind them waits longer. Refusing at the door with 429 and
``Retry-After`` lets the caller back off (the ``openai`` SDK retries 429 after
``Retry-After``) or a load balancer try another replica; and since the
dispatcher shows a full mode to the policy as unavailable, auto traffic moves
to a mode that has room before anything is refused. The counts are this
replica's own: exact, immediate, and the same for in-process and remote
engines.

Admission also holds the list of live requests, so that a shutdown drain can
wait for them and then interrupt the rest, and it stops admitting while the
gateway shuts down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Literal

from policies.base import DEFAULT_WORKLOAD_CLASS
from service.errors import AtCapacity, Unavailable

# Why the gateway stopped a request before it finished.
Reason = Literal["timeout", "shutdown", "move"]


def queue_full(limit: int) -> AtCapacity:
    return AtCapacity(f"The server is at capacity ({limit} requests in flight). Please "
                      f"retry after a short wait.", code="queue_full")


def mode_queue_full(mode: str, limit: int) -> AtCapacity:
    return AtCapacity(f"Mode {mode!r} is at capacity ({limit} requests in flight). "
                      f"Retry after a short wait, or use x-spec-mode: auto.",
                      param="x-spec-mode", code="mode_queue_full")


def shutting_down() -> Unavailable:
    return Unavailable("The server is shutting down and accepts no new requests; retry "
                       "(another replica will answer).", code="shutting_down")


class Ticket:
    """One admitted request; holds its slot until released (idempotent)."""

    __slots__ = ("_admission", "_released", "mode", "on_interrupt", "workload_class")

    def __init__(self, admission: Admission, mode: str, workload_class: str) -> None:
        self._admission = admission
        self._released = False
        self.mode = mode
        self.workload_class = workload_class
        # Set by whoever drives the request: how to stop it.
        self.on_interrupt: Callable[[Reason], None] | None = None

    def interrupt(self, reason: Reason) -> None:
        if self.on_interrupt is not None and not self._released:
            self.on_interrupt(reason)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._release(self)


class Admission:
    """``per_mode`` / ``total``: the most admitted, unfinished requests; 0 = no bound."""

    def __init__(self, per_mode: int = 0, total: int = 0) -> None:
        self.per_mode = per_mode
        self.total_limit = total
        self.closed = False
        self._by_mode: Counter[str] = Counter()
        self._by_class: Counter[tuple[str, str]] = Counter()
        self._live: set[Ticket] = set()
        # Told the mode of each request that gives its slot back, once it has.
        self.release_observers: list[Callable[[str], None]] = []

    @property
    def total(self) -> int:
        return len(self._live)

    def in_flight(self, mode: str) -> int:
        return self._by_mode[mode]

    def in_flight_by_class(self) -> dict[str, dict[str, int]]:
        """Admitted, unfinished requests: mode -> workload class -> count."""
        counts: dict[str, dict[str, int]] = {}
        for (mode, cls), n in self._by_class.items():
            if n > 0:
                counts.setdefault(mode, {})[cls] = n
        return counts

    def has_room(self, mode: str) -> bool:
        return not self.per_mode or self._by_mode[mode] < self.per_mode

    def check_open(self) -> None:
        """Raise the 503 or 429 that a new request gets before any mode is chosen."""
        if self.closed:
            raise shutting_down()
        if self.total_limit and self.total >= self.total_limit:
            raise queue_full(self.total_limit)

    def check_mode(self, mode: str) -> None:
        if not self.has_room(mode):
            raise mode_queue_full(mode, self.per_mode)

    def admit(self, mode: str, workload_class: str = DEFAULT_WORKLOAD_CLASS) -> Ticket:
        """Take a slot. Call right after the checks, with no ``await`` in between:
        on one event loop nothing else can take the slot meanwhile."""
        self.check_open()
        self.check_mode(mode)
        ticket = Ticket(self, mode, workload_class)
        self._live.add(ticket)
        self._by_mode[mode] += 1
        self._by_class[(mode, workload_class)] += 1
        return ticket

    def reserve_move(self, mode: str, workload_class: str) -> Ticket | None:
        """A slot on ``mode`` for a request that moves there (it gives its old slot back
        when it does, so the total is not checked); None while closed or full."""
        if self.closed or not self.has_room(mode):
            return None
        ticket = Ticket(self, mode, workload_class)
        self._live.add(ticket)
        self._by_mode[mode] += 1
        self._by_class[(mode, workload_class)] += 1
        return ticket

    def close(self) -> None:
        """Admit nothing more (shutdown); requests already admitted carry on."""
        self.closed = True

    def interrupt_all(self, reason: Reason) -> int:
        live = list(self._live)
        for ticket in live:
            ticket.interrupt(reason)
        return len(live)

    def _release(self, ticket: Ticket) -> None:
        self._live.discard(ticket)
        self._by_mode[ticket.mode] -= 1
        key = (ticket.mode, ticket.workload_class)
        self._by_class[key] -= 1
        if self._by_class[key] <= 0:
            del self._by_class[key]
        for observer in self.release_observers:
            observer(ticket.mode)
