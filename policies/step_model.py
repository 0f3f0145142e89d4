"""How long one engine step takes: measured per engine (its decode step profile by
batch), else the calibrated prior (``AdaptiveSettings.step_*``), the prior's shape
extrapolating a profile beyond the batches it measured."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from policies.adaptive_settings import AdaptiveSettings
from policies.base import ModeLoad


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


def _profile_step(load: ModeLoad, batch: float, settings: AdaptiveSettings,
                  cal: Calibration) -> float:
    if batch <= 0:
        return 0.0
    prior = _prior_step(load, batch, settings, cal)
    points = _points(load.step_profile)
    if load.k_schedule and points:
        # A K table's ranges are different steps (verifying, and drafting, more or
        # fewer tokens): measured points of the batch's own K only, the prior's shape
        # carrying a point of another K over where its own has none. A few points
        # and table rows, K-table modes only: no cache needed.
        k = load.draft_length(batch)
        points = tuple(p for p in points if load.draft_length(p[0]) == k) or points
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


def verified_step(batch: float, drafted: float, settings: AdaptiveSettings,
                  cal: Calibration) -> float:
    """The calibrated prior's step of ``batch`` sequences verifying ``1 + drafted``
    tokens each, without a drafter: what the target model's forward pass over those
    tokens takes on this hardware (``Pricing._by_tokens``)."""
    fixed, grows = _prior_parts(batch, drafted, settings)
    return cal.scale * fixed + cal.slope * grows


def timed_on_traffic(load: ModeLoad, batch: float, samples: int) -> bool:
    """Whether ``load``'s profile measured ``batch`` on served traffic: the buckets at
    or around it (interpolated between) each timed at least ``samples`` steps, more
    than an engine's warm-up gives a bucket. Batches known from the warm-up alone, or
    beyond the measured range, are not."""
    if batch <= 0 or samples <= 0:
        return False
    points = sorted((float(b), n) for b, _, n in load.step_profile if n > 0)
    for (ba, na), (bb, nb) in itertools.pairwise(points):
        if ba <= batch <= bb:
            return (na >= samples or batch == bb) and (nb >= samples or batch == ba)
    return any(b == batch and n >= samples for b, n in points)


def drafting_excess(load: ModeLoad, batch: float, settings: AdaptiveSettings,
                    cal: Calibration, samples: int) -> float:
    """How much ``load``'s step exceeds the target model's pass over its verified tokens
    (``verified_step``) where traffic timed it (``timed_on_traffic``): its drafter and
    the verification's own work, at least 1. Taken at its largest such batch that
    drafts as many tokens as ``batch`` does (a K table's ranges are other steps); 1
    where there is none."""
    k = load.draft_length(batch)
    timed = [(float(b), s) for b, s, n in load.step_profile
             if samples > 0 and n >= samples and load.draft_length(b) == k]
    if not timed:
        return 1.0
    at, measured = max(timed)
    target = verified_step(at, min(load.step_drafted or float(k), float(k)), settings, cal)
    return max(measured / target, 1.0) if target > 0 else 1.0


def _prior_parts(batch: float, k: float, settings: AdaptiveSettings) -> tuple[float, float]:
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
    GPU's, nearly flat while reading the weights dominates; on a CPU every verified
    token costs far more than it assumes, and a drafter measured only alone would read
    far too cheap at a large batch (docs/policy.md, "Steps the profile has not
    measured"). Both 1.0 while unmeasured; with plain decoding
    measured at one batch only, both are its ratio to the prior there."""

    scale: float = 1.0
    slope: float = 1.0


def plain_bounded(modes: Mapping[str, ModeLoad]) -> Mapping[str, ModeLoad]:
    """``modes`` with plain decoding's measured steps held at or below what each
    speculative engine of its device group measured at the same batch.

    A speculative step runs the same target model over more tokens, and a drafter
    besides, on the same device: it never takes less than a plain step of that batch.
    A plain step measured above one is a measurement taken under contention (a
    warm-up timed while something else held the CPU), and plain decoding, priced
    from it, would never win a request and so never be timed again. Only batches
    inside a speculative engine's measured range bound it; its own steps, measured
    or not, are left as they are."""
    plain = next((load for load in modes.values()
                  if load.method is None and load.step_profile), None)
    if plain is None:
        return modes
    bounds = [_points(load.step_profile) for load in modes.values()
              if load.method is not None and load.gpu_group == plain.gpu_group
              and load.step_profile]
    bounded = []
    changed = False
    for batch, seconds, samples in plain.step_profile:
        limit = min((bound for points in bounds
                     if (bound := _measured_at(points, float(batch))) is not None),
                    default=seconds)
        changed = changed or limit < seconds
        bounded.append((batch, min(seconds, limit), samples))
    if not changed:
        return modes
    return {**modes, plain.mode: replace(plain, step_profile=tuple(bounded))}


def _measured_at(points: tuple[tuple[float, float], ...], batch: float) -> float | None:
    """The step interpolated between measured points at ``batch``; None outside them."""
    if not points or not points[0][0] <= batch <= points[-1][0]:
        return None
    for (ba, sa), (bb, sb) in itertools.pairwise(points):
        if ba <= batch <= bb:
            return sa + (sb - sa) * (batch - ba) / (bb - ba) if bb > ba else min(sa, sb)
    return points[0][1]


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
