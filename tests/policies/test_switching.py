"""When the adaptive policy moves a busy device to another mode, and when it explores."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import ClassLearned, DecisionInput, DecisionKind, LearnedAcceptance
from policies.step_model import Calibration, _prior_step
from tests.policies.test_adaptive import K, case, learned, load

# DFlash ahead of EAGLE-3 (the held mode) by about 8% on this request.
CLOSE = {"dflash": learned(4.0), "eagle3": learned(3.7), "ngram": learned(1.0)}
# DFlash well ahead (about 50%): beyond any margin, not by enough to pay for the drain
# of long answers at once.
BEYOND = {"dflash": learned(5.0), "eagle3": learned(3.2), "ngram": learned(1.0)}
# DFlash far ahead (about 140%): the held engine is more than twice as slow.
FAR = {"dflash": learned(5.0), "eagle3": learned(2.0), "ngram": learned(1.0)}


def held_eagle3(acceptance: Mapping[str, LearnedAcceptance], now: float = 100.0,
                **kw: object) -> DecisionInput:
    """EAGLE-3 won last and holds the (shared) device's batch: long answers in flight."""
    inputs = case(modes={"eagle3": load("eagle3", batch=8)}, acceptance=acceptance,
                  previous_mode="eagle3", last_won={"eagle3": 1.0},
                  in_flight={"eagle3": {"default": 8}},
                  classes={"default": ClassLearned(acceptance, 2000.0)}, **kw)  # type: ignore[arg-type]
    return replace(inputs, now=now)


def lead(inputs: DecisionInput) -> float:
    scores = AdaptivePolicy(AdaptiveSettings(hysteresis=0.0)).decide(inputs).scores
    return scores["eagle3"] / scores["dflash"] - 1.0


def test_every_decision_names_the_cost_leader_even_when_it_holds() -> None:
    decision = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2)).decide(held_eagle3(CLOSE))
    assert (decision.mode, decision.leader) == ("eagle3", "dflash")
    assert decision.reason.startswith("hold:eagle3")
    assert decision.kind is DecisionKind.HOLD and decision.margin is not None
    assert 0.0 < decision.margin < 0.2


def test_a_lead_that_lasts_needs_only_the_floor_margin() -> None:
    """A fixed margin holds a mode that is 8% slower for as long as the load stays;
    a lead that has lasted switch_lead_s only has to beat hysteresis_floor."""
    inputs = held_eagle3(CLOSE)
    assert 0.03 < lead(inputs) < 0.1
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, hysteresis_floor=0.03,
                                             switch_lead_s=10.0, drain_payback=0.0))
    assert policy.decide(inputs).mode == "eagle3"                       # a new lead
    fresh = replace(inputs, leading_since={"dflash": 99.0})             # led 1 s
    assert policy.decide(fresh).mode == "eagle3"
    lasting = replace(inputs, leading_since={"dflash": 80.0})           # led 20 s
    assert policy.decide(lasting).mode == "dflash"
    # switch_lead_s 0: the floor at once, for a lead that is recorded at all.
    at_once = AdaptivePolicy(AdaptiveSettings(switch_lead_s=0.0, drain_payback=0.0))
    assert at_once.decide(fresh).mode == "dflash"
    assert at_once.decide(inputs).mode == "eagle3"


def test_a_switch_waits_until_the_lead_has_paid_for_the_drain() -> None:
    """Beyond the margin, traffic still stays while the held engine has long answers
    in flight, until lead x time led exceeds the drain (the old engine keeps stepping
    beside the new one until its last request ends)."""
    inputs = held_eagle3(BEYOND)
    assert lead(inputs) > 0.3
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, drain_payback=1.0))
    held = policy.decide(inputs)
    assert (held.mode, held.leader) == ("eagle3", "dflash")
    assert policy.decide(replace(inputs, leading_since={"dflash": 99.9})).mode == "eagle3"
    assert policy.decide(replace(inputs, leading_since={"dflash": 0.0})).mode == "dflash"
    # Nothing to drain (the held engine is empty): the lead wins at once.
    empty = replace(inputs, modes={**inputs.modes, "eagle3": load("eagle3"),
                                   "dflash": load("dflash", batch=8)},
                    in_flight={"dflash": {"default": 8}})
    assert policy.decide(empty).mode == "dflash"
    # drain_payback 0: only the margin counts.
    assert AdaptivePolicy(AdaptiveSettings(drain_payback=0.0)).decide(inputs).mode == "dflash"


def test_a_lead_far_beyond_the_drain_switches_from_its_first_instant() -> None:
    """A burst arrives at once: the lead it gives has lasted no time, but the requests
    that give it are here and will be served for at least a request's life. Held until
    the clock ran, each wave's first request, alone on an idle device, would take a
    drafter and hold the rest of the wave there behind plain decoding."""
    inputs = held_eagle3(FAR)
    assert lead(inputs) > 1.0
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, drain_payback=1.0))
    assert policy.decide(inputs).mode == "dflash"
    assert policy.decide(replace(inputs, leading_since={"dflash": 100.0})).mode == "dflash"


def test_short_answers_drain_fast_and_switch_sooner() -> None:
    """The drain is priced from the longest class in flight on the held engine."""
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, drain_payback=1.0))
    led_2s = {"dflash": 98.0}
    long_answers = replace(held_eagle3(BEYOND), leading_since=led_2s)
    short = ClassLearned(BEYOND, 20.0)
    short_answers = replace(long_answers, classes={"default": short})
    assert policy.decide(long_answers).mode == "eagle3"
    assert policy.decide(short_answers).mode == "dflash"


def test_an_unmeasured_mode_is_not_explored_beside_a_busy_engine_of_its_group() -> None:
    """An idle engine beside a busy one adds its whole step to every round of the busy
    one's batch: on one device that is exploration's price; on its own device, free."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.03,
                                             unmeasured_exploration_boost=10.0))
    known = {"dflash": learned(1.0), "ngram": learned(2.5)}              # eagle3 unmeasured
    busy = case(modes={"ngram": load("ngram", batch=15)}, acceptance=known,
                explore_draw=0.2, in_flight={"ngram": {"default": 15}})
    assert policy.decide(busy).mode == "ngram"
    apart = replace(busy, modes={m: load(m, group="core0" if m in ("standard", "eagle3")
                                         else "core1", batch=15 if m == "ngram" else 0)
                                 for m in K})
    explored = policy.decide(apart)
    assert (explored.mode, explored.reason) == ("eagle3", "explore:eagle3")


def test_routine_exploration_only_where_the_whole_group_is_idle() -> None:
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.5))
    measured = {"dflash": learned(5.0), "eagle3": learned(3.0, requests=0.5),
                "ngram": learned(1.2, requests=50)}
    idle = case(acceptance=measured, explore_draw=0.0)
    assert policy.decide(idle).reason.startswith("explore:")
    busy = replace(idle, modes={**idle.modes, "dflash": load("dflash", batch=6)},
                   in_flight={"dflash": {"default": 6}})
    assert policy.decide(busy).reason.startswith(("cost:", "hold:"))


def test_a_fresh_estimate_is_not_explored_again() -> None:
    """Exploration keeps estimates fresh; one with plenty of recent evidence gains
    nothing from another request, which costs the most in a short burst."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.5,
                                             exploration_fresh_steps=200.0))
    stale = case(acceptance={"dflash": learned(5.0), "eagle3": learned(3.0, requests=2),
                             "ngram": learned(1.2, requests=50)}, explore_draw=0.0)
    assert policy.decide(stale).mode == "eagle3"            # 100 steps: stale
    fresh = replace(stale, acceptance={**stale.acceptance,
                                       "eagle3": learned(3.0, requests=10)})   # 500 steps
    assert policy.decide(fresh).reason.startswith("cost:")


def test_a_drain_hold_ends_although_two_leaders_trade_the_lead() -> None:
    """Plain decoding and n-gram level with each other, both far ahead of the held
    EAGLE-3: whichever leads has led only a moment, but the switch has waited for as
    long as the group has deferred it, and that is the lead the drain is paid from
    (a clock restarted per leader held EAGLE-3 20-30% behind for whole cells of the
    real CPU sweep)."""
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, drain_payback=1.0))
    fresh_leader = replace(held_eagle3(BEYOND), leading_since={"dflash": 99.9})
    held = policy.decide(fresh_leader)
    assert (held.mode, held.deferred) == ("eagle3", True)
    deferred_long = replace(fresh_leader, deferred_since={"eagle3": 0.0})
    assert policy.decide(deferred_long).mode == "dflash"
    # Deferred since a moment ago: the hold stands.
    assert policy.decide(replace(fresh_leader, deferred_since={"eagle3": 99.9})).mode == "eagle3"


def test_a_hold_within_the_margin_defers_nothing() -> None:
    decision = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2)).decide(held_eagle3(CLOSE))
    assert (decision.mode, decision.kind, decision.deferred) == ("eagle3", DecisionKind.HOLD,
                                                                 False)


def test_a_group_whose_switch_moves_its_requests_waits_until_the_lead_pays_the_moves() -> None:
    """An exclusive CPU group moves its requests to the new engine on a switch: none is
    left draining, but each is prefilled again there, prompt and answer so far. A fresh
    lead that those prefills outweigh waits; one that has lasted, or a switch with
    nothing to move, goes at once. (No speculation margin: the lead stands on steps as
    if timed on traffic; see the test after.)"""
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, drain_payback=1.0,
                                             speculation_margin=0.0))
    fresh_leader = replace(held_eagle3(BEYOND), leading_since={"dflash": 99.9})
    group = fresh_leader.modes["eagle3"].gpu_group
    moving = replace(fresh_leader, moving_groups=frozenset({group}))
    # Prefills as a GPU's: cheap beside the lead.
    assert (policy.decide(moving).mode, policy.decide(moving).kind) == ("dflash",
                                                                        DecisionKind.COST)
    # As a CPU measures them (a second each): eight moves outweigh a fresh lead.
    cpu = {m: replace(load_, prefill_s=1.0) for m, load_ in moving.modes.items()}
    slow = replace(moving, modes=cpu)
    held = policy.decide(slow)
    assert (held.mode, held.deferred) == ("eagle3", True)
    assert policy.decide(replace(slow, leading_since={"dflash": 0.0})).mode == "dflash"
    nothing_to_move = replace(slow, modes={**cpu, "eagle3": replace(cpu["eagle3"],
                                                                   batch_size=0)},
                              in_flight={})
    assert policy.decide(nothing_to_move).mode == "dflash"


def test_a_busy_moving_group_switches_on_a_lead_beyond_the_whole_hysteresis() -> None:
    """A switch of an exclusive CPU group moves every request in flight. A lead below
    the whole hysteresis holds however long it has lasted (the floor is for groups
    that move nothing), and a lead read from steps the challenger's engine has not
    timed on traffic at the group's batch needs the speculation margin on top: the
    warm-up's or an extrapolated step often reads a lead the batch does not give, and
    the group would move back (each move prefills its requests again)."""
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.1, hysteresis_floor=0.03,
                                             speculation_margin=0.15, drain_payback=0.0))
    settings = AdaptiveSettings()

    def held(dflash_tau: float, timed: bool, moving: bool = True) -> DecisionInput:
        inputs = held_eagle3({"dflash": learned(dflash_tau), "eagle3": learned(3.7),
                              "ngram": learned(1.0)}, leading_since={"dflash": 0.0})
        dflash = inputs.modes["dflash"]
        if timed:   # timed on traffic at the prior's own steps: the same price
            dflash = replace(dflash, step_profile=tuple(
                (b, _prior_step(dflash, b, settings, Calibration()), 100) for b in (8, 12)))
        group = frozenset({dflash.gpu_group}) if moving else frozenset()
        return replace(inputs, modes={**inputs.modes, "dflash": dflash},
                       moving_groups=group)

    assert 0.03 < lead(held(4.2, timed=True)) < 0.1
    assert policy.decide(held(4.2, timed=True, moving=False)).mode == "dflash"
    assert policy.decide(held(4.2, timed=True)).kind is DecisionKind.HOLD
    assert 0.1 < lead(held(4.6, timed=True)) < 0.25
    assert policy.decide(held(4.6, timed=True)).mode == "dflash"
    assert policy.decide(held(4.6, timed=False)).kind is DecisionKind.HOLD
    assert policy.decide(held(5.6, timed=False)).mode == "dflash"
    # Plain decoding leading needs the whole hysteresis only: it is what the others'
    # steps are priced against, and a switch to it risks no guess at acceptance.
    weak = held_eagle3({"dflash": learned(1.0), "eagle3": learned(1.6), "ngram": learned(1.0)},
                       leading_since={"standard": 0.0})
    weak = replace(weak, moving_groups=frozenset({weak.modes["eagle3"].gpu_group}))
    assert policy.decide(weak).mode == "standard"
