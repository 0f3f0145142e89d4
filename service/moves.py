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

from collections.abc import Callable

from service.stream import OpenStream


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
