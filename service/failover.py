"""Requests in flight survive their engine's death: they continue on another engine.

When an engine's core process dies, vLLM fails every request it holds and the
supervisor restarts it (tens of seconds on CPU). Each of those requests is
instead continued on an engine that is up, from the text the client already
has, exactly as a move continues it (``service/moves.py``): same response, same
stream, usage counted once, and ``x-spec-moves`` / ``spec_moves`` counting it,
with ``x-spec-failovers`` / ``spec_failovers`` saying that it was a failover.
Forced requests fail over too: an answer from another method beats an error,
and the response names the mode that finished it.

Where it continues:

- A request whose continuation is the same request (``can_move``: one choice, no
  seed, no penalties, no stop strings, no output constraint) resumes after its
  last token.
- Any other request starts again from its prompt, if its client has seen none of
  its output yet: a non-streaming request (its reader holds the answer until the
  end and drops what the dead engine produced), or a stream whose first token had
  not been sent. A stream that had sent output and cannot resume ends with the
  error it got before failover existed.
- Poison is contained. Nothing tells which request killed an engine, so a request
  that asks for anything beyond ``ROUTINE_NEEDS`` (``engines.capabilities.needs``:
  penalties, ``logprobs``, ``ignore_eos``, ``top_k``, ...) continues only on plain
  decoding, which serves every field without a drafter. Routine needs are the
  sampling fields nearly every request sets and an output constraint (JSON schema,
  tools), which every mode serves on the same path, drafts masked like the target's
  tokens: such requests, like plain ones, prefer plain decoding and take a
  speculative mode that serves them only when no plain engine has room. A request
  fails over at most ``max_failovers`` times: a request that kills every engine it
  reaches downs at most that many more.
- Nothing fails over while the gateway drains for shutdown (admission is
  closed), nor to a mode that holds no room.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from engines.base import Engine
from policies.base import ModeLoad
from service.admission import Admission, Ticket
from service.containment import COMMON_FIELDS
from service.stream import Move, OpenStream

log = logging.getLogger(__name__)

# Needs that every mode serves on its ordinary path: a request with no others may fail
# over to a speculative engine when plain decoding cannot take it.
ROUTINE_NEEDS = COMMON_FIELDS | {"structured_outputs"}


class Failover:
    """Chooses where a request whose engine died continues, and reserves its slot."""

    def __init__(self, engines: Mapping[str, Engine], admission: Admission, *,
                 load: Callable[[str], ModeLoad],
                 refusal: Callable[[str, frozenset[str]], tuple[str, str] | None],
                 max_failovers: int = 2,
                 observers: list[Callable[[Move], None]] | None = None) -> None:
        self.engines = engines
        self.admission = admission
        self.load = load
        self.refusal = refusal
        self.max_failovers = max_failovers
        self.observers = list(observers or [])

    def target(self, stream: OpenStream) -> tuple[str, Ticket] | None:
        """(mode, its slot) for ``stream`` to continue on; None when it cannot."""
        if stream.failovers >= self.max_failovers:
            return None
        needs = stream.routing.needs
        plain_only = bool(needs - ROUTINE_NEEDS)
        able = []
        for mode in self.engines:
            load = self.load(mode)
            if mode == stream.mode or not load.up or self.refusal(mode, needs) is not None:
                continue
            if plain_only and load.method is not None:
                continue
            able.append(load)
        # Plain decoding first, then the least busy.
        able.sort(key=lambda m: (m.method is not None, self.admission.in_flight(m.mode),
                                 m.mode))
        for load in able:
            ticket = self.admission.reserve_move(load.mode, stream.routing.workload_class)
            if ticket is not None:
                return load.mode, ticket
        return None

    def failed_over(self, move: Move) -> None:
        log.warning("request %s continued on %s after %s died, %d tokens in",
                    move.request_id, move.target, move.source, move.tokens_so_far)
        for observer in self.observers:
            try:
                observer(move)
            except Exception:
                log.exception("failover observer failed")
