"""Learning from what requests measured: every finished request, forced or not,
teaches the shared policy state the acceptance and length its mode served, and a
moved request teaches its source what the source served of it.

Prompt lookup needs no exploration: its acceptance on an answer is replayed
exactly from the prompt and the answer's tokens (``engines/prompt_lookup.py``),
so every finished request, whichever mode served it, measures it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engines.prompt_lookup import replay
from policies.base import ModeLoad
from policies.move_costs import served_before_move
from policies.shared_state import SharedPolicyState
from service.mode_info import NO_INFO, ModeInfo
from service.stream import Completed, Move


class Learner:
    def __init__(self, state: SharedPolicyState, mode_info: Mapping[str, ModeInfo],
                 clock: Callable[[], float]) -> None:
        self.state = state
        self.mode_info = mode_info
        self.clock = clock
        self.lookup = {mode: info.lookup for mode, info in mode_info.items()
                       if info.lookup is not None}

    def completed(self, done: Completed) -> None:
        finished, routing = done.finished, done.routing
        spec = finished.spec_decode
        self.state.observe(
            routing.decision.mode, routing.workload_class,
            drafts=spec.num_drafts if spec else 0,
            draft_tokens=spec.num_draft_tokens if spec else 0,
            accepted=spec.num_accepted_tokens if spec else 0,
            # A moved request: what this mode's engine served (its acceptance counts);
            # the class's answer length is the whole answer's.
            completion_tokens=finished.completion_tokens - done.moved_tokens, now=self.clock(),
            speculative=self.mode_info.get(routing.decision.mode, NO_INFO).method
            is not None or spec is not None, answer_tokens=finished.completion_tokens)
        self._replay_lookup(done)

    def _replay_lookup(self, done: Completed) -> None:
        """Prompt lookup's acceptance on this answer, for each prompt-lookup mode that
        served none of it."""
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

    def moved(self, move: Move, source: ModeLoad) -> None:
        """What the source served of a moved request teaches the source's acceptance:
        the request will not finish there, and vLLM reports draft counts only when it
        does. ``source``: the source mode's load as the move left it."""
        served = served_before_move(source, move.source_tokens)
        if served is not None:
            self.state.observe_acceptance(
                move.source, move.workload_class, drafts=served.drafts,
                draft_tokens=served.draft_tokens, accepted=served.accepted,
                completion_tokens=served.tokens, now=self.clock())
