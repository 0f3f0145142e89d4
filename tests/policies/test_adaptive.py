"""The adaptive policy, rule by rule, from tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import DecisionInput, LearnedAcceptance, ModeLoad, NoModeAvailable

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
         acceptance: dict[str, LearnedAcceptance] | None = None,
         **kw: object) -> DecisionInput:
    all_modes = {m: load(m) for m in K}
    all_modes.update(modes or {})
    return DecisionInput(modes=all_modes, prompt_tokens=100, max_tokens=max_tokens, now=0.0,
                         acceptance=acceptance or {}, **kw)  # type: ignore[arg-type]


SEPARATE = {m: load(m, group=m) for m in K}          # one device per engine
HIGH_TAU = {"dflash": learned(5.0), "eagle3": learned(3.5), "ngram": learned(1.2)}
LOW_TAU = {"dflash": learned(1.0), "eagle3": learned(1.05), "ngram": learned(1.0)}

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
    # speculation loses at high batch: the plain engine is busy, spec engines idle
    ("high batch, shared device", case(modes={"standard": load("standard", batch=64)},
                                       acceptance=HIGH_TAU), "standard", "cost:standard"),
    ("high batch on the spec engine itself",
     case(modes={**SEPARATE, "dflash": load("dflash", batch=128, group="dflash"),
                 "eagle3": load("eagle3", batch=128, group="eagle3")},
          acceptance={**HIGH_TAU, "ngram": learned(1.0)}), "standard", "cost:standard"),
    # shared GPU: joining the busy plain engine beats opening a second batch
    # beside it, though the same drafter wins on a device of its own
    ("batching loss on a shared device",
     case(modes={"standard": load("standard", batch=12)},
          acceptance={"dflash": learned(2.2), "eagle3": learned(1.0), "ngram": learned(1.0)}),
     "standard", "cost:standard"),
    ("same traffic, separate devices",
     case(modes={**SEPARATE, "standard": load("standard", batch=12, group="standard")},
          acceptance={"dflash": learned(2.2), "eagle3": learned(1.0), "ngram": learned(1.0)}),
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
    ("forced mode wins", case(override="ngram", max_tokens=1), "ngram", "override"),
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
    policy = AdaptivePolicy(AdaptiveSettings(hysteresis=0.2))
    close = case(acceptance={"dflash": learned(4.0), "eagle3": learned(3.8),
                             "ngram": learned(1.0)}, previous_mode="eagle3")
    held = policy.decide(close)
    assert (held.mode, held.reason.split()[0]) == ("eagle3", "hold:eagle3")
    far = replace(close, acceptance={"dflash": learned(5.5), "eagle3": learned(2.0),
                                     "ngram": learned(1.0)})
    assert policy.decide(far).mode == "dflash"
    assert AdaptivePolicy(AdaptiveSettings(hysteresis=0.0)).decide(close).mode == "dflash"


def test_priors_fade_as_measurements_arrive() -> None:
    policy = AdaptivePolicy()
    few = case(acceptance={"dflash": learned(1.0, requests=0.5), "eagle3": learned(1.0, 0.5),
                           "ngram": learned(1.0, 0.5)})
    many = case(acceptance={"dflash": learned(1.0, requests=500), "eagle3": learned(1.0, 500),
                            "ngram": learned(1.0, 500)})
    assert policy.decide(few).mode != "standard"
    assert policy.decide(many).mode == "standard"
