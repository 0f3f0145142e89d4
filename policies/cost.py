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
  GPU for the batching it gives up;
* the consolidated view instead prices a mode as if the group's whole batch ran
  on it (``estimate_mix``), serving the mix of classes in flight there (or this
  request's class alone): the state traffic converges to once every new request
  follows the decision. No externality: in that steady state everyone's rounds
  are ``t(b)``, and charging what one more request adds would favour flat step
  curves over fast ones.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
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
                    settings: AdaptiveSettings, optimistic: bool = False,
                    batch: float | None = None,
                    pooled: LearnedAcceptance | None = None) -> float:
    """Prior blended with measurements, weighted by how much evidence there is.

    The prior is the method's, discounted by ``cold_start_discount`` unless
    ``optimistic``: deciding where a batch goes on an unmeasured guess is
    costly when the guess is high (a drafter that accepts little on this class
    slows every request it holds), while exploring on the full prior is how the
    guess gets measured at all. The discount stays while evidence is thin: the
    published priors are GSM8K figures for large models, far above what the
    embedded CPU drafters accept (τ 1.5-1.8); blended with the full prior, one
    request's evidence of a drafter at τ 1.45 reads 2.2 instead of 1.7, enough to
    take it for better than plain decoding on the CPU (docs/policy.md).

    Once the mode has evidence on any class (``pooled``: its acceptance over every
    class), that is what its drafter accepts on this hardware, and the discounted
    prior is blended with it by the same weight before it meets the class's own
    evidence: a class the mode has seldom served (or whose evidence has faded) reads
    near the mode's measured level, not near a published figure for another model —
    higher than the discounted prior for a strong drafter, lower for the embedded
    CPU ones (docs/policy.md, "pooled prior"). A level measured on other kinds of
    text (``transferred``) counts only where it is below the discounted prior.

    At ``batch``, an engine with a K table drafts the K its table gives: none at
    K = 0, and never more than ``1 + K`` tokens a step (what was learned at a
    longer K is capped, not rescaled)."""
    prior = settings.prior_for(load.method)
    if prior is None:
        return 1.0
    k = load.num_speculative_tokens if batch is None else load.draft_length(batch)
    if load.k_schedule and k == 0:
        return 1.0
    cap = 1.0 + max(k, 1)
    prior_tau = min(prior.mean_accepted_length, cap)
    if not optimistic:
        prior_tau = 1.0 + (prior_tau - 1.0) * (1.0 - settings.cold_start_discount)
        if pooled is not None and pooled.drafts > 0 and not (
                pooled.transferred and pooled.mean_accepted_length > prior_tau):
            w = pooled.drafts / (pooled.drafts + settings.prior_draft_steps)
            prior_tau = min(cap, w * pooled.mean_accepted_length + (1 - w) * prior_tau)
    if learned is not None and learned.drafts > 0:
        w = learned.drafts / (learned.drafts + settings.prior_draft_steps)
        return min(cap, max(1.0, w * learned.mean_accepted_length + (1 - w) * prior_tau))
    if load.mean_accepted_length is not None:  # the engine's live window, any class
        return min(cap, max(1.0, 0.5 * load.mean_accepted_length + 0.5 * prior_tau))
    return prior_tau


def step_time(load: ModeLoad, batch: float, settings: AdaptiveSettings,
              cal: Calibration, drafted: float | None = None) -> float:
    """Seconds for one step of ``load``'s engine at ``batch`` (0 when idle), its
    sequences drafting ``drafted`` tokens a step (None: as the profile measured).

    Measured where the profile covers ``batch`` (interpolated). Outside it, the
    calibrated prior's shape (``_prior_step``) scaled to the nearest measured point:
    it knows that a step verifying ``K + 1`` tokens per sequence grows faster with
    batch than a plain one, which a slope taken from a few low batches cannot know (a
    wide tree measured at batch 1 would otherwise look cheap at batch 128).

    Where the engine measured what a draft token costs (n-gram, whose drafts vary with
    the text), the step is moved from the draft tokens per sequence it was measured at
    to ``drafted`` (at most the K it drafts at ``batch``), never below a third of it."""
    seconds = _profile_step(load, batch, settings, cal)
    if drafted is None or load.draft_token_s <= 0 or seconds <= 0:
        return seconds
    drafted = min(max(drafted, 0.0), float(load.draft_length(batch)))
    return max(seconds + load.draft_token_s * batch * (drafted - load.step_drafted),
               seconds / 3.0)


def drafted_per_step(learned: LearnedAcceptance | None,
                     pooled: LearnedAcceptance | None = None) -> float | None:
    """Draft tokens per step a mode drafts on a class: as learned for it, else over
    every class (``pooled``), else None (as the engine's profile measured)."""
    for known in (learned, pooled):
        if known is not None and known.draft_tokens_per_step is not None:
            return known.draft_tokens_per_step
    return None


def _profile_step(load: ModeLoad, batch: float, settings: AdaptiveSettings,
                  cal: Calibration) -> float:
    if batch <= 0:
        return 0.0
    prior = _prior_step(load, batch, settings, cal)
    points = _points(load.step_profile)
    if not points:
        return prior
    (b0, s0), (b1, s1) = points[0], points[-1]
    if batch < b0:
        return min(s0, s0 * prior / _prior_step(load, b0, settings, cal))
    if batch > b1:
        # Scaled to the measured point, and at least what the batch adds on the
        # calibrated prior: an engine that measures cheaper than the prior at b1 (its
        # drafting below the prior's overhead) must not scale the growth down with it.
        at_b1 = _prior_step(load, b1, settings, cal)
        shaped = max(s1 * prior / at_b1, s1 + prior - at_b1)
        if len(points) == 1:
            return shaped
        return max(shaped, s1 + _slope(list(points[-3:])) * (batch - b1))
    for (ba, sa), (bb, sb) in itertools.pairwise(points):
        if ba <= batch <= bb:
            return sa + (sb - sa) * (batch - ba) / (bb - ba)
    return s1


@functools.lru_cache(maxsize=256)
def _points(profile: tuple[tuple[int, float, int], ...]) -> tuple[tuple[float, float], ...]:
    # Called for every mode several times per decision, with a profile that changes
    # only a few times a second.
    return tuple(sorted((float(b), s) for b, s, n in profile if n > 0))


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (never negative): two neighbouring buckets alone are
    noisy enough to double an extrapolation."""
    mb = sum(b for b, _ in points) / len(points)
    ms = sum(s for _, s in points) / len(points)
    var = sum((b - mb) ** 2 for b, _ in points)
    return max(sum((b - mb) * (s - ms) for b, s in points) / var, 0.0) if var > 0 else 0.0


def _prior_step(load: ModeLoad, batch: float, settings: AdaptiveSettings,
                cal: Calibration) -> float:
    """The prior's step, its two parts calibrated on plain decoding's measurements
    (``Calibration``): the fixed part (with the method's drafting overhead) and what
    grows with the batch, per sequence and per verified token beyond the knee."""
    prior = settings.prior_for(load.method)
    overhead = prior.draft_overhead if prior is not None else 0.0
    fixed, grows = _prior_parts(batch, load.draft_length(batch), settings)
    return cal.scale * fixed * (1.0 + overhead) + cal.slope * grows


def _prior_parts(batch: float, k: int, settings: AdaptiveSettings) -> tuple[float, float]:
    """The prior's fixed seconds, and its seconds that grow with the batch at draft
    length ``k``. Below the knee a step is bound by reading the weights: verified
    tokens are free."""
    tokens = max(batch * (k + 1) - settings.step_knee_tokens, 0.0)
    return settings.step_fixed_s, settings.step_per_seq_s * batch + \
        settings.step_per_token_s * tokens


@dataclass(frozen=True, slots=True)
class Calibration:
    """How plain decoding's measured steps compare with the prior's two parts: its
    fixed part (``scale``) and the part that grows with the batch (``slope``).

    Applied to the prior of every mode, so that a mode without measurements is not
    compared against GPU-speed guesses on a slow machine, and so that a profile is
    extrapolated beyond its measurements at this hardware's growth. The prior is a
    GPU's, nearly flat while reading the weights dominates; on the 2-core CPU every
    verified token costs about eight times what it assumes, and a drafter measured
    only alone read three times too cheap at batch 16 (docs/policy.md, "Steps the
    profile has not measured"). Both 1.0 while unmeasured; with plain decoding
    measured at one batch only, both are its ratio to the prior there."""

    scale: float = 1.0
    slope: float = 1.0


def calibrate(modes: Mapping[str, ModeLoad], settings: AdaptiveSettings) -> Calibration:
    """Fit plain decoding's measured profile as ``scale * fixed + slope * grows``
    (least squares over its buckets; ``_prior_parts``)."""
    for load in modes.values():
        if load.method is None and load.step_profile:
            return _fit(_points(load.step_profile), settings)
    return Calibration()


def _fit(points: tuple[tuple[float, float], ...], settings: AdaptiveSettings) -> Calibration:
    parts = [(*_prior_parts(b, 0, settings), s) for b, s in points]
    f0, g0, s0 = parts[0]
    single = s0 / (f0 + g0) if f0 + g0 > 0 else 1.0
    # Solve s = scale * f + slope * g in least squares (f is the same at every batch,
    # so the slope is the one of s on g, and scale * f the intercept).
    if len({g for _, g, _ in parts}) < 2 or f0 <= 0:
        return Calibration(single, single)
    slope = _slope([(g, s) for _, g, s in parts])
    n = len(parts)
    scale = (sum(s for _, _, s in parts) - slope * sum(g for _, g, _ in parts)) / n / f0
    if scale <= 0:
        return Calibration(single, single)
    return Calibration(scale, slope)


def estimate(candidate: ModeLoad, modes: Mapping[str, ModeLoad], prompt_tokens: int,
             output_tokens: float, learned: LearnedAcceptance | None,
             settings: AdaptiveSettings, cal: Calibration, optimistic: bool = False,
             pooled: LearnedAcceptance | None = None) -> ModeCost:
    """The marginal cost: this request joins ``candidate`` beside the others as they are
    (``pooled``: see ``tokens_per_step``)."""
    tau = tokens_per_step(candidate, learned, settings, optimistic,
                          batch=candidate.batch_size + 1, pooled=pooled)
    group = [m for m in modes.values() if m.gpu_group == candidate.gpu_group and m.up]
    others = sum(step_time(m, m.batch_size, settings, cal)
                 for m in group if m.mode != candidate.mode)
    before = step_time(candidate, candidate.batch_size, settings, cal)
    after = step_time(candidate, candidate.batch_size + 1, settings, cal)
    drafted = drafted_per_step(learned, pooled)
    if drafted is not None:      # the sequence that joins drafts as its class does
        after += step_time(candidate, 1, settings, cal, drafted) - \
            step_time(candidate, 1, settings, cal)
    n = rounds(output_tokens, tau)
    own = _prefill(candidate, prompt_tokens, settings, cal.scale,
                   plain_prefill(modes, settings)) + \
        n * (others + after)
    waiting_requests = sum(m.batch_size for m in group)
    delay = settings.externality_weight * waiting_requests * (after - before) * n
    return ModeCost(candidate.mode, own + delay, own, delay, tau)


@dataclass(frozen=True, slots=True)
class ClassShare:
    """One workload class's part of a device group's mix."""

    weight: float                        # requests of the class (this one counts on its own)
    output_tokens: float                 # expected completion length
    learned: Mapping[str, LearnedAcceptance]   # mode -> acceptance on the class


def estimate_mix(candidate: ModeLoad, group_batch: int, shares: Sequence[ClassShare],
                 prompt_tokens: int, settings: AdaptiveSettings, cal: Calibration,
                 optimistic: bool = False,
                 plain: float | None = None,
                 pooled: LearnedAcceptance | None = None) -> ModeCost:
    """The mean cost of a request of the group's mix (``shares``, this request's first)
    if the whole group (``group_batch``, this request included) ran on ``candidate``.

    Engines sharing a device time-slice it, so serving each class on the mode best
    for it alone keeps several engines busy and every round costs the sum of their
    steps; what one device should run is the mode that serves the mix best. With a
    single share it is this request's own cost. ``optimistic`` applies to the first
    share (this request's class) only.

    A request waits through the prefills of its batch, not only its own: in that
    steady state each of the ``group_batch`` places turns over about once in a
    request's life, and every prefill stalls the whole batch (taken at this
    request's prompt length; ``plain``: see ``_prefill``). Per request of throughput
    that is the device time ``prefill + rounds * step / batch``, times the batch."""
    total = weight = 0.0
    tau = 1.0
    drafted = drafted_rounds = 0.0   # draft tokens per step of the mix, by rounds
    for i, share in enumerate(shares):
        learned = share.learned.get(candidate.mode)
        t = tokens_per_step(candidate, learned, settings,
                            optimistic and i == 0, batch=group_batch, pooled=pooled)
        if i == 0:
            tau = t
        n = share.weight * rounds(share.output_tokens, t)
        total += n
        weight += share.weight
        share_drafted = drafted_per_step(learned, pooled)
        if share_drafted is not None:
            drafted += n * share_drafted
            drafted_rounds += n
    # The mix's sequences draft as each class does, in proportion to the rounds its
    # requests spend in the batch.
    step = step_time(candidate, group_batch, settings, cal,
                     drafted / drafted_rounds if drafted_rounds > 0 else None)
    prefills = max(group_batch, 1) * _prefill(candidate, prompt_tokens, settings, cal.scale,
                                              plain)
    own = prefills + (step * total / weight if weight > 0 else 0.0)
    return ModeCost(candidate.mode, own, own, 0.0, tau)


def rounds(output_tokens: float, tau: float) -> float:
    """Rounds (steps of the engine) a request of ``output_tokens`` needs at ``tau``."""
    # The first token comes from prefill; any further token needs a whole step,
    # however many tokens that step could have accepted.
    return max((output_tokens - 1.0) / tau, 1.0) if output_tokens > 1.0 else 0.0


def plain_prefill(modes: Mapping[str, ModeLoad],
                  settings: AdaptiveSettings | None = None) -> float | None:
    """Plain decoding's device seconds to prefill a request, as measured: the plain
    engine's own figure; else, given ``settings``, what the measured speculative
    engines imply once their drafters' prefill (each prior's ``prefill_overhead``) is
    taken off, averaged. A mode without a measurement of its own is priced from this,
    so that every mode's prefills are priced on the same basis (the traffic served)
    rather than one at the measured mean and another at this request's prompt length,
    which would let a short or long prompt alone decide where the group goes."""
    for load in modes.values():
        if load.method is None and load.prefill_s is not None:
            return load.prefill_s
    if settings is None:
        return None
    implied = []
    for load in modes.values():
        if load.prefill_s is not None:
            prior = settings.prior_for(load.method)
            implied.append(load.prefill_s /
                           (1.0 + (prior.prefill_overhead if prior is not None else 0.0)))
    return sum(implied) / len(implied) if implied else None


def _prefill(candidate: ModeLoad, prompt_tokens: int, settings: AdaptiveSettings,
             scale: float, plain: float | None = None) -> float:
    """Device seconds to prefill a request on ``candidate``: as its engine measures
    them (over the traffic it serves: ``engines.stats.PrefillCost``); else as the plain
    engine measures them (``plain``), with the method's prior drafter overhead; else
    the prior, per prompt token."""
    if candidate.prefill_s is not None:
        return candidate.prefill_s
    prior = settings.prior_for(candidate.method)
    overhead = 1.0 + (prior.prefill_overhead if prior is not None else 0.0)
    if plain is not None:
        return plain * overhead
    return prompt_tokens * settings.prefill_per_token_s * scale * overhead
