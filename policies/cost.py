"""Expected cost of serving one request on one mode, from live and learned signals.

The model, in the terms of the serving loop:

* each engine advances all its requests by one *step*; a step at batch ``b``
  takes ``t(b)`` — measured per engine (decode steps only), else a prior
  ``fixed + per_token * b * (K + 1) `` with the drafting overhead on top
  (``step_model.py``);
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from policies.adaptive_settings import AdaptiveSettings
from policies.base import LearnedAcceptance, ModeLoad
from policies.step_model import (
    Calibration,
    calibrate,
    drafting_excess,
    plain_bounded,
    step_time,
    timed_on_traffic,
    verified_step,
)


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
    published priors are GSM8K figures for large models, far above what small
    drafters accept; blended with the full prior, one request's evidence of a weak
    drafter reads high enough to take it for better than plain decoding
    (docs/policy.md).

    Once the mode has evidence on any class (``pooled``: its acceptance over every
    class), that is what its drafter accepts on this hardware, and the discounted
    prior is blended with it by the same weight before it meets the class's own
    evidence: a class the mode has seldom served (or whose evidence has faded) reads
    near the mode's measured level, not near a published figure for another model —
    higher than the discounted prior for a strong drafter, lower for the embedded
    CPU ones (docs/policy.md, "pooled prior"). A level measured on other kinds of
    text (``transferred``) counts only where it is below the discounted prior, and so
    does the engine's live window then (what it served just now is of that other text).

    At ``batch``, an engine with a K table drafts the K its table gives: none at
    K = 0, and never more than ``1 + K`` tokens a step (what was learned at a
    longer K is capped, not rescaled)."""
    prior = tau_prior(load, settings, optimistic, batch, pooled)
    return 1.0 if prior is None else prior.tau(learned)


@dataclass(frozen=True, slots=True)
class TauPrior:
    """``tokens_per_step`` of one mode at one batch up to what a class has learned: worked
    out once and applied to every class of a device group's mix."""

    cap: float                 # 1 + K: never more tokens a step
    prior_tau: float           # the prior, discounted and blended with ``pooled``
    unlearned: float           # a class without evidence on the mode
    prior_draft_steps: float
    steps_per_request: float   # ``replayed_steps_per_request`` for a replayed mode, else 0

    def tau(self, learned: LearnedAcceptance | None) -> float:
        if learned is not None and learned.drafts > 0:
            steps = evidence_steps(learned, self.steps_per_request)
            w = steps / (steps + self.prior_draft_steps)
            return min(self.cap, max(1.0, w * learned.mean_accepted_length
                                     + (1 - w) * self.prior_tau))
        return self.unlearned


def tau_prior(load: ModeLoad, settings: AdaptiveSettings, optimistic: bool = False,
              batch: float | None = None,
              pooled: LearnedAcceptance | None = None) -> TauPrior | None:
    """None where a step yields one token whatever is learned (plain decoding, or K = 0
    at ``batch``)."""
    prior = settings.prior_for(load.method)
    if prior is None:
        return None
    k = load.num_speculative_tokens if batch is None else load.draft_length(batch)
    if load.k_schedule and k == 0:
        return None
    cap = 1.0 + max(k, 1)
    prior_tau = min(prior.mean_accepted_length, cap)
    per_request = settings.replayed_steps_per_request if load.replayed else 0.0
    if not optimistic:
        prior_tau = 1.0 + (prior_tau - 1.0) * (1.0 - settings.cold_start_discount)
        if pooled is not None and pooled.drafts > 0 and not (
                pooled.transferred and pooled.mean_accepted_length > prior_tau):
            steps = evidence_steps(pooled, per_request)
            w = steps / (steps + settings.prior_draft_steps)
            prior_tau = min(cap, w * pooled.mean_accepted_length + (1 - w) * prior_tau)
    unlearned = prior_tau
    if load.mean_accepted_length is not None:  # the engine's live window, any class
        unlearned = min(cap, max(1.0, 0.5 * load.mean_accepted_length + 0.5 * prior_tau))
        if pooled is not None and pooled.transferred:
            # What the engine just served is of another kind of text: like the level
            # transferred from it, it counts only downwards.
            unlearned = min(unlearned, prior_tau)
    return TauPrior(cap, prior_tau, unlearned, settings.prior_draft_steps, per_request)


def evidence_steps(learned: LearnedAcceptance, per_request: float) -> float:
    """How many verification steps ``learned`` weighs against a prior: its steps, at
    most ``per_request`` for each request measured (0: no bound). The steps of one
    answer are not independent samples: an answer that repeats its prompt accepts
    almost every draft, the next one few, so evidence grows with answers, not with
    their length. Bounded for a mode replayed on every answer (prompt lookup), whose
    answers come whichever engine served them; a trained drafter's come only from
    serving it, and bounding them would call for more exploration."""
    if per_request <= 0 or learned.requests <= 0:
        return learned.drafts
    return min(learned.drafts, learned.requests * per_request)


def drafted_per_step(learned: LearnedAcceptance | None,
                     pooled: LearnedAcceptance | None = None) -> float | None:
    """Draft tokens per step a mode drafts on a class: as learned for it, else over
    every class (``pooled``), else None (as the engine's profile measured)."""
    for known in (learned, pooled):
        if known is not None and known.draft_tokens_per_step is not None:
            return known.draft_tokens_per_step
    return None


class ClassShare(NamedTuple):
    """One workload class's part of a device group's mix. A named tuple, not a frozen
    dataclass: a decision builds one per class of the mix, and a tuple builds faster."""

    weight: float                        # requests of the class (this one counts on its own)
    output_tokens: float                 # expected completion length
    learned: Mapping[str, LearnedAcceptance]   # mode -> acceptance on the class


class Pricing:
    """The cost model over one decision's engines (``modes``, one load per mode) and what
    each mode accepts over every class (``pooled``: see ``tokens_per_step``).

    The calibration and plain decoding's prefill are worked out once, and each step
    time and tau prior once per (mode, batch, ...): every candidate's estimate prices
    its peers' steps too, some thirty step times a decision of which a handful differ."""

    __slots__ = ("_groups", "_priors", "_steps", "cal", "modes", "plain", "pooled",
                 "settings")

    def __init__(self, modes: Mapping[str, ModeLoad], settings: AdaptiveSettings,
                 cal: Calibration | None = None,
                 pooled: Mapping[str, LearnedAcceptance] | None = None) -> None:
        # Plain decoding's steps as priced (``plain_bounded``): the calibration and
        # every estimate that prices its engine read the bounded profile.
        modes = plain_bounded(modes)
        self.modes = modes
        self.settings = settings
        self.cal = calibrate(modes, settings) if cal is None else cal
        self.plain = plain_prefill(modes, settings)
        self.pooled: Mapping[str, LearnedAcceptance] = pooled or {}
        self._steps: dict[tuple[str, float, float | None], float] = {}
        self._priors: dict[tuple[str, float | None, bool], TauPrior | None] = {}
        self._groups: dict[str, list[ModeLoad]] = {}

    def step(self, load: ModeLoad, batch: float, drafted: float | None = None) -> float:
        """``step_time``, memoised."""
        key = (load.mode, batch, drafted)
        seconds = self._steps.get(key)
        if seconds is None:
            priced = self.modes.get(load.mode)
            if priced is not None and priced.step_profile is not load.step_profile \
                    and load.method is None:
                load = replace(load, step_profile=priced.step_profile)
            seconds = step_time(load, batch, self.settings, self.cal, drafted)
            if load.method is not None and not timed_on_traffic(
                    load, batch, self.settings.step_traffic_samples):
                seconds = max(seconds, self._by_tokens(load, batch, drafted))
            self._steps[key] = seconds
        return seconds

    def _by_tokens(self, load: ModeLoad, batch: float, drafted: float | None) -> float:
        """What a speculative step at ``batch`` costs at least: what the calibrated
        prior (fitted to plain decoding's steps, ``Calibration``) gives a step of
        ``batch`` sequences over ``batch * (1 + d)`` tokens, ``d`` the draft tokens per
        sequence it verifies (``drafted``, else as its engine measured, else its K at
        ``batch``), at most that K, with no drafting overhead: the target model's
        share of the step, the drafter's left out.

        Plain decoding's steps are measured on the traffic it serves, while a
        speculative engine's batches it has not served are known from its warm-up,
        short prompts where verified tokens are nearly free, and n-gram's slope per
        draft token from the small batches it ran: both read a large batch's verified
        tokens as nearly free. 0 until plain decoding has measured its steps.

        Scaled by what the engine's steps timed on traffic measured beyond that pass
        (``drafting_excess``: its drafter's share), so that a drafter is not priced at
        the bare pass at a batch it has not served.

        Not applied where the engine's own buckets around ``batch`` have timed
        traffic (``timed_on_traffic``): there its measurement stands, and the bound,
        fitted to plain decoding's steps of long conversations at large batches,
        would overprice a few sequences verifying many drafts each."""
        if batch <= 0 or not any(m.method is None and m.step_profile
                                 for m in self._group(load.gpu_group)):
            return 0.0
        k = float(load.draft_length(batch))
        d = drafted if drafted is not None else load.step_drafted or k
        excess = drafting_excess(load, batch, self.settings, self.cal,
                                 self.settings.step_traffic_samples)
        return verified_step(batch, min(max(d, 0.0), k), self.settings, self.cal) * excess

    def tau_prior(self, load: ModeLoad, batch: float | None,
                  optimistic: bool = False) -> TauPrior | None:
        """``tau_prior``, memoised, with the mode's pooled acceptance."""
        key = (load.mode, batch, optimistic)
        if key in self._priors:
            return self._priors[key]
        prior = self._priors[key] = tau_prior(load, self.settings, optimistic, batch,
                                              self.pooled.get(load.mode))
        return prior

    def tokens_per_step(self, load: ModeLoad, learned: LearnedAcceptance | None,
                        batch: float | None, optimistic: bool = False) -> float:
        prior = self.tau_prior(load, batch, optimistic)
        return 1.0 if prior is None else prior.tau(learned)

    def estimate(self, candidate: ModeLoad, prompt_tokens: int, output_tokens: float,
                 learned: LearnedAcceptance | None, optimistic: bool = False) -> ModeCost:
        """The marginal cost: this request joins ``candidate`` beside the others as they
        are."""
        settings = self.settings
        tau = self.tokens_per_step(candidate, learned, candidate.batch_size + 1, optimistic)
        group = self._group(candidate.gpu_group)
        others = sum(self.step(m, m.batch_size) for m in group if m.mode != candidate.mode)
        before = self.step(candidate, candidate.batch_size)
        after = self.step(candidate, candidate.batch_size + 1)
        drafted = drafted_per_step(learned, self.pooled.get(candidate.mode))
        if drafted is not None:      # the sequence that joins drafts as its class does
            after += self.step(candidate, 1, drafted) - self.step(candidate, 1)
        n = rounds(output_tokens, tau)
        own = _prefill(candidate, prompt_tokens, settings, self.cal.scale, self.plain) + \
            n * (others + after)
        waiting_requests = sum(m.batch_size for m in group)
        delay = settings.externality_weight * waiting_requests * (after - before) * n
        return ModeCost(candidate.mode, own + delay, own, delay, tau)

    def prefill(self, load: ModeLoad, prompt_tokens: int) -> float:
        """Device seconds to prefill a request on ``load`` (``_prefill``)."""
        return _prefill(load, prompt_tokens, self.settings, self.cal.scale, self.plain)

    def _group(self, name: str) -> list[ModeLoad]:
        """The engines of device group ``name`` that are up."""
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = [m for m in self.modes.values()
                                          if m.gpu_group == name and m.up]
        return group

    def estimate_mix(self, candidate: ModeLoad, group_batch: int,
                     shares: Sequence[ClassShare], prompt_tokens: int,
                     optimistic: bool = False) -> ModeCost:
        """The mean cost of a request of the group's mix (``shares``, this request's
        first) if the whole group (``group_batch``, this request included) ran on
        ``candidate``.

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
        mode, settings = candidate.mode, self.settings
        pooled = self.pooled.get(mode)
        total = weight = 0.0
        tau = 1.0
        drafted = drafted_rounds = 0.0   # draft tokens per step of the mix, by rounds
        if shares:                       # this request's class, ``optimistic`` applies
            first = shares[0]
            learned = first.learned.get(mode)
            tau = self.tokens_per_step(candidate, learned, group_batch, optimistic)
            n = first.weight * rounds(first.output_tokens, tau)
            total += n
            weight += first.weight
            first_drafted = drafted_per_step(learned, pooled)
            if first_drafted is not None:
                drafted += n * first_drafted
                drafted_rounds += n
        # The hot loop of a decision: every class of the mix, for every candidate. So the
        # part of tau that is the same for every class is worked out once (``TauPrior``),
        # and ``TauPrior.tau``, ``rounds`` and ``drafted_per_step`` are inlined (min and
        # max spelt as the comparisons they make); test_cost pins it to them.
        prior = self.tau_prior(candidate, group_batch)
        cap, prior_tau, unlearned, steps, per_request = (1.0,) * 4 + (0.0,) \
            if prior is None else (prior.cap, prior.prior_tau, prior.unlearned,
                                   prior.prior_draft_steps, prior.steps_per_request)
        pooled_drafted = drafted_per_step(None, pooled)
        for share in shares[1:]:
            learned = share.learned.get(mode)
            if prior is None:
                t = 1.0
            elif learned is not None and learned.drafts > 0:
                evidence = learned.drafts                     # evidence_steps(...)
                if per_request > 0 and learned.requests > 0 and \
                        learned.requests * per_request < evidence:
                    evidence = learned.requests * per_request
                w = evidence / (evidence + steps)
                t = w * learned.mean_accepted_length + (1 - w) * prior_tau
                t = t if t > 1.0 else 1.0                     # max(1.0, t)
                t = t if t < cap else cap                     # min(cap, t)
            else:
                t = unlearned
            output = share.output_tokens
            if output > 1.0:                                  # rounds(output, t)
                r = (output - 1.0) / t
                n = share.weight * (1.0 if 1.0 > r else r)
            else:
                n = share.weight * 0.0
            total += n
            weight += share.weight
            share_drafted = learned.draft_tokens_per_step \
                if learned is not None and learned.draft_tokens_per_step is not None \
                else pooled_drafted
            if share_drafted is not None:
                drafted += n * share_drafted
                drafted_rounds += n
        # The mix's sequences draft as each class does, in proportion to the rounds its
        # requests spend in the batch.
        step = self.step(candidate, group_batch,
                         drafted / drafted_rounds if drafted_rounds > 0 else None)
        prefills = max(group_batch, 1) * _prefill(candidate, prompt_tokens, settings,
                                                  self.cal.scale, self.plain)
        own = prefills + (step * total / weight if weight > 0 else 0.0)
        return ModeCost(candidate.mode, own, own, 0.0, tau)


def estimate(candidate: ModeLoad, modes: Mapping[str, ModeLoad], prompt_tokens: int,
             output_tokens: float, learned: LearnedAcceptance | None,
             settings: AdaptiveSettings, cal: Calibration, optimistic: bool = False,
             pooled: LearnedAcceptance | None = None) -> ModeCost:
    """``Pricing.estimate`` on its own."""
    return Pricing(modes, settings, cal, _pooled(candidate, pooled)).estimate(
        candidate, prompt_tokens, output_tokens, learned, optimistic)


def estimate_mix(candidate: ModeLoad, group_batch: int, shares: Sequence[ClassShare],
                 prompt_tokens: int, settings: AdaptiveSettings, cal: Calibration,
                 optimistic: bool = False,
                 plain: float | None = None,
                 pooled: LearnedAcceptance | None = None) -> ModeCost:
    """``Pricing.estimate_mix`` on its own, plain decoding's prefill given (``plain``)."""
    pricing = Pricing({}, settings, cal, _pooled(candidate, pooled))
    pricing.plain = plain
    return pricing.estimate_mix(candidate, group_batch, shares, prompt_tokens, optimistic)


def _pooled(candidate: ModeLoad, pooled: LearnedAcceptance | None
            ) -> dict[str, LearnedAcceptance]:
    return {} if pooled is None else {candidate.mode: pooled}


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
    taken off, averaged. Every mode is priced from this (``_prefill``), so that all
    prefills are priced on the same basis rather than each at the mean of the prompts
    its engine happened to serve, or one at a measured mean and another at this
    request's prompt length: either would let the prompts seen, not the modes, decide
    where the group goes."""
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
    """Device seconds to prefill a request on ``candidate``: plain decoding's figure
    (``plain``: ``plain_prefill``, measured over the traffic served) with the method's
    prior drafter overhead; else (``plain`` not given: the module's ``estimate``
    helpers) as its own engine measures them; else the prior, per prompt token.

    A speculative engine's own figure is a mean over the prompts it happened to serve,
    which are not plain decoding's: an engine that has prefilled only the warm-up's
    short prompt reads several times cheaper than one that served long conversations,
    and at a batch that difference alone would decide where the group goes. Plain
    decoding runs the same target model over the same prompt, so its figure is the
    common basis (docs/policy.md, "The cost of each mode")."""
    prior = settings.prior_for(candidate.method)
    overhead = 1.0 + (prior.prefill_overhead if prior is not None else 0.0)
    if plain is not None:
        return plain * overhead
    if candidate.prefill_s is not None:
        return candidate.prefill_s
    return prompt_tokens * settings.prefill_per_token_s * scale * overhead
