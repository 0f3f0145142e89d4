"""The adaptive policy: pick the mode with the lowest expected cost (see ``cost.py``),
with priors at cold start, bounded exploration and hysteresis."""

from __future__ import annotations

from types import MappingProxyType

from policies.adaptive_settings import AdaptiveSettings
from policies.base import (
    Decision,
    DecisionInput,
    ModeLoad,
    NoModeAvailable,
    Policy,
    override_decision,
)
from policies.cost import ModeCost, estimate, plain_scale


class AdaptivePolicy(Policy):
    name = "adaptive"

    def __init__(self, settings: AdaptiveSettings | None = None) -> None:
        self.settings = settings or AdaptiveSettings()

    def decide(self, inputs: DecisionInput) -> Decision:
        forced = override_decision(inputs)
        if forced is not None:
            return forced
        s = self.settings
        candidates = self._candidates(inputs)
        if not candidates:
            raise NoModeAvailable("no enabled engine is up")
        output = self._expected_output(inputs)
        scale = plain_scale(inputs.modes, s)
        costs = sorted((estimate(load, inputs.modes, inputs.prompt_tokens, output,
                                 inputs.acceptance.get(load.mode), s, scale)
                        for load in candidates),
                       # On a tie, plain decoding: same cost, less machinery.
                       key=lambda c: (c.total_s, inputs.modes[c.mode].method is not None,
                                      c.mode))
        scores = MappingProxyType({c.mode: round(c.total_s, 6) for c in costs})
        best = costs[0]

        explored = self._explore(inputs, costs)
        if explored is not None:
            return Decision(explored.mode, f"explore:{explored.mode}", scores)

        previous = next((c for c in costs if c.mode == inputs.previous_mode), None)
        if previous is not None and previous is not best and \
                previous.total_s <= best.total_s * (1.0 + s.hysteresis):
            behind = previous.total_s / best.total_s - 1.0 if best.total_s > 0 else 0.0
            return Decision(previous.mode, f"hold:{previous.mode} -{behind:.0%}", scores)

        margin = costs[1].total_s / best.total_s - 1.0 if len(costs) > 1 and \
            best.total_s > 0 else 0.0
        return Decision(best.mode, f"cost:{best.mode} +{margin:.0%}", scores)

    def _candidates(self, inputs: DecisionInput) -> list[ModeLoad]:
        enabled = self.settings.enabled_modes
        return [load for name, load in inputs.modes.items()
                if load.up and (enabled is None or name in enabled)]

    def _expected_output(self, inputs: DecisionInput) -> float:
        if inputs.max_tokens is not None:
            return float(inputs.max_tokens)
        if inputs.expected_output_tokens is not None:
            return inputs.expected_output_tokens
        return float(self.settings.default_output_tokens)

    def _explore(self, inputs: DecisionInput, costs: list[ModeCost]) -> ModeCost | None:
        """With probability ``exploration_share``, serve the least-measured mode whose
        cost is within bounds, so rarely chosen modes keep fresh estimates."""
        s = self.settings
        if len(costs) < 2 or inputs.explore_draw >= s.exploration_share:
            return None
        best = costs[0]
        eligible = [c for c in costs[1:]
                    if inputs.modes[c.mode].method is not None
                    and c.total_s <= best.total_s * s.exploration_max_cost_ratio]
        if not eligible:
            return None

        def evidence(c: ModeCost) -> float:
            learned = inputs.acceptance.get(c.mode)
            return learned.requests if learned is not None else 0.0

        return min(eligible, key=lambda c: (evidence(c), c.total_s))
