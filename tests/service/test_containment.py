"""A kind of request that stopped an engine is kept off it, and only that kind."""

from __future__ import annotations

from service.containment import Containment


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_with_the_killers_fields_are_held_off_that_mode_for_a_while() -> None:
    clock = Clock()
    c = Containment(hold_s=60, clock=clock)
    c.engine_died("eagle3", frozenset({"top_k", "temperature"}))
    held = c.refusal("eagle3", frozenset({"top_k", "temperature", "seed"}))
    assert held is not None and held[0] == "top_k" and "60 s" in held[1]
    assert c.refusal("eagle3", frozenset({"temperature"})) is None   # not all of them
    assert c.refusal("dflash", frozenset({"top_k", "temperature"})) is None  # other mode
    assert c.held() == {"eagle3": [["temperature", "top_k"]]}
    clock.now += 61
    assert c.refusal("eagle3", frozenset({"top_k", "temperature"})) is None
    assert c.held() == {}


def test_plain_requests_are_never_held_and_zero_hold_holds_nothing() -> None:
    c = Containment(hold_s=60)
    c.engine_died("eagle3", frozenset())
    assert c.held() == {} and c.refusal("eagle3", frozenset()) is None
    off = Containment(hold_s=0)
    off.engine_died("eagle3", frozenset({"top_k"}))
    assert off.refusal("eagle3", frozenset({"top_k"})) is None
