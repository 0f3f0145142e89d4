"""The adaptive policy: pick the mode with the lowest expected cost (see ``cost.py``),
with conservative priors at cold start, bounded exploration and hysteresis."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from policies.adaptive_settings import AdaptiveSettings
from policies.base import (
    ClassLearned,
    Decision,
    DecisionInput,
    DecisionKind,
    ModeLoad,
    NoModeAvailable,
    Policy,
    group_busy,
)
from policies.cost import (
    ClassShare,
    ModeCost,
    Pricing,
    TauPrior,
    rounds,
)
from policies.step_model import timed_on_traffic


@dataclass(slots=True)
class _Group:
    """One device group as a decision sees it."""

    batch: int                                     # its engines' batches + this request
    flight: list[tuple[ModeLoad, str, int]]        # (engine, workload class, requests)
    shares: list[ClassShare] = field(default_factory=list)


class AdaptivePolicy(Policy):
    name = "adaptive"

    def __init__(self, settings: AdaptiveSettings | None = None) -> None:
        self.settings = settings or AdaptiveSettings()

    @property
    def batch_memory_s(self) -> float:
        return self.settings.batch_memory_s

    @property
    def mix_memory_s(self) -> float:
        return self.settings.mix_memory_s

    @property
    def card_discount(self) -> float:
        return self.settings.cold_start_discount

    def follow(self, settings: AdaptiveSettings) -> None:
        self.settings = settings

    def decide(self, inputs: DecisionInput) -> Decision:
        s = self.settings
        candidates = self._candidates(inputs)
        if not candidates:
            raise NoModeAvailable("no enabled engine is up")
        output = self._expected_output(inputs)
        pricing = Pricing(inputs.modes, s, pooled=inputs.mode_acceptance)
        # Each candidate's marginal cost ranks them without ``consolidate``; with it, only
        # an exploration draw weighs it, which most decisions never get: priced on demand.
        priced: list[list[ModeCost]] = []

        def marginal() -> list[ModeCost]:
            if not priced:
                priced.append(self._ranked(inputs, (
                    pricing.estimate(load, inputs.prompt_tokens, output,
                                     inputs.acceptance.get(load.mode)) for load in candidates)))
            return priced[0]

        groups = self._groups(inputs, output, pricing)
        costs = self._ranked(inputs, (self._consolidated(inputs, load, groups, pricing)
                                      for load in candidates)) if s.consolidate else marginal()
        costs = self._burst_guard(inputs, costs, groups)

        best = costs[0]
        held = self._incumbent(inputs, best.mode)
        previous = next((c for c in costs if c.mode == held and c is not best), None)
        deferred = False
        if previous is not None and not self._within_margin(inputs, previous, best):
            deferred = self._defer(inputs, previous, best, groups, pricing)
            if not deferred:
                previous = None              # no hold: the best is served
        explored = self._explore(inputs, candidates, marginal, costs, groups, output,
                                 pricing, (previous or best).mode)
        if explored is not None:
            return Decision(explored, DecisionKind.EXPLORE, scores=_scores(marginal()),
                            leader=best.mode)

        scores = _scores(costs)
        if previous is not None:
            behind = previous.total_s / best.total_s - 1.0 if best.total_s > 0 else 0.0
            return Decision(previous.mode, DecisionKind.HOLD, margin=behind, scores=scores,
                            leader=best.mode, deferred=deferred)

        # Below 0 where ``_burst_guard`` served plain decoding over an untimed leader.
        margin = max(costs[1].total_s / best.total_s - 1.0, 0.0) if len(costs) > 1 and \
            best.total_s > 0 else 0.0
        return Decision(best.mode, DecisionKind.COST, margin=margin, scores=scores,
                        leader=best.mode)

    def _burst_guard(self, inputs: DecisionInput, costs: list[ModeCost],
                     groups: Mapping[str, _Group]) -> list[ModeCost]:
        """A burst commits its whole batch at once, as the switch of a busy group does
        (``_move_margin``): a speculative leader whose engine has not timed the burst's
        batch on traffic serves it only if it leads the cheapest mode that has (or plain
        decoding) by ``speculation_margin`` on top. Otherwise, when its step turns out
        slower than priced, the group switches back and moves the burst."""
        if inputs.arriving <= 0 or len(costs) < 2:
            return costs
        s = self.settings
        best = inputs.modes[costs[0].mode]
        batch = groups[best.gpu_group].batch
        samples = s.step_traffic_samples
        if best.method is None or timed_on_traffic(best, batch, samples):
            return costs
        for alt in costs[1:]:
            load = inputs.modes[alt.mode]
            if load.method is None or timed_on_traffic(load, groups[load.gpu_group].batch,
                                                       samples):
                if alt.total_s <= costs[0].total_s * (1.0 + s.speculation_margin):
                    return [alt, *(c for c in costs if c is not alt)]
                return costs
        return costs

    def _within_margin(self, inputs: DecisionInput, held: ModeCost, best: ModeCost) -> bool:
        """Is ``held`` close enough to ``best`` for hysteresis to keep it?

        Where nothing runs in the held mode's device group, a switch leaves no engine
        draining and moves no request: only ``hysteresis_floor`` holds it, against
        noise. At one request at a time, the whole margin would hold each request of a
        short phase on the mode its first went to."""
        held_load = inputs.modes[held.mode]
        margin = self._margin(inputs, best.mode)
        if not group_busy(inputs.modes, held_load.gpu_group):
            margin = min(margin, self.settings.hysteresis_floor)
        elif held_load.gpu_group in inputs.moving_groups:
            margin = max(margin, self._move_margin(inputs, inputs.modes[best.mode]))
        return held.total_s <= best.total_s * (1.0 + margin)

    def _move_margin(self, inputs: DecisionInput, best: ModeLoad) -> float:
        """The lead a switch of a busy moving group needs: the whole ``hysteresis``,
        however long the challenger has led, and ``speculation_margin`` on top while a
        speculative challenger's engine has not timed the group's batch on traffic.

        Such a switch moves every request in flight, and a drafter's lead read from a
        step the warm-up timed, or extrapolated, is often not there once the batch runs
        on it: the group then moves back, and each move prefills its requests again.
        Plain decoding's steps are what the others' are priced against, and a switch
        to it never costs the speed of a wrong guess at acceptance."""
        s = self.settings
        if best.method is None:
            return s.hysteresis
        batch = 1 + inputs.arriving + sum(m.batch_size for m in inputs.modes.values()
                                          if m.gpu_group == best.gpu_group)
        timed = timed_on_traffic(best, batch, s.step_traffic_samples)
        return s.hysteresis + (0.0 if timed else s.speculation_margin)

    def _defer(self, inputs: DecisionInput, held: ModeCost, best: ModeCost,
               groups: Mapping[str, _Group], pricing: Pricing) -> bool:
        """Keep ``held`` although ``best`` leads it beyond the margin?

        While the held engine still has requests and the lead has not yet paid for
        the drain: once traffic moves, the old engine keeps stepping beside the new
        one until its last request ends, and every round pays its step on top. A lead
        that has lasted ``T`` is taken to last about as long again, so it pays once
        ``lead * T`` exceeds that drain. ``T`` runs from when ``best`` took the lead or
        from the group's first deferral of this switch, whichever is earlier.

        In a device group whose switch moves its requests along (``moving_groups``) no
        engine is left draining, but every request moved is prefilled again on the new
        engine, its prompt and its answer so far: the lead pays for those prefills
        instead (``_moves_s``). A burst of long prompts whose classes lead by turns
        would otherwise carry the whole batch from engine to engine."""
        s = self.settings
        if s.drain_payback <= 0 or best.total_s <= 0:
            return False
        if inputs.modes[held.mode].gpu_group in inputs.moving_groups:
            drain = self._moves_s(inputs, inputs.modes[best.mode], pricing)
        else:
            drain = self._drain_s(inputs, inputs.modes[held.mode], groups, pricing)
        if drain <= 0:
            return False
        starts = [t for t in (inputs.leading_since.get(best.mode),
                              inputs.deferred_since.get(held.mode)) if t is not None]
        led = max(inputs.now - min(starts), 0.0) if starts else 0.0
        # However briefly it has led, the requests that give the lead are already
        # here: it lasts at least as long as a request of the group's mix takes on
        # ``best`` (a burst of arrivals leads from its first instant).
        led = max(led, best.own_s)
        lead = held.total_s / best.total_s - 1.0
        return lead * led < s.drain_payback * drain

    def _moves_s(self, inputs: DecisionInput, best: ModeLoad, pricing: Pricing) -> float:
        """Device time the switch to ``best`` spends moving its group's requests: one
        prefill on ``best`` per request in flight on another engine of the group, at
        this request's prompt length, plus its answer so far (half the expected
        answer, at most the prompt again)."""
        moved = sum(n for mode, flight in inputs.in_flight.items()
                    if mode != best.mode and mode in inputs.modes
                    and inputs.modes[mode].gpu_group == best.gpu_group
                    for n in flight.values() if n > 0)
        if moved <= 0:
            return 0.0
        prompt = max(inputs.prompt_tokens, 1)
        so_far = min(self._expected_output(inputs) / 2.0, float(prompt))
        return moved * pricing.prefill(best, inputs.prompt_tokens) * (1.0 + so_far / prompt)

    def _drain_s(self, inputs: DecisionInput, held: ModeLoad, groups: Mapping[str, _Group],
                 pricing: Pricing) -> float:
        """Device time lost to ``held`` draining beside the new mode: its step at the
        smallest batch (what a round pays while it holds anyone) for as many rounds
        as its longest class in flight still needs, taken as half an answer."""
        if held.batch_size <= 0:
            return 0.0
        flight = inputs.in_flight.get(held.mode, {})
        longest = 0.0
        for cls, n in flight.items():
            if n <= 0:
                continue
            known = self._learned(inputs, cls)
            tau = pricing.tokens_per_step(held, known.acceptance.get(held.mode),
                                          held.batch_size)
            longest = max(longest, rounds(known.expected_output_tokens or 0.0, tau))
        return pricing.step(held, 1) * longest / 2.0

    def _margin(self, inputs: DecisionInput, leader: str) -> float:
        """How much cheaper than the held mode ``leader`` must be to take over.

        A fixed margin cannot tell noise from a lasting lead: set high, it holds a mode
        that is 8% slower for as long as the load stays put; set low, near-equal modes
        trade the device back and forth, and each switch leaves the old engine draining
        beside the new one. So the margin falls, from ``hysteresis`` to
        ``hysteresis_floor``, with how long the leader has led without a break."""
        s = self.settings
        floor = min(s.hysteresis_floor, s.hysteresis)
        since = inputs.leading_since.get(leader)
        if since is None or s.switch_lead_s <= 0:
            return s.hysteresis if since is None else floor
        led = min(max(inputs.now - since, 0.0) / s.switch_lead_s, 1.0)
        return s.hysteresis - (s.hysteresis - floor) * led

    def _candidates(self, inputs: DecisionInput) -> list[ModeLoad]:
        enabled = self.settings.enabled_modes
        return [load for name, load in inputs.modes.items()
                if load.up and load.has_room and (enabled is None or name in enabled)]

    def _expected_output(self, inputs: DecisionInput) -> float:
        if inputs.max_tokens is not None:
            return float(inputs.max_tokens)
        if inputs.expected_output_tokens is not None:
            return inputs.expected_output_tokens
        return float(self.settings.default_output_tokens)

    def _ranked(self, inputs: DecisionInput, costs: Iterable[ModeCost]) -> list[ModeCost]:
        """Cheapest first, a speculative mode's cost raised by its speculation margin
        (``_speculation_margin``; what it is compared on everywhere after: hysteresis,
        holds, scores): its estimate rests on a predicted acceptance and a step profile
        extrapolated from other prompts, plain decoding's on neither, and a wrong guess
        costs the user speed that not speculating never loses. On a tie, plain
        decoding: same cost, less machinery."""
        if self.settings.speculation_margin > 0:
            costs = (c if inputs.modes[c.mode].method is None
                     else replace(c, total_s=c.total_s
                                  * (1.0 + self._speculation_margin(inputs, c.mode)))
                     for c in costs)
        return sorted(costs, key=lambda c: (c.total_s, inputs.modes[c.mode].method is not None,
                                            c.mode))

    def _speculation_margin(self, inputs: DecisionInput, mode: str) -> float:
        """``speculation_margin`` for ``mode``, falling as the request's class measures
        it: the margin stands for an acceptance predicted from other requests, and
        the class's own verification steps replace the prediction. At
        ``speculation_margin_steps`` of them it has halved; evidence measured on other
        kinds of text (``transferred``) does not count."""
        s = self.settings
        known = inputs.acceptance.get(mode)
        evidence = 0.0 if known is None or known.transferred else known.drafts
        half = s.speculation_margin_steps
        if half <= 0:
            return s.speculation_margin
        return s.speculation_margin * half / (half + evidence)

    def _groups(self, inputs: DecisionInput, output: float,
                pricing: Pricing) -> dict[str, _Group]:
        """Each device group's batch (this request and the requests arriving with it
        included) and the mix of classes it would serve: this request first, then the
        classes in flight there."""
        s = self.settings
        groups: dict[str, _Group] = {}
        for load in inputs.modes.values():
            group = groups.get(load.gpu_group)
            if group is None:
                group = groups[load.gpu_group] = _Group(1 + inputs.arriving, [])
            group.batch += load.batch_size  # full or not, its batch runs on the device
            if s.group_mix:
                group.flight.extend((load, cls, n) for cls, n in
                                    inputs.in_flight.get(load.mode, {}).items() if n > 0)
        own = ClassShare(1.0, output, inputs.acceptance)
        for name, group in groups.items():
            # A group that held a batch a moment ago will again: closed-loop waves.
            group.batch = max(group.batch, round(inputs.recent_batch.get(name, 0.0)))
            group.shares = [own, *self._mix(inputs, group.flight, pricing)]
        return groups

    def _mix(self, inputs: DecisionInput, flight: list[tuple[ModeLoad, str, int]],
             pricing: Pricing) -> list[ClassShare]:
        """The classes in flight, weighted by how often each arrives rather than by how
        many are in flight: a class with long answers, or slow where it runs, is over-
        represented in flight. In a steady state each class finishes (and, in a closed
        loop, arrives) at ``n / rounds`` per round on the mode it runs on. Weights are
        scaled to sum to the requests in flight, this request counting as one."""
        if not flight:
            return []
        s = self.settings
        classes = inputs.classes
        learned: dict[str, ClassLearned] = {}
        rates: dict[str, float] = {}
        total = 0
        engine: ModeLoad | None = None
        prior: TauPrior | None = None
        for load, cls, n in flight:          # grouped by engine: each engine's prior once
            if load is not engine:
                engine, prior = load, pricing.tau_prior(load, load.batch_size)
            known = learned.get(cls)
            if known is None:
                known = classes.get(cls)     # ``_learned``'s common case, without the call
                if known is None or known.expected_output_tokens is None:
                    known = self._learned(inputs, cls)
                learned[cls] = known
            length = known.expected_output_tokens
            assert length is not None
            tau = 1.0 if prior is None else prior.tau(known.acceptance.get(load.mode))
            rate = n / max(rounds(length, tau), 1.0)
            rates[cls] = rates.get(cls, 0.0) + rate
            total += n
        norm = total / sum(rates.values())
        weights = {cls: rate * norm for cls, rate in rates.items()}
        recent = inputs.recent_arrivals
        total_recent = sum(recent.values())
        if s.mix_prior_requests > 0 and total_recent > 0:
            for cls, arrived in recent.items():
                if arrived > 0:
                    weights[cls] = weights.get(cls, 0.0) + \
                        s.mix_prior_requests * arrived / total_recent
                    if cls not in learned:
                        learned[cls] = self._learned(inputs, cls)
        return [ClassShare(w, learned[cls].expected_output_tokens or 0.0,
                           learned[cls].acceptance) for cls, w in sorted(weights.items())]

    def _learned(self, inputs: DecisionInput, cls: str) -> ClassLearned:
        """What is known about a class in flight, its expected length always set."""
        known = inputs.classes.get(cls)
        if known is None and cls == inputs.workload_class:
            known = ClassLearned(inputs.acceptance, inputs.expected_output_tokens)
        if known is None:
            known = ClassLearned()
        if known.expected_output_tokens is None:
            known = ClassLearned(known.acceptance, float(self.settings.default_output_tokens))
        return known

    def _consolidated(self, inputs: DecisionInput, load: ModeLoad,
                      groups: Mapping[str, _Group], pricing: Pricing,
                      optimistic: bool = False) -> ModeCost:
        """``load``'s cost as if its device group's whole batch (plus this request)
        ran on it, serving the mix of classes in flight there: the state traffic
        converges to once new requests follow (docs/policy.md, "The cost of each mode")."""
        group = groups[load.gpu_group]
        return pricing.estimate_mix(load, group.batch, group.shares, inputs.prompt_tokens,
                                    optimistic)

    def _incumbent(self, inputs: DecisionInput, best: str) -> str | None:
        """What hysteresis holds. While the best mode's device group is busy, the
        group's latest winner: the group moves as one, and a switch, once made, is
        kept (holding whichever engine still holds the most would send the next
        requests back, and the device stays split). While it is idle there is no
        batch to split, and each class keeps its own last winner."""
        previous = inputs.previous_mode
        if not self.settings.group_mix:
            return previous
        group = inputs.modes[best].gpu_group
        if not group_busy(inputs.modes, group):
            return previous
        won = [(inputs.last_won[m.mode], m.mode) for m in inputs.modes.values()
               if m.gpu_group == group and m.mode in inputs.last_won]
        return max(won)[1] if won else previous

    def _explore(self, inputs: DecisionInput, candidates: list[ModeLoad],
                 marginal: Callable[[], list[ModeCost]], costs: list[ModeCost],
                 groups: Mapping[str, _Group], output: float, pricing: Pricing,
                 serving: str) -> str | None:
        """Serve a mode other than ``serving`` (the best, or the mode hysteresis
        holds), so that every mode keeps a fresh estimate: first a speculative mode
        never measured on this class, then (with ``exploration_share``) the stale
        one estimated cheapest within bounds (a leader that hysteresis holds back
        included: a fresh measurement is what confirms or ends its lead); only on an
        idle device group. A mode whose acceptance is replayed on every answer is
        measured without it. Why these limits: docs/policy.md, "Exploration"."""
        s = self.settings
        if len(candidates) < 2:
            return None
        draw = inputs.explore_draw
        boosted = min(1.0, s.exploration_share * s.unmeasured_exploration_boost)
        if draw >= max(boosted, s.exploration_share):
            return None                      # the common case: no exploration draw
        # A group's batch counts this request: 1 means nothing runs there.
        idle = {name for name, group in groups.items() if group.batch == 1}
        if draw < boosted:
            limit = costs[0].total_s * s.exploration_max_cost_ratio
            unmeasured = [
                load for load in candidates
                if load.method is not None and not load.replayed and load.batch_size == 0
                and load.mode != costs[0].mode
                and self._evidence(inputs, load.mode) < s.prior_draft_steps]
            for load in sorted(unmeasured, key=lambda m: (self._evidence(inputs, m.mode),
                                                          m.mode)):
                # A mode its card prices on this kind is seen at its card, not at the
                # method's published prior: the card is what is known of it here.
                optimistic = not self._carded(inputs, load.mode)
                view = self._consolidated(inputs, load, groups, pricing, optimistic) \
                    if s.consolidate else pricing.estimate(
                        load, inputs.prompt_tokens, output, inputs.acceptance.get(load.mode),
                        optimistic)
                if view.total_s > self._explore_limit(inputs, load.mode, costs[0], limit):
                    continue
                if load.gpu_group in idle:
                    return load.mode
                if load.gpu_group in inputs.moving_groups:
                    continue      # its engines take turns: it would stall the group's batch
                # In a busy group, only if what it costs the group's batch is bounded too.
                price = pricing.estimate(load, inputs.prompt_tokens, output,
                                         inputs.acceptance.get(load.mode), optimistic)
                if price.total_s <= marginal()[0].total_s * s.exploration_max_cost_ratio:
                    return load.mode
        if draw >= s.exploration_share or not idle:   # only an idle group explores here
            return None
        best = marginal()[0]
        eligible = [c for c in marginal()
                    if c.mode != serving and inputs.modes[c.mode].method is not None
                    and not inputs.modes[c.mode].replayed
                    and inputs.modes[c.mode].gpu_group in idle
                    and self._evidence(inputs, c.mode) < s.exploration_fresh_steps
                    and c.total_s <= best.total_s * s.exploration_max_cost_ratio]
        if not eligible:
            return None

        return min(eligible, key=lambda c: c.total_s).mode

    def _explore_limit(self, inputs: DecisionInput, mode: str, best: ModeCost,
                       limit: float) -> float:
        """The most a first measurement of ``mode`` may cost: ``limit``, or where only
        its drafter card prices it on this kind, within ``speculation_margin`` of the
        best. A card is its drafter's acceptance on held-out prompts of the kind: it may
        be wrong by that margin, not by much more, and measuring every carded drafter
        on every kind would spend short phases on modes their cards put far behind."""
        if not self._carded(inputs, mode):
            return limit
        return min(limit, best.total_s * (1.0 + self.settings.speculation_margin))

    @staticmethod
    def _carded(inputs: DecisionInput, mode: str) -> bool:
        """Whether only ``mode``'s drafter card prices it on this request's kind."""
        prior = inputs.mode_acceptance.get(mode)
        return prior is not None and prior.carded

    @staticmethod
    def _evidence(inputs: DecisionInput, mode: str) -> float:
        """Verification steps measured on this class, or on its kind of text."""
        learned = inputs.acceptance.get(mode)
        own = learned.drafts if learned is not None else 0.0
        return max(own, inputs.kind_evidence.get(mode, 0.0))


def _scores(costs: list[ModeCost]) -> Mapping[str, float]:
    return MappingProxyType({c.mode: round(c.total_s, 6) for c in costs})
