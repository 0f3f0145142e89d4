"""The published rule, table by table."""

from __future__ import annotations

import pytest

from policies.base import DecisionInput, DecisionKind, ModeLoad, NoModeAvailable
from policies.rule import RulePolicy


def load(mode: str, batch: int = 0, acceptance: float | None = None, up: bool = True) -> ModeLoad:
    return ModeLoad(mode=mode, up=up, batch_size=batch, speculative=mode != "standard",
                    acceptance_rate=acceptance)


ALL = ("standard", "eagle3", "dflash")


def inputs(max_tokens: int | None = 200, **loads: ModeLoad) -> DecisionInput:
    modes = {name: load(name) for name in ALL}
    modes.update(loads)
    return DecisionInput(modes=modes, prompt_tokens=10, max_tokens=max_tokens, now=0.0)


@pytest.mark.parametrize("case, expected", [
    (inputs(), ("eagle3", "rule:eagle3")),
    (inputs(max_tokens=None), ("eagle3", "rule:eagle3")),
    (inputs(max_tokens=49), ("standard", "rule:max_tokens<50")),
    (inputs(max_tokens=50), ("eagle3", "rule:eagle3")),
    (inputs(dflash=load("dflash", acceptance=0.71)), ("dflash", "rule:dflash_acceptance>0.7")),
    (inputs(dflash=load("dflash", acceptance=0.7)), ("eagle3", "rule:eagle3")),
    (inputs(eagle3=load("eagle3", batch=33)), ("standard", "rule:batch>32")),
    (inputs(eagle3=load("eagle3", batch=32)), ("eagle3", "rule:eagle3")),
    (inputs(dflash=load("dflash", batch=40, acceptance=0.9)), ("standard", "rule:batch>32")),
    (inputs(eagle3=load("eagle3", up=False)), ("standard", "rule:no_drafter")),
    (inputs(dflash=load("dflash", acceptance=0.9, up=False)), ("eagle3", "rule:eagle3")),
    (inputs(max_tokens=10, standard=load("standard", up=False),
            eagle3=load("eagle3", batch=3), dflash=load("dflash", batch=1)),
     ("dflash", "rule:max_tokens<50;fallback")),
])
def test_rule(case: DecisionInput, expected: tuple[str, str]) -> None:
    decision = RulePolicy().decide(case)
    assert (decision.mode, decision.reason) == expected
    assert decision.kind is DecisionKind.RULE
    assert decision.reason == f"rule:{decision.rule}"


def test_modes_not_configured_fall_back_to_standard() -> None:
    only_standard = DecisionInput(modes={"standard": load("standard")}, prompt_tokens=5,
                                  max_tokens=500, now=0.0)
    assert RulePolicy().decide(only_standard).mode == "standard"


def test_nothing_up_raises() -> None:
    down = DecisionInput(modes={"standard": load("standard", up=False)}, prompt_tokens=5,
                         max_tokens=500, now=0.0)
    with pytest.raises(NoModeAvailable):
        RulePolicy().decide(down)
