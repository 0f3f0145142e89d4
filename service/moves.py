"""Moving requests in flight to the mode auto has just switched their device group to.

Engines of one device group time-slice the device. When auto moves a group to
another method, new requests go to the new engine but the old engine's requests
would keep running there until they end: for as long as the longest of them
lives, the device runs split rounds of two engines, each at a small batch, which
is the very cost the switch was meant to end. Instead, each such request is
*continued* on the new engine from its text: its engine request is aborted, and
the new engine gets the prompt followed by every token the client has already
been sent, with what is left of ``max_tokens``. The new engine prefills that
prefix (one forward pass over known tokens) and decodes on; with greedy
sampling the continuation is the text an unmoved request would have produced.
The client sees one response: the reader of the stream (``OpenStream``) swaps
engines between two events, and usage is stitched.

Only a request whose continuation is the same request can move: one choice
(``n = 1``), no seed (a seeded stream cannot be resumed at a position), no
presence or frequency penalty (the new engine would count the moved tokens as
prompt, not output), no stop strings (one could straddle the seam, and the new
engine only searches its own output), no output constraint (the grammar's state at
the seam would be lost), no prompt logprobs; forced modes never
move (the caller asked for that engine), and neither does a request with fewer
than ``min_remaining_tokens`` left, where a prefill costs more than it saves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from engines.base import Engine
from policies.base import ModeLoad
from policies.move_costs import cost_is_measured
from service.admission import Admission
from service.learning import Learner
from service.stream import Move, MoveObserver, OpenStream

log = logging.getLogger(__name__)


class Mover:
    """Finds the open streams a switch of their device group should move.

    The dispatcher registers every auto-routed stream that ``can_move`` and tells
    the mover each auto decision; a cost decision for mode M moves the streams of
    M's device group that run on another mode (and have room on M to go to)."""

    def __init__(self, group_of: Callable[[str], str], min_remaining_tokens: int = 32,
                 max_moves: int = 2) -> None:
        self.group_of = group_of
        self.min_remaining_tokens = min_remaining_tokens
        self.max_moves = max_moves
        self._streams: set[OpenStream] = set()

    def register(self, stream: OpenStream) -> None:
        self._streams.add(stream)

    def forget(self, stream: OpenStream) -> None:
        """A closed stream leaves, so the set holds only the requests in flight."""
        self._streams.discard(stream)

    def candidates(self, target: str) -> list[OpenStream]:
        """Streams that should continue on ``target``, oldest first."""
        out = [s for s in self._streams if self.movable(s, target)]
        return sorted(out, key=lambda s: s.routing.decided_at)

    def movable(self, stream: OpenStream, target: str) -> bool:
        """Should ``stream``, registered here, continue on ``target``?"""
        return stream in self._streams and stream.pump.running and not stream.moving \
            and stream.mode != target and self.group_of(stream.mode) == self.group_of(target) \
            and stream.moves < self.max_moves \
            and stream.remaining_tokens >= self.min_remaining_tokens


class Moves:
    """Carries moves out: a switch moves its device group's requests to the new mode,
    a stream that could not move yet when its group switched follows once it can, and
    each move teaches its source what the source served.

    ``moving_groups``: exclusive device groups, whose switch moves their requests
    whatever the old engine has measured (left where they are, they would run beside
    the new engine's); elsewhere a request moves only off a mode whose cost is measured.
    """

    def __init__(self, mover: Mover, engines: Mapping[str, Engine], admission: Admission,
                 learner: Learner, *, moving_groups: frozenset[str],
                 load: Callable[[str], ModeLoad],
                 refusal: Callable[[str, frozenset[str]], tuple[str, str] | None],
                 observers: list[MoveObserver] | None = None) -> None:
        self.mover = mover
        self.engines = engines
        self.admission = admission
        self.learner = learner
        self.moving_groups = moving_groups
        self.load = load
        self.refusal = refusal
        self.observers = list(observers or [])
        # Each device group's latest switch: (mode, time.monotonic()).
        self._switched: dict[str, tuple[str, float]] = {}

    def switch(self, target: str) -> None:
        """Auto chose ``target`` on cost: the requests its device group runs on other
        modes continue there, as far as ``target`` has room."""
        self._switched[self.mover.group_of(target)] = (target, time.monotonic())
        if not self.engines[target].is_up:
            return
        measured: dict[str, bool] = {}
        for stream in self.mover.candidates(target):
            if not self._move(stream, target, measured):
                return

    def enlist(self, stream: OpenStream) -> None:
        """``stream`` has its first event and can move from now on. If its device group
        switched while it waited for that event, it follows now. (A burst arrives within
        a step: its first requests go to the mode the group ran, and the one that finds
        the batch large enough to switch would otherwise leave them running beside the
        new engine to their end.)"""
        self.mover.register(stream)
        switched = self._switched.get(self.mover.group_of(stream.mode))
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
            measured[source] = self.mover.group_of(source) in self.moving_groups or \
                cost_is_measured(self.load(source))
        if not measured[source] or self.refusal(target, stream.routing.needs):
            return True
        ticket = self.admission.reserve_move(target, stream.routing.workload_class)
        if ticket is None:
            return False
        stream.move(target, ticket)
        return True

    def moved(self, move: Move) -> None:
        log.info("request %s moved from %s to %s after %d tokens", move.request_id,
                 move.source, move.target, move.tokens_so_far)
        try:  # learning must never fail the stream being moved
            self.learner.moved(move, self.load(move.source))
        except Exception:
            log.exception("learning from the move of %s failed", move.request_id)
        for observer in self.observers:
            try:
                observer(move)
            except Exception:
                log.exception("move observer failed")
