"""``decide_auto``: what the gateway and the simulator hand the policy."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.auto_decision import decide_auto
from policies.base import Decision, DecisionKind, ModeLoad
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore

NOW = 100.0


def test_a_decision_sees_each_modes_acceptance_over_every_class() -> None:
    state = SharedPolicyState(MemoryStore(clock=lambda: NOW), "r1", AdaptiveSettings(),
                              clock=lambda: NOW)
    # EAGLE-3 measured on math (τ 4: 3 tokens accepted per step) and chat (τ 2), never
    # on the class this request belongs to.
    state.observe("eagle3", "math", drafts=30, draft_tokens=90, accepted=90,
                  completion_tokens=121, now=NOW)
    state.observe("eagle3", "chat", drafts=10, draft_tokens=30, accepted=10,
                  completion_tokens=21, now=NOW)
    modes = {m: ModeLoad(mode=m, up=True, batch_size=0, speculative=m != "standard",
                         method=None if m == "standard" else m,
                         num_speculative_tokens=0 if m == "standard" else 3)
             for m in ("standard", "eagle3")}
    inputs, _ = decide_auto(AdaptivePolicy(), state, RoutingMemory(), modes,
                            prompt_tokens=50, max_tokens=100, workload_class="code",
                            now=NOW, in_flight={}, explore_draw=0.99)
    assert "eagle3" not in inputs.acceptance                  # nothing on code itself
    level = inputs.mode_acceptance["eagle3"]
    assert level.drafts == 40
    assert level.mean_accepted_length == (30 * 4.0 + 10 * 2.0) / 40
    assert "standard" not in inputs.mode_acceptance


def test_a_deferred_switch_is_remembered_until_the_group_serves_its_leader() -> None:
    state = SharedPolicyState(MemoryStore(clock=lambda: NOW), "r1", AdaptiveSettings(),
                              clock=lambda: NOW)
    # EAGLE-3 accepts nothing on code: plain decoding is cheaper.
    state.observe("eagle3", "code", drafts=100, draft_tokens=300, accepted=0,
                  completion_tokens=101, now=NOW)
    modes = {m: ModeLoad(mode=m, up=True, batch_size=4 if m == "eagle3" else 0,
                         speculative=m != "standard", method=None if m == "standard" else m,
                         num_speculative_tokens=0 if m == "standard" else 3)
             for m in ("standard", "eagle3")}
    busy = {"eagle3": {"code": 4}}
    memory = RoutingMemory()
    memory.remember("code", "eagle3")                     # EAGLE-3 won last

    def ask(policy: AdaptivePolicy, now: float) -> Decision:
        return decide_auto(policy, state, memory, modes, prompt_tokens=50, max_tokens=100,
                           workload_class="code", now=now, in_flight=busy,
                           explore_draw=0.99)[1]

    wide = AdaptivePolicy(AdaptiveSettings(hysteresis=1.0))        # within the margin
    assert (ask(wide, NOW).kind, memory.deferred_since()) == (DecisionKind.HOLD, {})
    waits = AdaptivePolicy(AdaptiveSettings(hysteresis=0.0, drain_payback=100.0))
    decision = ask(waits, NOW + 1)
    assert (decision.mode, decision.deferred) == ("eagle3", True)
    assert memory.deferred_since() == {"eagle3": NOW + 1}
    assert ask(waits, NOW + 2).deferred and memory.deferred_since() == {"eagle3": NOW + 1}
    # The group empties between two closed-loop waves: the next wave's first request
    # is priced alone, and the switch still waits from where it began.
    idle = {m: replace(load, batch_size=0) for m, load in modes.items()}
    alone = decide_auto(waits, state, memory, idle, prompt_tokens=50, max_tokens=100,
                        workload_class="code", now=NOW + 3, in_flight={},
                        explore_draw=0.99)[1]
    assert alone.kind is DecisionKind.COST
    assert memory.deferred_since() == {"eagle3": NOW + 1}
    switches = AdaptivePolicy(AdaptiveSettings(hysteresis=0.0, drain_payback=0.0))
    assert (ask(switches, NOW + 4).mode, memory.deferred_since()) == ("standard", {})


def idle_plain_and_eagle3() -> dict[str, ModeLoad]:
    """Plain decoding and EAGLE-3 (K = 3) on one device, both reporting batch 0."""
    return {m: ModeLoad(mode=m, up=True, batch_size=0, speculative=m != "standard",
                        method=None if m == "standard" else m,
                        num_speculative_tokens=0 if m == "standard" else 3)
            for m in ("standard", "eagle3")}


def test_a_burst_is_priced_at_the_requests_already_sent_not_the_lagging_stats() -> None:
    """On the real CPU sweep a wave of four requests arrives within a millisecond, before
    any engine has stepped with the first of them, so each engine's reported batch is
    still 0. Priced that way, the first three each went to EAGLE-3 as if alone on an
    idle device. The requests the dispatcher has open there are the batch."""
    state = SharedPolicyState(MemoryStore(clock=lambda: NOW), "r1", AdaptiveSettings(),
                              clock=lambda: NOW)
    modes = idle_plain_and_eagle3()
    sent = {"eagle3": {"chat": 3}}
    inputs, _ = decide_auto(AdaptivePolicy(), state, RoutingMemory(), modes,
                            prompt_tokens=50, max_tokens=100, workload_class="chat",
                            now=NOW, in_flight=sent, explore_draw=0.99)
    assert inputs.modes["eagle3"].batch_size == 3
    assert inputs.modes["standard"].batch_size == 0
    # A report ahead of the dispatcher's count (requests it does not see) stands.
    ahead = {**modes, "standard": replace(modes["standard"], batch_size=5)}
    inputs, _ = decide_auto(AdaptivePolicy(), state, RoutingMemory(), ahead,
                            prompt_tokens=50, max_tokens=100, workload_class="chat",
                            now=NOW, in_flight=sent, explore_draw=0.99)
    assert inputs.modes["standard"].batch_size == 5


def test_each_decision_notes_its_groups_batch_this_request_included() -> None:
    state = SharedPolicyState(MemoryStore(clock=lambda: NOW), "r1", AdaptiveSettings(),
                              clock=lambda: NOW)
    modes = idle_plain_and_eagle3()
    memory = RoutingMemory()
    policy = AdaptivePolicy(AdaptiveSettings(batch_memory_s=2.0))

    def ask(now: float, sent: dict[str, dict[str, int]]) -> float:
        inputs, _ = decide_auto(policy, state, memory, modes, prompt_tokens=50,
                                max_tokens=100, workload_class="chat", now=now,
                                in_flight=sent, explore_draw=0.99)
        return inputs.recent_batch.get("0", 0.0)

    assert ask(NOW, {"eagle3": {"chat": 3}}) == 0.0      # nothing noted before
    # Four requests (the three sent and this one) held for the second since, in an
    # average over about two seconds.
    assert ask(NOW + 1.0, {}) == pytest.approx(4 * (1 - math.exp(-0.5)))
