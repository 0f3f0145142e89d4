"""``decide_auto``: what the gateway and the simulator hand the policy."""

from __future__ import annotations

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.assemble import decide_auto
from policies.base import ModeLoad
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
