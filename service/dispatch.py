"""Choose the mode for a request and open its event stream.

The first event is pulled *before* any HTTP response starts, so that an
engine refusing the request becomes a real 4xx/5xx instead of an error
buried inside a 200 event stream. What finished requests teach the policy is
``service/learning.py``; moving requests between engines, ``service/moves.py``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.capabilities import needs as needs_of
from engines.events import Failed
from engines.request import GenerationRequest
from policies.auto_decision import decide_auto, note_departure
from policies.base import (
    Decision,
    DecisionKind,
    LearnedAcceptance,
    ModeLoad,
    NoModeAvailable,
    Policy,
    forced,
)
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState
from service.admission import Admission, Ticket, queue_full
from service.arrivals import Arrival, Arrivals
from service.audit import AuditEntry
from service.containment import Containment
from service.errors import EngineFailed, InvalidRequest, ServiceError, Unavailable
from service.failover import Failover
from service.learning import Learner
from service.mode_info import NO_INFO, ModeInfo, mode_load
from service.moves import Mover, Moves
from service.pump import EventPump, Idle
from service.route_hints import RouteHints, route_hints
from service.stream import (
    Completed,
    CompletionObserver,
    Move,
    OpenStream,
    Routing,
    StreamHooks,
    can_move,
)

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, engines: Mapping[str, Engine], policy: Policy,
                 state: SharedPolicyState, mode_info: Mapping[str, ModeInfo] | None = None,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None,
                 observers: list[CompletionObserver] | None = None,
                 decision_observers: list[Callable[[Routing], None]] | None = None,
                 admission: Admission | None = None, mover: Mover | None = None,
                 move_observers: list[Callable[[Move], None]] | None = None,
                 containment: Containment | None = None, max_failovers: int = 2,
                 failover_observers: list[Callable[[Move], None]] | None = None,
                 arrivals: Arrivals | None = None) -> None:
        self.engines = engines
        self.arrivals = arrivals or Arrivals()
        self.containment = containment or Containment()
        self.admission = admission or Admission()
        self.policy = policy
        self.state = state
        self.memory = RoutingMemory()   # this replica's own auto decisions
        self.mode_info = mode_info or {}
        self.card_tau = {mode: info.card_tau for mode, info in self.mode_info.items()
                         if info.card_tau}
        self.clock = clock
        self.rng = rng or random.Random()
        self.learner = Learner(state, self.mode_info, clock)
        self.observers: list[CompletionObserver] = [self.learner.completed, *(observers or [])]
        self.decision_observers = list(decision_observers or [])
        # None: requests finish where they started.
        self.moves = None if mover is None else Moves(
            mover, engines, self.admission, self.learner,
            moving_groups=frozenset(info.gpu_group for info in self.mode_info.values()
                                    if info.exclusive),
            load=self._load, refusal=self.refusal, observers=move_observers)
        self.moving_groups = self.moves.moving_groups if self.moves else frozenset()
        # 0: a request whose engine dies fails with it.
        self.failover = None if max_failovers <= 0 else Failover(
            engines, self.admission, load=self._load, refusal=self.refusal,
            max_failovers=max_failovers, observers=failover_observers)
        self.hooks = StreamHooks(
            self._completed, self.containment.engine_died, self._pump,
            moved=self.moves.moved if self.moves else None,
            closed=mover.forget if mover else None,
            failover=self.failover.target if self.failover else None,
            failed_over=self.failover.failed_over if self.failover else None)
        self.admission.release_observers.append(self._left)

    def group_of(self, mode: str) -> str:
        return self.mode_info.get(mode, NO_INFO).gpu_group

    def hints(self, spec_mode: str | None, header_class: str | None,
              metadata_class: str | None) -> RouteHints:
        """The routing asked for, validated (``service/route_hints.py``)."""
        return route_hints(spec_mode, header_class, metadata_class, self.engines)

    async def route(self, hints: RouteHints, request: GenerationRequest, *,
                    requested_max_tokens: int | None, deadline: float | None = None,
                    first_wait_s: float = 0.0, arrival: Arrival | None = None) -> OpenStream:
        """Choose the mode, admit the request to it and open its stream (``open``).

        ``arrival``: the request's entry in ``self.arrivals`` (``service/arrivals.py``);
        an auto request waits for the rest of its burst, and its decision counts the
        requests still waiting for theirs. Left here once decided."""
        arriving = 0
        if arrival is not None:
            if hints.forced is None:
                await arrival.settle()
            arriving = arrival.others()
        routing = self.decide(hints.forced, len(request.prompt_token_ids), requested_max_tokens,
                              hints.workload_class, request.request_id,
                              needs=needs_of(request.sampling), arriving=arriving)
        if arrival is not None:
            arrival.leave()
        return await self.open(routing, request, deadline=deadline, first_wait_s=first_wait_s)

    def loads(self) -> dict[str, ModeLoad]:
        return {name: self._load(name) for name in self.engines}

    def in_flight(self) -> dict[str, dict[str, int]]:
        """Open engine requests, mode -> workload class -> count (forced ones too): the
        mix each device group serves, which the policy prices modes on."""
        return self.admission.in_flight_by_class()

    def refusal(self, mode: str, needs: frozenset[str]) -> tuple[str, str] | None:
        """(field, reason) when ``mode`` cannot serve a request with ``needs``: its
        engine's capabilities, or a kind of request that stopped it lately."""
        if not needs:
            return None
        return (self.engines[mode].capabilities.refusal(needs)
                or self.containment.refusal(mode, needs))

    def decide(self, override: str | None, prompt_tokens: int, max_tokens: int | None,
               requested_class: str | None, request_id: str = "", *,
               needs: frozenset[str] = frozenset(), arriving: int = 0) -> Routing:
        """Choose a mode; ``open`` must follow with no ``await`` in between, so that the
        room admission saw here is still there when it admits the request.

        ``arriving``: other requests that arrived with this one and await their decision
        (``DecisionInput.arriving``)."""
        admission = self.admission
        admission.check_open()
        loads = self.loads()
        refused = {name: r for name in loads if (r := self.refusal(name, needs)) is not None}
        if refused and override is not None and override in refused:
            raise _cannot_serve(override, refused[override], sorted(set(loads) - set(refused)))
        if refused and override is None:
            if len(refused) == len(loads):
                field, reason = refused[min(refused)]
                raise InvalidRequest(f"no mode of this server can serve '{field}' "
                                     f"({reason})", param=field, code="unsupported_parameter")
        now = self.clock()
        state = self.state
        cls = state.workload_class(requested_class)
        acceptance: Mapping[str, LearnedAcceptance] = {}
        if override is not None:  # a forced mode: the policy is not consulted
            if not loads[override].up:
                raise Unavailable(f"mode {override!r} is not available right now; "
                                  f"retry later or use x-spec-mode: auto",
                                  code="mode_unavailable")
            admission.check_mode(override)
            decision = forced(override)
        else:
            # Auto traffic goes where there is room; a full mode's batch still counts.
            full = {name for name, load in loads.items()
                    if load.up and not admission.has_room(name)}
            # A mode that cannot serve the request is out of the choice, but its batch
            # still weighs on the device it shares, as a full mode's does.
            loads = {name: replace(load, has_room=False)
                     if name in full or name in refused else load
                     for name, load in loads.items()}
            try:
                inputs, decision = decide_auto(
                    self.policy, state, self.memory, loads, prompt_tokens=prompt_tokens,
                    max_tokens=max_tokens, workload_class=cls, now=now,
                    in_flight=self.in_flight(), arriving=arriving,
                    explore_draw=self.rng.random(), narrowed=bool(refused),
                    card_tau=self.card_tau, moving_groups=self.moving_groups)
            except NoModeAvailable as e:
                if full:
                    raise queue_full(admission.per_mode) from e
                raise Unavailable("no decoding engine is available right now; retry later",
                                  code="no_engine_available") from e
            acceptance = inputs.acceptance
            decision = self._keep_group_exclusive(decision, loads, refused)
            if refused:
                decision = replace(decision, narrowed=min(
                    field for field, _ in refused.values()))
        state.log_decision(AuditEntry(request_id, now, cls, prompt_tokens, max_tokens,
                                      decision, loads, acceptance, arriving))
        routing = Routing(decision, cls, forced=override is not None,
                          decided_at=time.monotonic(), needs=needs)
        for observer in self.decision_observers:
            observer(routing)
        return routing

    def _keep_group_exclusive(self, decision: Decision, loads: Mapping[str, ModeLoad],
                              refused: Mapping[str, tuple[str, str]]) -> Decision:
        """In an exclusive device group, a decision that is no switch (an exploration,
        or a hold on a mode other than the one the group runs now) joins the mode the
        group runs instead: two busy engines there run slower than either alone. A cost
        decision is a switch, and the group's requests move with it (``open``)."""
        mode = decision.mode
        info = self.mode_info.get(mode) or NO_INFO
        if not info.exclusive or decision.kind is DecisionKind.COST:
            return decision
        flight = self.in_flight()
        busy = {m: sum(by_class.values()) for m, by_class in flight.items()
                if m != mode and sum(by_class.values()) > 0 and self.group_of(m) == info.gpu_group}
        if not busy or flight.get(mode):
            return decision
        runs = max(busy, key=lambda m: (busy[m], m))
        load = loads.get(runs)
        if load is None or not (load.up and load.has_room) or runs in refused:
            return decision
        return Decision(runs, DecisionKind.HOLD, margin=0.0, scores=decision.scores,
                        leader=decision.leader)

    async def open(self, routing: Routing, request: GenerationRequest, *,
                   deadline: float | None = None, first_wait_s: float = 0.0) -> OpenStream:
        """Admit the request to the chosen mode and await its first event.

        ``deadline`` (``time.monotonic()``) stops the engine request when it
        passes; ``first_wait_s`` > 0 returns without a first event after that long.
        """
        mode = routing.decision.mode
        ticket = self.admission.admit(mode, routing.workload_class)
        try:
            pump = self._pump(mode, request, ticket, deadline)
        except BaseException:
            ticket.release()
            raise
        moves = None if routing.forced else self.moves
        # An exploration is there to be measured where it runs: it stays, except in a
        # group whose engines take turns, where staying would run it beside the group's
        # next mode.
        movable = moves is not None and can_move(request) and (
            routing.decision.kind is not DecisionKind.EXPLORE
            or self.group_of(mode) in self.moving_groups)
        stream = OpenStream(routing, pump, ticket, request, self.hooks, deadline=deadline,
                            movable=movable)
        if moves is not None and routing.decision.kind is DecisionKind.COST \
                and not routing.decision.narrowed:
            moves.switch(mode)
        try:
            first = await pump.next(first_wait_s)
            # Its engine died before the first event: it starts on another one.
            while isinstance(first, Failed) and first.engine_died and \
                    await stream.survive(first):
                mode = stream.mode
                first = await stream.pump.next(first_wait_s)
        except (StopAsyncIteration, InvalidGenerationRequest, EngineUnavailable) as e:
            await stream.aclose()
            raise _open_error(e, mode) from e
        except BaseException:  # Interrupted, or the client left (cancellation)
            await stream.aclose()
            raise
        if not isinstance(first, Idle):
            stream.first = first
        # Movable only from here: until now its events were read from the pump directly,
        # where a move's interruption would have ended the request.
        if moves is not None and movable:
            moves.enlist(stream)
        return stream

    def _pump(self, mode: str, request: GenerationRequest, ticket: Ticket,
              deadline: float | None) -> EventPump:
        """The engine request on ``mode``; it gives ``ticket`` back when it ends, and a
        drain or a move interrupting the ticket interrupts it."""
        pump = EventPump(self.engines[mode].generate(request), deadline, ticket.release)
        ticket.on_interrupt = pump.interrupt
        return pump

    def _left(self, mode: str) -> None:
        """A request gave its slot on ``mode`` back: its device group's batch drops."""
        group = self.group_of(mode)
        batch = sum(self.admission.in_flight(m) for m in self.engines
                    if self.group_of(m) == group)
        note_departure(self.policy, self.memory, group, batch, self.clock())

    def _completed(self, done: Completed) -> None:
        for observer in self.observers:
            try:
                observer(done)
            except Exception:  # an observer's bug must not fail a finished request
                log.exception("completion observer failed")

    def _load(self, name: str) -> ModeLoad:
        return mode_load(name, self.engines[name], self.mode_info.get(name) or NO_INFO)


def _cannot_serve(mode: str, refusal: tuple[str, str], able: list[str]) -> InvalidRequest:
    field, reason = refusal
    others = (f"modes that can: {', '.join(['auto', *able])}" if able
              else "no mode of this server can")
    return InvalidRequest(f"x-spec-mode {mode!r} cannot serve '{field}': {reason}; {others}",
                          param=field, code="unsupported_parameter")


def _open_error(e: Exception, mode: str) -> ServiceError:
    """What a client is told when a request fails before its first event."""
    if isinstance(e, InvalidGenerationRequest):
        return InvalidRequest(f"the engine rejected the request: {e}")
    if isinstance(e, EngineUnavailable):
        return Unavailable(f"mode {mode!r} is not available right now",
                           code="mode_unavailable")
    return EngineFailed("the engine returned no output", retryable=False)


