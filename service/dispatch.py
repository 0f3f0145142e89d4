"""Choose the mode for a request, open its event stream, and feed the outcome back.

The first event is pulled *before* any HTTP response starts, so that an
engine refusing the request becomes a real 4xx/5xx instead of an error
buried inside a 200 event stream. Every finished request, forced or not,
reports its acceptance and length to the shared policy state.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.capabilities import needs as needs_of
from engines.events import Failed
from engines.prompt_lookup import LookupParams, replay
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
from policies.move_costs import cost_is_measured, served_before_move
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState
from service.admission import Admission, Ticket, queue_full
from service.containment import Containment
from service.errors import EngineFailed, InvalidRequest, ServiceError, Unavailable
from service.moves import Mover
from service.pump import EventPump, Idle
from service.settings import AUTO
from service.stream import (
    Completed,
    CompletionObserver,
    Move,
    OpenStream,
    Reopen,
    Routing,
    can_move,
)

log = logging.getLogger(__name__)

_CLASS_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ModeInfo:
    """Static facts about a mode, from the configuration."""

    method: str | None = None
    num_speculative_tokens: int = 0
    gpu_group: str = "0"
    k_schedule: tuple[tuple[int, int, int], ...] = ()   # vLLM's per-batch K table
    # Engines of this group must not run at the same time: CPU engines each bound to
    # every core oversubscribe the cores when two are busy (each runs far below half
    # speed), unlike GPU engines, which the device time-slices.
    exclusive: bool = False
    # The drafter card's held-out acceptance by kind of prompt (engines/drafter_card.py).
    card_tau: Mapping[str, float] = field(default_factory=dict, compare=False)
    # Prompt lookup's n-gram bounds: its acceptance is replayed on every answer.
    lookup: LookupParams | None = None


@dataclass(frozen=True, slots=True)
class RouteHints:
    """What a request asks of routing: a forced mode (None: auto) and its workload class."""

    forced: str | None = None
    workload_class: str | None = None


class Dispatcher:
    def __init__(self, engines: Mapping[str, Engine], policy: Policy,
                 state: SharedPolicyState, mode_info: Mapping[str, ModeInfo] | None = None,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None,
                 observers: list[CompletionObserver] | None = None,
                 decision_observers: list[Callable[[Routing], None]] | None = None,
                 admission: Admission | None = None, mover: Mover | None = None,
                 move_observers: list[Callable[[Move], None]] | None = None,
                 containment: Containment | None = None) -> None:
        self.engines = engines
        self.containment = containment or Containment()
        self.admission = admission or Admission()
        self.observers: list[CompletionObserver] = [self._learn, *(observers or [])]
        self.decision_observers = list(decision_observers or [])
        self.policy = policy
        self.state = state
        self.memory = RoutingMemory()   # this replica's own auto decisions
        self.mode_info = mode_info or {}
        self.card_tau = {mode: info.card_tau for mode, info in self.mode_info.items()
                         if info.card_tau}
        self.clock = clock
        self.rng = rng or random.Random()
        self.mover = mover   # None: requests finish where they started
        # An exclusive group's switch moves its requests, whatever the old engine has
        # measured: left where they are, they would run beside the new engine's.
        self.moving_groups = frozenset(info.gpu_group for info in self.mode_info.values()
                                       if info.exclusive) if mover is not None else frozenset()
        self.move_observers = list(move_observers or [])
        # Each device group's latest switch: (mode, time.monotonic()). A stream still
        # waiting for its first event when its group switched follows once it can move.
        self._switched: dict[str, tuple[str, float]] = {}
        self.lookup = {mode: info.lookup for mode, info in self.mode_info.items()
                       if info.lookup is not None}
        self.admission.release_observers.append(self._left)

    def group_of(self, mode: str) -> str:
        return self.mode_info.get(mode, ModeInfo()).gpu_group

    def hints(self, spec_mode: str | None, header_class: str | None,
              metadata_class: str | None) -> RouteHints:
        """The routing asked for, validated: ``x-spec-mode``, then ``x-workload-class``
        (which wins over the body's ``metadata.workload_class``)."""
        return RouteHints(self._forced_mode(spec_mode),
                          _workload_class(header_class, "x-workload-class")
                          or _workload_class(metadata_class, "metadata.workload_class"))

    async def route(self, hints: RouteHints, request: GenerationRequest, *,
                    requested_max_tokens: int | None, deadline: float | None = None,
                    first_wait_s: float = 0.0) -> OpenStream:
        """Choose the mode, admit the request to it and open its stream (``open``)."""
        routing = self.decide(hints.forced, len(request.prompt_token_ids), requested_max_tokens,
                              hints.workload_class, request.request_id,
                              needs=needs_of(request.sampling))
        return await self.open(routing, request, deadline=deadline, first_wait_s=first_wait_s)

    def _forced_mode(self, header: str | None) -> str | None:
        """The mode named by ``x-spec-mode``; None for auto."""
        if header is None:
            return None
        value = header.strip().lower()
        if value in ("", AUTO):
            return None
        if value not in self.engines:
            shown = repr(header) if header.isprintable() and len(header) <= 64 \
                else repr(header[:64]) + ("..." if len(header) > 64 else "")
            raise InvalidRequest(
                f"unknown x-spec-mode {shown}; valid values: "
                + ", ".join([AUTO, *sorted(self.engines)]),
                param="x-spec-mode", code="invalid_spec_mode")
        return value

    def loads(self) -> dict[str, ModeLoad]:
        return {name: self._load(name, engine) for name, engine in self.engines.items()}

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
               needs: frozenset[str] = frozenset()) -> Routing:
        """Choose a mode; ``open`` must follow with no ``await`` in between, so that the
        room admission saw here is still there when it admits the request."""
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
                    in_flight=self.in_flight(),
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
                                      decision, loads, acceptance))
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
        info = self.mode_info.get(mode) or ModeInfo()
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
            pump = EventPump(self.engines[mode].generate(request), deadline, ticket.release)
        except BaseException:
            ticket.release()
            raise
        ticket.on_interrupt = pump.interrupt
        stream = OpenStream(routing, pump, ticket, self._completed,
                            on_engine_died=self.containment.engine_died)
        if self.lookup and request.sampling.n == 1:
            stream.prompt_token_ids = request.prompt_token_ids
        movable = self.mover is not None and not routing.forced
        if movable and routing.decision.kind is DecisionKind.COST \
                and not routing.decision.narrowed:
            self._move_group_to(mode)
        try:
            first = await pump.next(first_wait_s)
        except (StopAsyncIteration, InvalidGenerationRequest, EngineUnavailable) as e:
            await stream.aclose()
            raise _open_error(e, mode) from e
        except BaseException:  # Interrupted, or the client left (cancellation)
            await stream.aclose()
            raise
        if not isinstance(first, Idle):
            stream.first = first
            if isinstance(first, Failed) and first.engine_died:
                self.containment.engine_died(mode, routing.needs)
        # Movable only from here: until now its events were read from the pump directly,
        # where a move's interruption would have ended the request. An exploration is
        # there to be measured where it runs: it stays, except in a group whose engines
        # take turns, where staying would run it beside the group's next mode.
        if movable and can_move(request) and (
                routing.decision.kind is not DecisionKind.EXPLORE
                or self.group_of(mode) in self.moving_groups):
            assert self.mover is not None
            stream.request, stream.on_moved = request, self._moved
            stream.reopen = self._reopener(deadline)
            stream.on_closed = self.mover.forget
            self.mover.register(stream)
            self._follow_switch(stream)
        return stream

    def _move_group_to(self, target: str) -> None:
        """Auto chose ``target`` on cost: the requests its device group runs on other
        modes continue there (``service/moves.py``), as far as ``target`` has room."""
        assert self.mover is not None
        self._switched[self.group_of(target)] = (target, time.monotonic())
        if not self.engines[target].is_up:
            return
        measured: dict[str, bool] = {}
        for stream in self.mover.candidates(target):
            if not self._move(stream, target, measured):
                return

    def _follow_switch(self, stream: OpenStream) -> None:
        """Its device group switched while ``stream`` awaited its first event, when it
        could not move: it moves now. (A burst arrives within a step: its first requests
        go to the mode the group ran, and the one that finds the batch large enough to
        switch would otherwise leave them running beside the new engine to their end.)"""
        assert self.mover is not None
        switched = self._switched.get(self.group_of(stream.mode))
        if switched is None:
            return
        target, at = switched
        if at <= stream.routing.decided_at or not self.engines[target].is_up or \
                not self.mover.movable(stream, target):
            return
        self._move(stream, target, {})

    def _move(self, stream: OpenStream, target: str, measured: dict[str, bool]) -> bool:
        """Move ``stream`` to ``target`` where its source's cost is measured (or its group
        moves whatever was measured) and ``target`` can serve it; False when ``target``
        has no room left (``measured``: memo by source mode)."""
        source = stream.mode
        if source not in measured:
            measured[source] = self.group_of(source) in self.moving_groups or \
                cost_is_measured(self._load(source, self.engines[source]))
        if not measured[source] or self.refusal(target, stream.routing.needs):
            return True
        ticket = self.admission.reserve_move(target, stream.routing.workload_class)
        if ticket is None:
            return False
        stream.move(target, ticket)
        return True

    def _reopener(self, deadline: float | None) -> Reopen:
        def reopen(mode: str, request: GenerationRequest, ticket: Ticket) -> EventPump:
            return EventPump(self.engines[mode].generate(request), deadline, ticket.release)
        return reopen

    def _moved(self, move: Move) -> None:
        log.info("request %s moved from %s to %s after %d tokens", move.request_id,
                 move.source, move.target, move.tokens_so_far)
        # What the source served of it teaches the source's acceptance (the request will
        # not finish there, and vLLM reports its draft counts only when it does).
        try:  # learning must never fail the stream being moved
            served = served_before_move(self._load(move.source, self.engines[move.source]),
                                        move.source_tokens)
            if served is not None:
                self.state.observe_acceptance(
                    move.source, move.workload_class, drafts=served.drafts,
                    draft_tokens=served.draft_tokens, accepted=served.accepted,
                    completion_tokens=served.tokens, now=self.clock())
        except Exception:
            log.exception("learning from the move of %s failed", move.request_id)
        for observer in self.move_observers:
            try:
                observer(move)
            except Exception:
                log.exception("move observer failed")

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

    def _learn(self, done: Completed) -> None:
        finished, routing = done.finished, done.routing
        spec = finished.spec_decode
        self.state.observe(
            routing.decision.mode, routing.workload_class,
            drafts=spec.num_drafts if spec else 0,
            draft_tokens=spec.num_draft_tokens if spec else 0,
            accepted=spec.num_accepted_tokens if spec else 0,
            # A moved request: what this mode's engine served (its acceptance counts).
            completion_tokens=finished.completion_tokens - done.moved_tokens, now=self.clock(),
            speculative=self.mode_info.get(routing.decision.mode, ModeInfo()).method
            is not None or spec is not None)
        self._replay_lookup(done)

    def _replay_lookup(self, done: Completed) -> None:
        """Prompt lookup's acceptance on this answer, for each prompt-lookup mode that
        served none of it (``engines/prompt_lookup.py``): measured on every request, it
        needs no exploration to tell where it drafts well."""
        if not done.output_token_ids:
            return
        for mode, params in self.lookup.items():
            if mode in done.served_by:
                continue
            got = replay(done.prompt_token_ids, done.output_token_ids, params)
            self.state.observe_acceptance(
                mode, done.routing.workload_class, drafts=got.num_drafts,
                draft_tokens=got.num_draft_tokens, accepted=got.num_accepted_tokens,
                completion_tokens=len(done.output_token_ids), now=self.clock(),
                speculative=True)

    def _load(self, name: str, engine: Engine) -> ModeLoad:
        s = engine.stats()
        info = self.mode_info.get(name) or ModeInfo()   # no default built per request
        return ModeLoad(mode=name, up=s.up, batch_size=s.batch_size,
                        speculative=s.spec is not None, kv_cache_usage=s.kv_cache_usage,
                        acceptance_rate=s.recent_acceptance_rate,
                        mean_accepted_length=s.recent_mean_accepted_length,
                        method=info.method, num_speculative_tokens=info.num_speculative_tokens,
                        gpu_group=info.gpu_group, step_profile=s.step_profile,
                        prefill_s=s.prefill_s,
                        k_schedule=info.k_schedule, draft_token_s=s.draft_token_s,
                        step_drafted=s.step_drafted, replayed=info.lookup is not None)


def _workload_class(value: str | None, param: str) -> str | None:
    if value is None:
        return None
    if not _CLASS_NAME.match(value):
        raise InvalidRequest(f"{param} must be 1-64 characters of letters, digits and _.:-",
                             param=param, code="invalid_workload_class")
    return value


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


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One decision with the inputs it was made from, for audit and offline replay;
    rendered to strings only when the store sync ships it, off the request path."""

    request_id: str
    now: float
    workload_class: str
    prompt_tokens: int
    max_tokens: int | None
    decision: Decision
    modes: Mapping[str, ModeLoad]
    acceptance: Mapping[str, LearnedAcceptance]

    def as_strings(self) -> dict[str, str]:
        d = self.decision
        return {
            "ts": f"{self.now:.6f}", "request_id": self.request_id, "mode": d.mode,
            "reason": d.reason, "kind": d.kind.value,
            "margin": "" if d.margin is None else f"{d.margin:.4f}",
            "forced": "1" if d.kind is DecisionKind.OVERRIDE else "0",
            "class": self.workload_class, "prompt_tokens": str(self.prompt_tokens),
            "max_tokens": "" if self.max_tokens is None else str(self.max_tokens),
            "scores": json.dumps(dict(d.scores), separators=(",", ":")),
            "batch": json.dumps({m: load.batch_size for m, load in self.modes.items()},
                                separators=(",", ":")),
            "acceptance": json.dumps({m: round(a.mean_accepted_length, 3)
                                      for m, a in self.acceptance.items()},
                                     separators=(",", ":")),
        }
