"""One admitted engine request, as the reader of its response sees it.

``OpenStream`` holds the request's first event (awaited before any HTTP response
starts, so that a refusal becomes a real 4xx), accounts its completion (the
observers learn from every finished request) and can be *moved*: continued on
another engine between two events (``service/moves.py`` says when and why).
If its engine dies, it continues on another one (``service/failover.py``).
``Routing`` is how its mode was chosen; ``Move`` what a move (or a failover) did.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from engines.events import Failed, Finished, GenerationEvent, TextDelta
from engines.request import GenerationRequest
from policies.base import Decision, DecisionKind
from service.admission import Ticket
from service.pump import EventPump, Idle, Interrupted


@dataclass(frozen=True, slots=True)
class Move:
    """One request continued on another engine."""

    request_id: str
    source: str
    target: str
    tokens_so_far: int
    # Tokens the source engine generated for it (since its last move, if any), and
    # the request's workload class: what the source's acceptance is learned from.
    source_tokens: int = 0
    workload_class: str = ""


MoveObserver = Callable[[Move], None]


def can_move(request: GenerationRequest) -> bool:
    s = request.sampling
    return (s.n == 1 and s.seed is None and not s.stop and s.presence_penalty == 0.0
            and s.frequency_penalty == 0.0 and s.structured is None)


def continuation(request: GenerationRequest, generated: list[int],
                 segment: int) -> GenerationRequest:
    """The same request, resumed after ``generated`` (tokens the client already has)."""
    s = request.sampling
    done = len(generated)
    sampling = replace(s, max_tokens=s.max_tokens - done, min_tokens=max(0, s.min_tokens - done))
    return replace(request, request_id=f"{request.request_id}-m{segment}",
                   prompt_token_ids=(*request.prompt_token_ids, *generated), sampling=sampling)


@dataclass(frozen=True, slots=True)
class Routing:
    decision: Decision
    workload_class: str
    forced: bool
    decided_at: float = 0.0              # time.monotonic() when the mode was chosen
    needs: frozenset[str] = frozenset()  # what the request asks of an engine


@dataclass(frozen=True, slots=True)
class Completed:
    """A request the engine finished, with its timings (seconds since the decision)."""

    routing: Routing
    finished: Finished
    first_token_s: float | None
    total_s: float
    # Completion tokens served by other modes before the request moved to this one.
    moved_tokens: int = 0
    # The prompt and the answer's tokens (one choice; empty otherwise), and every mode
    # that served part of it: what a counterfactual replay learns from.
    prompt_token_ids: tuple[int, ...] = ()
    output_token_ids: tuple[int, ...] = ()
    served_by: frozenset[str] = frozenset()


CompletionObserver = Callable[[Completed], None]


# Opens a request (or a moved request's continuation) on a mode in the slot ``ticket``
# holds there (interrupting the ticket interrupts it), until ``deadline``
# (``time.monotonic()``; None: none).
Reopen = Callable[[str, GenerationRequest, Ticket, float | None], EventPump]


@dataclass(frozen=True, slots=True)
class StreamHooks:
    """What an open stream tells the service that opened it, and how it continues on
    another mode; one set per dispatcher, given to every stream it opens."""

    completed: CompletionObserver
    engine_died: Callable[[str, frozenset[str]], None]
    reopen: Reopen
    moved: Callable[[Move], None] | None = None
    closed: Callable[[OpenStream], None] | None = None
    # Where a stream whose engine died continues, with its slot there (None: nowhere),
    # and what is told of each failover (``service/failover.py``).
    failover: Callable[[OpenStream], tuple[str, Ticket] | None] | None = None
    failed_over: Callable[[Move], None] | None = None


@dataclass(slots=True, eq=False)
class OpenStream:
    """An admitted engine request whose first event was awaited before answering.

    ``first`` is that event, or None for a stream answered before it came
    (see ``service/keepalive.py``). A ``movable`` stream can be moved to another
    mode (``service/moves.py``): its reader swaps engines between two events and
    never sees the seam.
    """

    routing: Routing
    pump: EventPump
    ticket: Ticket
    request: GenerationRequest
    hooks: StreamHooks
    deadline: float | None = None
    movable: bool = False
    first: GenerationEvent | None = None
    first_token_at: float | None = None
    # The answer's tokens so far (one choice only): what a move continues from and what
    # learns from finished requests.
    generated: list[int] = field(default_factory=list)
    served_by: set[str] = field(default_factory=set)
    moves: int = 0                      # moves and failovers
    failovers: int = 0
    # The reader holds the whole answer until the end (a non-streaming response): a
    # request that cannot resume may start again after a failover, and ``restarts``
    # tells the reader to drop what it holds.
    buffered: bool = False
    restarts: int = 0
    _emitted: bool = False              # a TextDelta has reached the reader
    _first_taken: bool = False
    _target: tuple[str, Ticket] | None = None
    _before_move: int = 0               # completion tokens sent before the last move

    @property
    def mode(self) -> str:
        return self.routing.decision.mode

    @property
    def remaining_tokens(self) -> int:
        return self.request.sampling.max_tokens - len(self.generated)

    @property
    def moving(self) -> bool:
        return self._target is not None

    def move(self, target: str, ticket: Ticket) -> bool:
        """Continue this request on ``target`` (``ticket``: its slot there) from the next
        event on; False (and the slot given back) when it has already ended."""
        if not self.movable or self._target is not None or not self.pump.running:
            ticket.release()
            return False
        self._target = (target, ticket)
        self.pump.interrupt("move")
        return True

    async def next(self, idle_s: float = 0.0) -> GenerationEvent | Idle:
        """The next event or ``IDLE`` (see ``EventPump.next``)."""
        if self.first is not None and not self._first_taken:
            self._first_taken = True
            event: GenerationEvent | Idle = self.first
        else:
            while True:
                try:
                    event = await self.pump.next(idle_s)
                except Interrupted as e:
                    if e.reason != "move" or self._target is None:
                        raise
                    await self._continue_on_target()
                    continue
                if not (isinstance(event, Failed) and event.engine_died
                        and await self.survive(event)):
                    break
        if isinstance(event, Finished) and self.moves:
            event = replace(event, prompt_tokens=len(self.request.prompt_token_ids),
                            completion_tokens=self._before_move + event.completion_tokens)
        if not isinstance(event, Idle):
            self._see(event)
        return event

    async def survive(self, failed: Failed) -> bool:
        """The engine died under this request (``failed``, its last event there): continue
        it on another engine (``service/failover.py``). False when it cannot, and
        ``failed`` ends it."""
        self.hooks.engine_died(self.mode, self.routing.needs)
        if self.hooks.failover is None:
            return False
        resume = can_move(self.request)
        if not resume and self._emitted and not self.buffered:
            return False                  # its client has output no restart can take back
        if self._target is not None:      # a move was under way: failover chooses anew
            self._target[1].release()
            self._target = None
        got = self.hooks.failover(self)
        if got is None:
            return False
        await self.pump.aclose()
        if not resume:
            self.generated.clear()
            self._before_move = 0
            self._emitted = False
            self.restarts += 1
        self.failovers += 1
        move = self._reopen(*got, DecisionKind.FAILOVER)
        if self.hooks.failed_over is not None:
            self.hooks.failed_over(move)
        return True

    async def _continue_on_target(self) -> None:
        assert self._target is not None
        (target, ticket), self._target = self._target, None
        await self.pump.aclose()          # ended already: its abort raised Interrupted
        move = self._reopen(target, ticket, DecisionKind.MOVE)
        if self.hooks.moved is not None:
            self.hooks.moved(move)

    def _reopen(self, target: str, ticket: Ticket, kind: DecisionKind) -> Move:
        """Continue on ``target`` (``ticket``: its slot there) from the tokens generated
        so far; the old engine request has ended."""
        source = self.mode
        self.ticket.release()
        self.ticket = ticket
        self.moves += 1
        self.served_by.add(source)
        source_tokens = len(self.generated) - self._before_move
        self._before_move = len(self.generated)
        self.pump = self.hooks.reopen(
            target, continuation(self.request, self.generated, self.moves), ticket,
            self.deadline)
        self.routing = replace(self.routing, decision=Decision(target, kind, leader=target))
        return Move(self.request.request_id, source, target, len(self.generated),
                    source_tokens, self.routing.workload_class)

    async def events(self) -> AsyncIterator[GenerationEvent]:
        """Every event up to the terminal one; closes the stream when done or left."""
        try:
            while True:
                try:
                    event = await self.next()
                except StopAsyncIteration:
                    return
                assert not isinstance(event, Idle)
                yield event
                if not isinstance(event, TextDelta):
                    return
        finally:
            await self.aclose()

    def _see(self, event: GenerationEvent) -> None:
        now = time.monotonic()
        if isinstance(event, TextDelta):
            self._emitted = True
            if event.token_ids and self.first_token_at is None:
                self.first_token_at = now
            if self.request.sampling.n == 1:
                self.generated.extend(event.token_ids)
        elif isinstance(event, Finished):
            start = self.routing.decided_at
            first = self.first_token_at - start if self.first_token_at is not None else None
            self.hooks.completed(Completed(self.routing, event, first, now - start,
                                           moved_tokens=self._before_move,
                                           prompt_token_ids=self.request.prompt_token_ids,
                                           output_token_ids=tuple(self.generated),
                                           served_by=frozenset({*self.served_by, self.mode})))

    async def aclose(self) -> None:
        try:
            await self.pump.aclose()
        finally:
            self.ticket.release()
            if self._target is not None:  # a move asked for as the request ended
                self._target[1].release()
                self._target = None
            if self.hooks.closed is not None:
                self.hooks.closed(self)
