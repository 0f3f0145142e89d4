"""When moving requests in flight off a mode is justified (``service/moves.py``).

A cost decision made before the old mode has run at its current batch rests on a
prior, and a move would make it stick: the moved engine never runs that batch, so
its real cost is never measured and the prior never corrected (a cold burst moved
off a drafter to plain decoding stays there, slower than where it was). Requests
therefore move off a mode only once its engine has measured decode steps at (about)
the batch it holds now; until then they finish where they are, and their steps are
the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.base import ModeLoad


def cost_is_measured(load: ModeLoad) -> bool:
    """``load``'s engine has measured decode steps at half its current batch or more."""
    batch = load.batch_size
    return batch > 0 and any(samples > 0 and 2 * measured >= batch
                             for measured, _, samples in load.step_profile)


@dataclass(frozen=True, slots=True)
class ServedBeforeMove:
    """What an engine served of a request before it moved off it, as ``observe`` takes
    it: draft steps, drafted tokens, accepted tokens, tokens generated there."""

    drafts: int
    draft_tokens: int
    accepted: int
    tokens: int


def served_before_move(load: ModeLoad, tokens: int) -> ServedBeforeMove | None:
    """The acceptance a moved request's ``tokens`` on ``load``'s engine stand for.

    vLLM reports a request's own draft counts only when it finishes, and a moved
    request does not finish there; so its tokens are split into steps at the engine's
    measured recent mean accepted length (the group serves one mix while it moves, so
    the engine-wide window is that mix's). Without this, a mode the group moved away
    from keeps only the evidence of the requests that finished on it, and its
    discounted prior decides for it from then on (docs/simulator.md, "vLLM's chain
    EAGLE-3"). None when there is nothing to learn: a plain engine, nothing measured,
    or no token after the first."""
    tau = load.mean_accepted_length
    if load.method is None or tau is None or tau < 1.0 or tokens < 2:
        return None
    decoded = tokens - 1                   # the first token came from the prefill
    steps = max(1, round(decoded / tau))
    accepted = max(0, decoded - steps)
    k = max(load.draft_length(load.batch_size), 1)
    return ServedBeforeMove(steps, steps * k, accepted, tokens)
