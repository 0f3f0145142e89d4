"""Expected cost of serving one request on one mode, from live and learned signals.

The model, in the terms of the serving loop:

* each engine advances all its requests by one *step*; a step at batch ``b``
  takes ``t(b)`` — measured per engine (decode steps only), else a prior
  ``fixed + per_token * b * (K + 1) `` with the drafting overhead on top;
* engines in one GPU group time-slice the device, so one *round* (every
  busy engine stepping once) takes the sum of their step times, and a
  request advances by ``tau`` tokens per round (the mean accepted length;
  1 for plain decoding);
* the request's own time is its prefill plus ``(L - 1) / tau`` rounds;
* joining an engine makes every round longer by ``t(b + 1) - t(b)``; an idle
  engine adds its whole step. That delay hits every request in the group for
  as long as ours lives: the *externality*. This is what makes speculation
  lose at high batch and what charges traffic splitting across engines on one
  GPU for the batching it gives up.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from policies.adaptive_settings import AdaptiveSettings
from policies.base import LearnedAcceptance, ModeLoad


@dataclass(frozen=True, slots=True)
class ModeCost:
    mode: str
    total_s: float
    own_s: float
    externality_s: float
    tokens_per_step: float


def tokens_per_step(load: ModeLoad, learned: LearnedAcceptance | None,
                    settings: AdaptiveSettings) -> float:
    """Prior blended with measurements, weighted by how much evidence there is."""
    prior = settings.prior_for(load.method)
    if prior is None:
        return 1.0
    cap = 1.0 + max(load.num_speculative_tokens, 1)
    prior_tau = min(prior.mean_accepted_length, cap)
    if learned is not None and learned.drafts > 0:
        w = learned.drafts / (learned.drafts + settings.prior_draft_steps)
        return max(1.0, w * learned.mean_accepted_length + (1 - w) * prior_tau)
    if load.mean_accepted_length is not None:  # the engine's live window, any class
        return max(1.0, 0.5 * load.mean_accepted_length + 0.5 * prior_tau)
    return prior_tau


def step_time(load: ModeLoad, batch: int, settings: AdaptiveSettings,
              plain_scale: float) -> float:
    """Seconds for one step of ``load``'s engine at ``batch`` (0 when idle)."""
    if batch <= 0:
        return 0.0
    measured = _interpolate(load.step_profile, batch)
    if measured is not None:
        return measured
    k = load.num_speculative_tokens if load.method is not None else 0
    prior = settings.prior_for(load.method)
    overhead = prior.draft_overhead if prior is not None else 0.0
    fixed = settings.step_fixed_s * (1.0 + overhead)
    return plain_scale * (fixed + settings.step_per_token_s * batch * (k + 1))


def _interpolate(profile: tuple[tuple[int, float, int], ...], batch: int) -> float | None:
    points = sorted((b, s) for b, s, n in profile if n > 0)
    if not points:
        return None
    if len(points) == 1:
        b0, s0 = points[0]
        return s0 if batch <= b0 else s0 * (1.0 + 0.02 * (batch - b0))  # gentle growth
    for (b0, s0), (b1, s1) in itertools.pairwise(points):
        if batch <= b1:
            if batch <= b0:
                return s0
            return s0 + (s1 - s0) * (batch - b0) / (b1 - b0)
    (b0, s0), (b1, s1) = points[-2], points[-1]
    slope = max((s1 - s0) / (b1 - b0), 0.0)
    return s1 + slope * (batch - b1)


def plain_scale(modes: Mapping[str, ModeLoad], settings: AdaptiveSettings) -> float:
    """How much slower than the prior the plain engine measures (1.0 if unmeasured).

    Applied to the priors of modes without measurements, so that a new mode on
    a slow machine is not compared against GPU-speed guesses.
    """
    for load in modes.values():
        if load.method is None and load.step_profile:
            b, s, _ = min(load.step_profile, key=lambda p: p[0])
            prior = settings.step_fixed_s + settings.step_per_token_s * b
            return s / prior if prior > 0 else 1.0
    return 1.0


def estimate(candidate: ModeLoad, modes: Mapping[str, ModeLoad], prompt_tokens: int,
             output_tokens: float, learned: LearnedAcceptance | None,
             settings: AdaptiveSettings, scale: float) -> ModeCost:
    tau = tokens_per_step(candidate, learned, settings)
    group = [m for m in modes.values() if m.gpu_group == candidate.gpu_group and m.up]
    others = sum(step_time(m, m.batch_size, settings, scale)
                 for m in group if m.mode != candidate.mode)
    before = step_time(candidate, candidate.batch_size, settings, scale)
    after = step_time(candidate, candidate.batch_size + 1, settings, scale)
    round_s = others + after
    prior = settings.prior_for(candidate.method)
    prefill = prompt_tokens * settings.prefill_per_token_s * scale * (
        1.0 + (prior.prefill_overhead if prior is not None else 0.0))
    # The first token comes from prefill; any further token needs a whole step,
    # however many tokens that step could have accepted.
    rounds = max((output_tokens - 1.0) / tau, 1.0) if output_tokens > 1.0 else 0.0
    own = prefill + rounds * round_s
    waiting_requests = sum(m.batch_size for m in group)
    externality = settings.externality_weight * waiting_requests * (after - before) * rounds
    return ModeCost(candidate.mode, own + externality, own, externality, tau)
