"""The adaptive policy, rule by rule, from tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import (
    ClassLearned,
    Decision,
    DecisionInput,
    DecisionKind,
    LearnedAcceptance,
    ModeLoad,
    NoModeAvailable,
)
from policies.cost import plain_prefill
from policies.step_model import Calibration, plain_bounded, step_time

K = {"standard": 0, "ngram": 4, "eagle3": 3, "dflash": 4}
METHOD = {"standard": None, "ngram": "ngram", "eagle3": "eagle3", "dflash": "dflash"}


def load(mode: str, batch: int = 0, group: str = "0", up: bool = True,
         profile: tuple[tuple[int, float, int], ...] = ()) -> ModeLoad:
    return ModeLoad(mode=mode, up=up, batch_size=batch, speculative=mode != "standard",
                    method=METHOD[mode], num_speculative_tokens=K[mode], gpu_group=group,
                    step_profile=profile)


def learned(tau: float, requests: float = 100.0) -> LearnedAcceptance:
    return LearnedAcceptance(mean_accepted_length=tau, acceptance_rate=(tau - 1) / 4,
                             requests=requests, drafts=requests * 50)


def case(max_tokens: int | None = 400, modes: dict[str, ModeLoad] | None = None,
         acceptance: Mapping[str, LearnedAcceptance] | None = None,
         **kw: object) -> DecisionInput:
    all_modes = {m: load(m) for m in K}
    all_modes.update(modes or {})
    return DecisionInput(modes=all_modes, prompt_tokens=100, max_tokens=max_tokens, now=0.0,
                         acceptance=acceptance or {}, **kw)  # type: ignore[arg-type]


SEPARATE = {m: load(m, group=m) for m in K}          # one device per engine
HIGH_TAU = {"dflash": learned(5.0), "eagle3": learned(3.5), "ngram": learned(1.2)}
LOW_TAU = {"dflash": learned(1.0), "eagle3": learned(1.05), "ngram": learned(1.0)}
MID_TAU = {"dflash": learned(2.0), "eagle3": learned(1.05), "ngram": learned(1.0)}

TABLE = [
    # cold start: priors only; idle engines, long output -> the strongest prior
    ("cold start picks the best prior", case(), "dflash", "cost:dflash"),
    ("unknown length uses the default", case(max_tokens=None), "dflash", "cost:dflash"),
    # short outputs cannot amortise drafting and the drafter's prefill
    ("short output", case(max_tokens=2), "standard", "cost:standard"),
    # measured acceptance decides
    ("high acceptance", case(acceptance=HIGH_TAU), "dflash", "cost:dflash"),
    ("low acceptance", case(acceptance=LOW_TAU), "standard", "cost:standard"),
    ("eagle3 best when dflash accepts nothing",
     case(acceptance={**HIGH_TAU, "dflash": learned(1.0)}), "eagle3", "cost:eagle3"),
    # speculation loses at high batch: the plain engine is busy, spec engines idle;
    # the same acceptance wins when the device is nearly idle
    ("high batch, shared device", case(modes={"standard": load("standard", batch=127)},
                                       acceptance=MID_TAU), "standard", "cost:standard"),
    ("same acceptance, low batch", case(modes={"standard": load("standard", batch=1)},
                                        acceptance=MID_TAU), "dflash", "cost:dflash"),
    # consolidated view: a batch held by plain decoding moves to a drafter that
    # serves the whole batch better (marginal costs would keep it on plain)
    ("busy plain engine, strong drafter", case(modes={"standard": load("standard", batch=64)},
                                               acceptance=HIGH_TAU), "dflash", "cost:dflash"),
    ("high batch on the spec engine itself",
     case(modes={**SEPARATE, "dflash": load("dflash", batch=128, group="dflash"),
                 "eagle3": load("eagle3", batch=128, group="eagle3")},
          acceptance={**HIGH_TAU, "ngram": learned(1.0)}), "standard", "cost:standard"),
    # shared GPU: the batch plain decoding holds would run slower on the drafter
    # as a whole, so the request joins it, though the same drafter wins on a
    # device of its own
    ("batching on a shared device",
     case(modes={"standard": load("standard", batch=12)},
          acceptance={"dflash": learned(2.0), "eagle3": learned(1.0), "ngram": learned(1.0)}),
     "standard", "cost:standard"),
    ("same traffic, separate devices",
     case(modes={**SEPARATE, "standard": load("standard", batch=12, group="standard")},
          acceptance={"dflash": learned(2.0), "eagle3": learned(1.0), "ngram": learned(1.0)}),
     "dflash", "cost:dflash"),
    # measured step times replace the prior: a slow drafter loses
    ("measured slow drafter",
     case(modes={"dflash": load("dflash", profile=((1, 0.5, 50),)),
                 "eagle3": load("eagle3", profile=((1, 0.5, 50),)),
                 "standard": load("standard", profile=((1, 0.01, 50),))},
          acceptance={**HIGH_TAU, "ngram": learned(1.0)}), "standard", "cost:standard"),
    # modes that are down or disabled are never chosen
    ("down mode skipped", case(modes={"dflash": load("dflash", up=False)},
                               acceptance=HIGH_TAU), "eagle3", "cost:eagle3"),
]


@pytest.mark.parametrize("name, inputs, mode, reason", TABLE, ids=[t[0] for t in TABLE])
def test_decide(name: str, inputs: DecisionInput, mode: str, reason: str) -> None:
    decision = AdaptivePolicy().decide(inputs)
    assert decision.mode == mode, (name, dict(decision.scores))
    assert decision.reason.startswith(reason)


def test_reason_gives_the_margin_and_scores_every_candidate() -> None:
    decision = AdaptivePolicy().decide(case(acceptance=LOW_TAU))
    assert decision.reason.startswith("cost:standard +")
    assert decision.reason.endswith("%")
    # The header is derived from typed fields: the runner-up's extra cost is the margin.
    assert decision.kind is DecisionKind.COST and decision.margin is not None
    runner_up = sorted(decision.scores.values())[1]
    assert decision.margin == pytest.approx(runner_up / decision.scores["standard"] - 1.0)
    assert decision.reason == f"cost:standard +{decision.margin:.0%}"
    assert set(decision.scores) == set(K)
    assert min(decision.scores, key=decision.scores.__getitem__) == "standard"


def test_disabled_modes_are_not_candidates() -> None:
    policy = AdaptivePolicy(AdaptiveSettings(enabled_modes=["standard", "ngram"]))
    assert policy.decide(case(acceptance=HIGH_TAU)).mode in {"standard", "ngram"}
    with pytest.raises(NoModeAvailable):
        policy.decide(case(modes={"standard": load("standard", up=False),
                                  "ngram": load("ngram", up=False)}))


def test_exploration_is_bounded_by_share_and_cost() -> None:
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.05))
    base = case(acceptance={"dflash": learned(5.0), "eagle3": learned(3.0, requests=0.5),
                            "ngram": learned(1.2, requests=50)})
    assert policy.decide(replace(base, explore_draw=0.05)).reason.startswith("cost:dflash")
    explored = policy.decide(replace(base, explore_draw=0.01))
    assert (explored.mode, explored.reason) == ("eagle3", "explore:eagle3")
    # A mode estimated far costlier than the best is never explored.
    tight = AdaptivePolicy(AdaptiveSettings(exploration_share=0.05,
                                            exploration_max_cost_ratio=1.01))
    assert tight.decide(replace(base, explore_draw=0.01)).mode == "dflash"
    # Over many draws, exploration stays at its share.
    draws = [i / 1000 for i in range(1000)]
    explored_share = sum(policy.decide(replace(base, explore_draw=d)).reason.startswith(
        "explore") for d in draws) / len(draws)
    assert explored_share == pytest.approx(0.05, abs=0.001)


def test_hysteresis_holds_a_close_previous_winner() -> None:
    """While the held engine serves requests, a close leader (12% ahead) does not take
    over; a far one does. Where nothing runs, a switch drains and moves nothing, and
    only the floor holds: a 15% lead takes the request."""
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2))
    close = case(acceptance={"dflash": learned(4.0), "eagle3": learned(3.8),
                             "ngram": learned(1.0)}, previous_mode="eagle3",
                 modes={"eagle3": load("eagle3", batch=1)})
    held = policy.decide(close)
    assert (held.mode, held.reason.split()[0]) == ("eagle3", "hold:eagle3")
    far = replace(close, acceptance={"dflash": learned(5.5), "eagle3": learned(2.0),
                                     "ngram": learned(1.0)})
    assert policy.decide(far).mode == "dflash"
    assert AdaptivePolicy(AdaptiveSettings(hysteresis=0.0)).decide(close).mode == "dflash"
    idle = replace(close, modes={m: load(m) for m in K})
    assert policy.decide(idle).reason.startswith("cost:dflash")
    floor = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2, hysteresis_floor=0.2))
    assert floor.decide(idle).reason.startswith("hold:eagle3")


def test_priors_fade_as_measurements_arrive() -> None:
    policy = AdaptivePolicy(AdaptiveSettings(speculation_margin=0.0))
    few = case(acceptance={"dflash": learned(1.0, requests=0.5), "eagle3": learned(1.0, 0.5),
                           "ngram": learned(1.0, 0.5)})
    many = case(acceptance={"dflash": learned(1.0, requests=500), "eagle3": learned(1.0, 500),
                            "ngram": learned(1.0, 500)})
    assert policy.decide(few).mode != "standard"
    assert policy.decide(many).mode == "standard"


def test_a_speculative_mode_must_beat_plain_decoding_by_the_speculation_margin() -> None:
    """Where speculation is estimated only a little cheaper, plain decoding serves: the
    estimate rests on a predicted acceptance, and a wrong guess makes the user slower
    than not speculating. Where it is clearly cheaper, it still wins; and held or not,
    a mode inside the margin loses to plain decoding."""
    modes = {"standard": load("standard", batch=8)}
    seen, inside = set(), 0
    for tau in (1.5, 2.0, 2.1, 2.2, 2.3, 2.5, 3.0):
        acceptance = {"dflash": learned(tau), "eagle3": learned(1.0), "ngram": learned(1.0)}
        inputs = case(modes=modes, acceptance=acceptance)
        raw = AdaptivePolicy(AdaptiveSettings(speculation_margin=0.0, exploration_share=0.0,
                                              hysteresis=0.0)).decide(inputs).scores
        lead = raw["standard"] / raw["dflash"] - 1.0
        inside += 0.0 < lead <= 0.15
        for held in (None, "dflash"):
            if held is not None:
                inputs = replace(inputs, previous_mode=held, last_won={held: 1.0})
            chosen = AdaptivePolicy(AdaptiveSettings(exploration_share=0.0, hysteresis=0.0,
                                                     speculation_margin_steps=0.0)
                                    ).decide(inputs).mode
            assert chosen == ("dflash" if lead > 0.15 else "standard"), (tau, lead, held)
            seen.add(chosen)
    assert seen == {"dflash", "standard"} and inside >= 2


def test_the_speculation_margin_falls_as_the_class_measures_the_mode() -> None:
    """The margin stands for an acceptance predicted, not measured: a drafter 10%
    cheaper on a class it has barely served stays off it, and once the class has
    measured it for hundreds of steps it is believed and chosen. Evidence measured on
    other kinds of text keeps the margin whole."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.0, hysteresis=0.0))
    raw = AdaptivePolicy(AdaptiveSettings(speculation_margin=0.0, exploration_share=0.0,
                                          hysteresis=0.0))
    for tau in (1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4):
        def at(steps: float, transferred: bool = False, tau: float = tau) -> DecisionInput:
            known = LearnedAcceptance(tau, (tau - 1) / 4, steps / 50, drafts=steps,
                                      transferred=transferred)
            return case(modes={"standard": load("standard", batch=8)},
                        acceptance={"dflash": known, "eagle3": learned(1.0),
                                    "ngram": learned(1.0)})
        measured = at(2000.0)
        scores = raw.decide(measured).scores
        if not 0.05 < scores["standard"] / scores["dflash"] - 1.0 < 0.12:
            continue
        assert raw.decide(at(20.0)).mode == "dflash"
        assert policy.decide(at(20.0)).mode == "standard"
        assert policy.decide(measured).mode == "dflash"
        assert policy.decide(at(2000.0, transferred=True)).mode == "standard"
        break
    else:
        pytest.fail("no acceptance left dflash 5-12% cheaper than plain decoding")


def test_cold_start_discount_keeps_a_big_batch_off_an_unmeasured_drafter() -> None:
    """Unmeasured, a drafter's prior decides where a whole batch goes: discounted,
    plain decoding keeps it; at face value the batch would move to the drafter."""
    busy = case(modes={"standard": load("standard", batch=20)},
                acceptance={"eagle3": learned(1.0), "ngram": learned(1.0)})
    assert AdaptivePolicy().decide(busy).mode == "standard"
    trusting = AdaptivePolicy(AdaptiveSettings(cold_start_discount=0.0))
    assert trusting.decide(busy).mode == "dflash"
    # Evidence replaces the discounted prior: measured well, the drafter wins.
    measured = replace(busy, acceptance={**busy.acceptance, "dflash": learned(5.0)})
    assert AdaptivePolicy().decide(measured).mode == "dflash"


def test_a_drafter_measured_well_elsewhere_is_not_judged_by_its_discounted_prior() -> None:
    """A class DFlash has barely served (or whose evidence has faded) reads near what
    DFlash measures on every class together: strong there, it wins the class from an
    EAGLE-3 measured at 2.6; weak there, it does not; with nothing measured anywhere,
    the discounted prior keeps the measured EAGLE-3."""
    inputs = case(acceptance={"dflash": LearnedAcceptance(3.0, 0.5, 0.2, 10),
                              "eagle3": learned(2.6), "ngram": learned(1.1)})
    policy = AdaptivePolicy()
    assert policy.decide(inputs).mode == "eagle3"
    level = {"eagle3": learned(2.6), "ngram": learned(1.1)}
    strong = replace(inputs, mode_acceptance={**level, "dflash": learned(3.6, 80)})
    weak = replace(inputs, mode_acceptance={**level, "dflash": learned(1.5, 80)})
    assert policy.decide(strong).mode == "dflash"
    assert policy.decide(weak).mode == "eagle3"


def test_exploration_goes_to_the_stale_mode_closest_to_winning() -> None:
    """With its share of draws, exploration refreshes the stale mode estimated
    cheapest after the best, the one a fresh measurement could make the winner,
    not whichever has served the fewest requests (a mode that loses by far on
    this class would take every exploration and the close runner-up none)."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.05))
    inputs = case(explore_draw=0.01, acceptance={
        "dflash": learned(5.0), "eagle3": learned(3.4, requests=2.0),
        "ngram": learned(1.8, requests=0.5)})
    costs = policy.decide(replace(inputs, explore_draw=0.5)).scores
    assert costs["eagle3"] < costs["ngram"]
    explored = policy.decide(inputs)
    assert (explored.mode, explored.reason) == ("eagle3", "explore:eagle3")


def test_a_leader_held_back_by_hysteresis_is_explored() -> None:
    """When hysteresis keeps the previous winner, the leader it holds back is what a
    fresh measurement could confirm: exploration may serve it (the mode being served
    is the one never explored)."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.05, hysteresis=0.3,
                                             hysteresis_floor=0.3,   # held while idle
                                             speculation_margin_steps=0.0))
    inputs = case(previous_mode="eagle3", acceptance={
        "dflash": learned(3.2, requests=1.0), "eagle3": learned(3.0),
        "ngram": learned(1.2)})
    held = policy.decide(replace(inputs, explore_draw=0.5))
    assert (held.mode, held.leader, held.kind) == ("eagle3", "dflash", DecisionKind.HOLD)
    explored = policy.decide(replace(inputs, explore_draw=0.01))
    assert (explored.mode, explored.kind) == ("dflash", DecisionKind.EXPLORE)


def test_unmeasured_idle_modes_are_explored_first_and_at_a_boosted_share() -> None:
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.03,
                                             unmeasured_exploration_boost=10.0))
    base = case(acceptance={"dflash": learned(5.0), "ngram": learned(1.2)})  # eagle3 unmeasured
    # 0.03 <= draw < 0.3: only an unmeasured mode is explored.
    explored = policy.decide(replace(base, explore_draw=0.2))
    assert (explored.mode, explored.reason) == ("eagle3", "explore:eagle3")
    assert policy.decide(replace(base, explore_draw=0.31)).reason.startswith("cost:dflash")
    # One request in flight measures it: a busy engine is not explored again.
    busy = replace(base, modes={**base.modes, "eagle3": load("eagle3", batch=1)},
                   explore_draw=0.2)
    assert policy.decide(busy).mode == "dflash"
    # Measured, it is back to the ordinary share.
    known = replace(base, acceptance={**base.acceptance, "eagle3": learned(3.0)},
                    explore_draw=0.2)
    assert policy.decide(known).mode == "dflash"
    # exploration_share 0 turns exploration off, boost or not.
    off = AdaptivePolicy(AdaptiveSettings(exploration_share=0.0))
    assert off.decide(replace(base, explore_draw=0.0)).reason.startswith("cost:")


def test_exploration_never_joins_a_busy_engine() -> None:
    """Joining an engine kept busy only by earlier explorations looks cheap at the
    margin, but it keeps the device split for everyone."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.5))
    inputs = case(modes={"eagle3": load("eagle3", batch=2)}, explore_draw=0.0,
                  acceptance={"dflash": learned(5.0), "eagle3": learned(3.0, requests=0.5),
                              "ngram": learned(1.2, requests=50)})
    assert policy.decide(inputs).mode != "eagle3"


def test_a_mode_whose_acceptance_is_replayed_is_never_explored() -> None:
    """Prompt lookup learns from every answer whoever wrote it (the gateway replays
    its proposer): serving a request on it only to measure it wastes the request.
    Unmeasured and idle, it is left alone at any draw; a drafter is not."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.5))
    replayed = {"ngram": replace(load("ngram"), replayed=True)}
    base = case(modes=replayed, acceptance={"dflash": learned(1.5), "eagle3": learned(1.4)})
    for draw in (0.0, 0.1, 0.4):
        assert policy.decide(replace(base, explore_draw=draw)).mode != "ngram"
    plain = case(acceptance={"dflash": learned(1.5), "eagle3": learned(1.4)},
                 explore_draw=0.0)
    assert policy.decide(plain).reason == "explore:ngram"


def test_a_group_whose_engines_take_turns_is_explored_only_when_idle() -> None:
    """On the CPU the engines share every core and take turns (a moving group): an
    unmeasured drafter explored beside the group's busy engine would run beside it,
    both far below half speed. A GPU's group time-slices and may be explored busy."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.03,
                                             unmeasured_exploration_boost=10.0))
    busy = case(modes={"dflash": load("dflash", batch=2)}, explore_draw=0.2,
                acceptance={"dflash": learned(2.0), "ngram": learned(1.2)})
    assert policy.decide(busy).reason == "explore:eagle3"
    turns = replace(busy, moving_groups=frozenset({"0"}))
    assert policy.decide(turns).mode == "dflash"
    idle = replace(turns, modes={**turns.modes, "dflash": load("dflash")})
    assert policy.decide(idle).reason == "explore:eagle3"


def test_measured_profile_is_extrapolated_along_the_prior_shape() -> None:
    """A wide tree measured at batch 1 only must not look cheap at batch 64: beyond
    its measurements the prior's growth (tokens verified per sequence) applies."""
    settings = AdaptiveSettings(step_knee_tokens=100.0)
    wide = replace(load("eagle3", profile=((1, 0.01, 50),)), num_speculative_tokens=59)
    assert step_time(wide, 1, settings, Calibration()) == pytest.approx(0.01)
    cal = Calibration()
    assert step_time(wide, 64, settings, cal) > 5 * step_time(wide, 1, settings, cal)
    # no more than plain decoding's token term.
    flat = load("standard")
    assert step_time(flat, 2, settings, Calibration()) == pytest.approx(
        settings.step_fixed_s, rel=1e-9)
    # Between measured points: interpolation.
    two = load("standard", profile=((1, 0.01, 5), (4, 0.02, 5)))
    assert step_time(two, 2, settings, Calibration()) == pytest.approx(0.01 + 0.01 / 3)


def test_plain_decoding_timed_under_contention_is_priced_no_slower_than_speculation() -> None:
    """A warm-up timed while something else held the CPU left plain decoding's step at
    four times its real cost: priced from it, plain decoding would lose every request
    and never be timed again. A speculative step on the same device does more work,
    so it bounds plain decoding's; a device of its own does not."""
    # Traffic no drafter accepts anything of: plain decoding serves it best.
    acceptance = {"dflash": learned(1.0), "eagle3": learned(1.0), "ngram": learned(1.0)}
    measured = {"eagle3": load("eagle3", profile=((1, 0.045, 50), (4, 0.07, 50))),
                "dflash": load("dflash", profile=((1, 0.06, 50),)),
                "ngram": load("ngram", profile=((1, 0.05, 50),))}
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.0, hysteresis=0.0))
    contended = load("standard", profile=((1, 0.16, 3), (2, 0.15, 3)))
    decision = policy.decide(case(modes={**measured, "standard": contended},
                                  acceptance=acceptance))
    assert decision.mode == "standard", decision.scores
    # Bounded at each batch by the cheapest speculative step measured there.
    bounded = plain_bounded({**measured, "standard": contended})["standard"].step_profile
    assert bounded == ((1, 0.045, 3), (2, pytest.approx(0.045 + 0.025 / 3), 3))
    # Timed right, it is priced as timed.
    right = load("standard", profile=((1, 0.04, 3), (2, 0.045, 3)))
    assert plain_bounded({**measured, "standard": right})["standard"] is right
    # On devices of their own, one engine's steps say nothing of another's.
    apart = {m: replace(engine, gpu_group=m) for m, engine in measured.items()}
    assert policy.decide(case(modes={**apart, "standard": contended},
                              acceptance=acceptance)).mode == "eagle3"


# --- the device group's mix ---------------------------------------------------------

def math_and_chat() -> dict[str, ClassLearned]:
    """Math accepts well on the drafters; chat accepts nothing (tokens per step 1.0)."""
    return {"math": ClassLearned({"dflash": learned(5.0), "eagle3": learned(3.5),
                                  "ngram": learned(1.0)}, 300.0, 50.0),
            "chat": ClassLearned({"dflash": learned(1.0), "eagle3": learned(1.0),
                                  "ngram": learned(1.0)}, 300.0, 50.0)}


def test_a_request_joins_the_mode_that_serves_its_groups_mix_best() -> None:
    """30 chat requests on plain decoding: a math request priced on its class alone goes
    to DFlash (and splits the device); priced on the group's mix, where DFlash would serve
    the 30 chat requests with a slower step and no gain, it stays with plain decoding."""
    classes = math_and_chat()
    inputs = case(modes={"standard": load("standard", batch=30)}, max_tokens=None,
                  acceptance=classes["math"].acceptance, workload_class="math",
                  expected_output_tokens=300.0, in_flight={"standard": {"chat": 30}},
                  classes=classes)
    assert AdaptivePolicy().decide(inputs).mode == "standard"
    alone = AdaptivePolicy(AdaptiveSettings(group_mix=False))
    assert alone.decide(inputs).mode == "dflash"


def test_a_mix_that_drafts_well_takes_a_low_acceptance_request_along() -> None:
    classes = math_and_chat()
    inputs = case(modes={"dflash": load("dflash", batch=30)}, max_tokens=None,
                  acceptance=classes["chat"].acceptance, workload_class="chat",
                  expected_output_tokens=300.0, in_flight={"dflash": {"math": 30}},
                  classes=classes)
    decision = AdaptivePolicy().decide(inputs)
    assert decision.mode == "dflash"
    assert decision.reason.startswith("cost:dflash +")
    assert AdaptivePolicy(AdaptiveSettings(group_mix=False)).decide(inputs).mode == "standard"


def test_only_the_requests_own_device_group_counts() -> None:
    """The chat batch runs on another device: the math request's group is idle."""
    classes = math_and_chat()
    modes = {**SEPARATE, "standard": load("standard", batch=30, group="standard")}
    inputs = case(modes=modes, max_tokens=None, acceptance=classes["math"].acceptance,
                  workload_class="math", expected_output_tokens=300.0,
                  in_flight={"standard": {"chat": 30}}, classes=classes)
    assert AdaptivePolicy().decide(inputs).mode == "dflash"


def test_without_requests_in_flight_the_mix_is_the_request_alone() -> None:
    """An idle device has no batch to split: the recent mix of finished requests (the
    prior that steadies a busy group's mix) is not used, and decisions are per class."""
    classes = math_and_chat()
    policy, alone = AdaptivePolicy(), AdaptivePolicy(AdaptiveSettings(group_mix=False))
    for name, inputs, _, _ in TABLE:
        with_classes = replace(inputs, classes=classes)
        assert policy.decide(with_classes) == alone.decide(inputs), name


def test_the_recent_mix_steadies_a_small_busy_group() -> None:
    """One chat request in flight and a math request arriving: the two alone say DFlash
    (math gains a lot); the recent mix (mostly chat arrived over the last seconds) says
    the next arrivals are chat, which gain nothing on a drafter: plain decoding. A
    weight of 0 ignores the mix."""
    classes = math_and_chat()
    inputs = case(modes={"standard": load("standard", batch=1)}, max_tokens=None,
                  acceptance=classes["math"].acceptance, workload_class="math",
                  expected_output_tokens=300.0, in_flight={"standard": {"chat": 1}},
                  classes=classes, recent_arrivals={"chat": 12.0, "math": 0.5})
    assert AdaptivePolicy().decide(inputs).mode == "standard"
    assert AdaptivePolicy(AdaptiveSettings(mix_prior_requests=0.0)).decide(
        inputs).mode == "dflash"


def test_a_small_busy_group_follows_its_requests_when_the_recent_mix_has_drifted() -> None:
    """The recent mix lags: it remembers math-heavy traffic, while the three
    requests in flight and the one arriving are chat, which gains nothing on a drafter.
    The group is priced on them: plain decoding leads. With the recent mix weighted as
    eight requests (four times the default) the old math traffic outvotes them and
    DFlash leads by a quarter: the simulator's mixed run held a falling load at four
    requests on the wrong mode that way."""
    classes = math_and_chat()
    inputs = case(modes={"standard": load("standard", batch=3)}, max_tokens=None,
                  acceptance=classes["chat"].acceptance, workload_class="chat",
                  expected_output_tokens=300.0, in_flight={"standard": {"chat": 3}},
                  classes=classes, previous_mode="standard", last_won={"standard": 1.0},
                  recent_arrivals={"math": 10.0, "chat": 1.0})
    decision = AdaptivePolicy().decide(inputs)
    assert decision.reason.startswith("cost:standard +")
    assert AdaptivePolicy(AdaptiveSettings(mix_prior_requests=8.0)).decide(
        inputs).leader == "dflash"


def test_classes_in_flight_are_weighted_by_arrivals_not_by_count() -> None:
    """Long answers stay in flight longer: 20 code requests of 2,000 tokens in flight
    arrive as often as 4 chat requests of 400; counted as they are in flight, code
    would weigh 20/24 of the mix instead of 1/2."""
    from policies.cost import ClassShare, Pricing
    classes = {"code": ClassLearned({}, 2001.0), "chat": ClassLearned({}, 401.0)}
    inputs = case(modes={"standard": load("standard", batch=24)}, max_tokens=None,
                  in_flight={"standard": {"code": 20, "chat": 4}}, classes=classes)
    policy = AdaptivePolicy(AdaptiveSettings(mix_prior_requests=0.0))
    pricing = Pricing(inputs.modes, policy.settings)
    shares: list[ClassShare] = policy._groups(inputs, 100.0, pricing)["0"].shares
    weights = {s.output_tokens: s.weight for s in shares[1:]}
    assert weights[2001.0] == pytest.approx(12.0)
    assert weights[401.0] == pytest.approx(12.0)


def test_a_busy_group_holds_its_latest_winner_an_idle_one_the_classs() -> None:
    """Once a group switched, the next requests follow it, whatever their class last
    got (holding per class would split the device between old and new winner)."""
    close = {"dflash": learned(4.0), "eagle3": learned(3.8), "ngram": learned(1.0)}
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2, speculation_margin=0.0))
    busy = case(modes={"eagle3": load("eagle3", batch=10), "dflash": load("dflash", batch=5)},
                acceptance=close, previous_mode="dflash",
                last_won={"dflash": 1.0, "eagle3": 2.0}, in_flight={"eagle3": {"x": 10}})
    held = policy.decide(busy)
    assert (held.mode, held.reason.split()[0]) == ("eagle3", "hold:eagle3")
    idle = replace(busy, modes={m: load(m) for m in K}, in_flight={})
    assert policy.decide(idle).mode == "dflash"
    # Deciding per class: the class's last winner is held, busy or not.
    per_class = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2, group_mix=False,
                                                 speculation_margin=0.0))
    assert per_class.decide(busy).mode == "dflash"


def test_a_full_mode_is_no_candidate_but_its_batch_still_loads_its_device() -> None:
    """A mode whose admission queue is full is skipped, not taken for down: its batch
    keeps running on the shared device, and the others are priced with it."""
    policy = AdaptivePolicy(AdaptiveSettings(exploration_share=0.0))
    free = case(acceptance=HIGH_TAU)
    assert policy.decide(free).mode == "dflash"
    busy = {"dflash": replace(load("dflash", batch=8), has_room=False)}
    full = policy.decide(case(modes=busy, acceptance=HIGH_TAU))
    assert full.mode != "dflash" and "dflash" not in full.scores
    down = policy.decide(case(modes={"dflash": load("dflash", up=False)},
                              acceptance=HIGH_TAU))
    # The same choice as with dflash down, but dearer: the full engine's eight requests
    # share the device.
    assert full.mode == down.mode
    assert full.scores[full.mode] > down.scores[down.mode]


def test_a_batch_waits_through_its_prefills_so_a_costly_prefill_loses_at_batch() -> None:
    """As on the CPU build (docs/policy.md, "The device group's mix"): at batch 4
    EAGLE-3's decode step gives about as many tokens per second as plain decoding's,
    but it prefills more slowly (its drafter's prefill, ``prefill_overhead``). Each
    request waits through the batch's prefills: with short answers plain decoding wins
    there, while alone EAGLE-3 still does."""
    plain = ((1, 0.055, 100), (4, 0.061, 100))
    eagle = ((1, 0.080, 100), (4, 0.100, 100))
    tau = {"eagle3": learned(1.8)}

    def decide(batch: int, drafter_prefill: float, eagle_measured: float = 0.110) -> str:
        priors = {**AdaptiveSettings().priors}
        priors["eagle3"] = priors["eagle3"].model_copy(
            update={"prefill_overhead": drafter_prefill})
        settings = AdaptiveSettings(enabled_modes=["standard", "eagle3"],
                                    exploration_share=0.0, speculation_margin=0.0,
                                    priors=priors)
        modes = {"standard": replace(load("standard", batch=batch, profile=plain),
                                     prefill_s=0.110),
                 "eagle3": replace(load("eagle3", profile=eagle), prefill_s=eagle_measured)}
        return AdaptivePolicy(settings).decide(
            case(max_tokens=32, modes=modes, acceptance=tau)).mode

    assert decide(3, 0.0) == "eagle3"                 # the same prefill: decode decides
    assert decide(3, 0.65) == "standard"              # a batch of 4 waits for 4 prefills
    assert decide(0, 0.65) == "eagle3"                # alone, one prefill is paid back
    # An engine that has prefilled only short prompts (the warm-up's) does not read
    # cheaper than plain decoding, which served long ones: the same target model
    # prefills the same prompt on either.
    assert decide(3, 0.65, eagle_measured=0.010) == "standard"


def test_an_unmeasured_prefill_is_priced_from_the_measured_ones_not_this_prompt() -> None:
    """Plain decoding may not yet have timed a prefill beside running decodes. Priced at
    this request's prompt length while EAGLE-3's are its measured mean, a short prompt
    sent the group one way and a long one the other, and the lead flickered with every
    arrival (the simulator's mixed run at c = 128). Priced from what the measured engine
    implies, the decision no longer turns on the prompt's length."""
    plain = ((1, 0.055, 100), (4, 0.061, 100))
    eagle = ((1, 0.080, 100), (4, 0.100, 100))
    settings = AdaptiveSettings(enabled_modes=["standard", "eagle3"], exploration_share=0.0)
    modes = {"standard": load("standard", profile=plain),
             "eagle3": replace(load("eagle3", batch=3, profile=eagle), prefill_s=0.110)}

    def costs(prompt_tokens: int) -> Mapping[str, float]:
        return AdaptivePolicy(settings).decide(replace(
            case(max_tokens=32, modes=modes, acceptance={"eagle3": learned(1.8)}),
            prompt_tokens=prompt_tokens)).scores

    short, long = costs(20), costs(4000)
    assert short == pytest.approx(long)
    # Plain decoding's prefill is what EAGLE-3's implies without its drafter's share.
    prior = settings.prior_for("eagle3")
    assert prior is not None
    overhead = prior.prefill_overhead
    assert plain_prefill(modes, settings) == pytest.approx(0.110 / (1.0 + overhead))


def test_a_group_that_emptied_between_waves_is_priced_at_the_wave_it_held() -> None:
    """Closed-loop clients finish together and send again within milliseconds: the next
    wave's first request finds every engine empty. Priced as alone, it went to a
    speculative mode that the rest of the wave then had to leave (the real CPU sweep,
    four and eight concurrent requests). Priced at the group's recent batch, it goes
    where the wave will be served best."""
    plain = ((1, 0.050, 100), (4, 0.060, 100), (8, 0.075, 100))
    eagle = ((1, 0.060, 100), (4, 0.140, 100), (8, 0.260, 100))
    settings = AdaptiveSettings(enabled_modes=["standard", "eagle3"], exploration_share=0.0)
    modes = {"standard": replace(load("standard", profile=plain), prefill_s=0.05),
             "eagle3": replace(load("eagle3", profile=eagle), prefill_s=0.06)}
    alone = case(max_tokens=128, modes=modes, acceptance={"eagle3": learned(1.8)})
    policy = AdaptivePolicy(settings)
    assert policy.decide(alone).mode == "eagle3"
    assert policy.decide(replace(alone, recent_batch={"0": 7.6})).mode == "standard"


def test_a_burst_is_priced_at_the_batch_it_makes_together() -> None:
    """Eight requests arrive at once on an idle group: the first is priced with the
    seven still waiting for their decision, not as if it ran alone, so it goes where
    the burst is served best and no later one has to switch the group and move it."""
    plain = ((1, 0.050, 100), (4, 0.060, 100), (8, 0.075, 100))
    eagle = ((1, 0.060, 100), (4, 0.140, 100), (8, 0.260, 100))
    settings = AdaptiveSettings(enabled_modes=["standard", "eagle3"], exploration_share=0.0)
    modes = {"standard": replace(load("standard", profile=plain), prefill_s=0.05),
             "eagle3": replace(load("eagle3", profile=eagle), prefill_s=0.06)}
    first = case(max_tokens=128, modes=modes, acceptance={"eagle3": learned(1.8)})
    policy = AdaptivePolicy(settings)
    assert policy.decide(first).mode == "eagle3"
    assert policy.decide(replace(first, arriving=7)).mode == "standard"


def test_a_burst_goes_to_a_drafter_untimed_at_its_batch_only_on_a_clear_lead() -> None:
    """Prompt lookup on chat text drafts little, and its step at a batch it has only
    run in warm-up is priced near plain decoding's: a slight lead there is a guess. A
    burst of eight that follows the guess is moved back once its steps are timed, so
    the burst needs ``speculation_margin`` on top; where traffic has timed that batch,
    the lead stands as measured."""
    plain = ((1, 0.050, 100), (4, 0.060, 100), (8, 0.075, 100))
    chat = LearnedAcceptance(mean_accepted_length=1.25, acceptance_rate=0.5, requests=100,
                             drafts=5000, draft_tokens_per_step=0.6)
    settings = AdaptiveSettings(enabled_modes=["standard", "ngram"], exploration_share=0.0)
    policy = AdaptivePolicy(settings)

    def burst(samples_at_8: int, arriving: int = 7) -> Decision:
        lookup = ((1, 0.055, 100), (4, 0.065, 100), (8, 0.09, samples_at_8))
        modes = {"standard": replace(load("standard", profile=plain), prefill_s=0.05),
                 "ngram": replace(load("ngram", profile=lookup), prefill_s=0.05,
                                  replayed=True, draft_token_s=0.002, step_drafted=2.0)}
        return policy.decide(case(max_tokens=128, modes=modes, acceptance={"ngram": chat},
                                  recent_batch={"0": 8.0}, arriving=arriving))

    assert burst(samples_at_8=3, arriving=0).mode == "ngram"     # a wave, one at a time
    guarded = burst(samples_at_8=3)
    assert guarded.mode == "standard" and guarded.margin == 0.0
    assert burst(samples_at_8=100).mode == "ngram"               # timed there: it leads
