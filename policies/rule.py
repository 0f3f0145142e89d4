"""The published static rule, SpecGate's first policy.

Speculation pays at low batch and on long outputs; DFlash wins when its
drafts are accepted often, EAGLE-3 otherwise; plain decoding wins at high
batch (vLLM's old ``disable_by_batch_size`` default was 32) and on outputs
too short to amortise drafting.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.base import (
    Decision,
    DecisionInput,
    DecisionKind,
    ModeLoad,
    NoModeAvailable,
    Policy,
)


@dataclass(frozen=True, slots=True)
class RuleSettings:
    max_batch_for_speculation: int = 32
    min_tokens_for_speculation: int = 50
    dflash_min_acceptance: float = 0.7
    standard_mode: str = "standard"
    eagle3_mode: str = "eagle3"
    dflash_mode: str = "dflash"


class RulePolicy(Policy):
    name = "rule"

    def __init__(self, settings: RuleSettings | None = None) -> None:
        self.settings = settings or RuleSettings()

    def decide(self, inputs: DecisionInput) -> Decision:
        s = self.settings
        up = {name: load for name, load in inputs.modes.items() if load.up and load.has_room}
        if not up:
            raise NoModeAvailable("no engine is up")

        if inputs.max_tokens is not None and inputs.max_tokens < s.min_tokens_for_speculation:
            return self._plain(up, f"max_tokens<{s.min_tokens_for_speculation}")

        dflash = up.get(s.dflash_mode)
        eagle3 = up.get(s.eagle3_mode)
        target: ModeLoad | None
        if dflash is not None and (dflash.acceptance_rate or 0.0) > s.dflash_min_acceptance:
            target, rule = dflash, f"dflash_acceptance>{s.dflash_min_acceptance:g}"
        elif eagle3 is not None:
            target, rule = eagle3, "eagle3"
        else:
            return self._plain(up, "no_drafter")

        if target.batch_size > s.max_batch_for_speculation:
            return self._plain(up, f"batch>{s.max_batch_for_speculation}")
        return Decision(target.mode, DecisionKind.RULE, rule=rule)

    def _plain(self, up: dict[str, ModeLoad], rule: str) -> Decision:
        if self.settings.standard_mode in up:
            return Decision(self.settings.standard_mode, DecisionKind.RULE, rule=rule)
        # Plain decoding is not available: the least loaded mode that is up.
        fallback = min(up.values(), key=lambda load: (load.batch_size, load.mode))
        return Decision(fallback.mode, DecisionKind.RULE, rule=f"{rule};fallback")
