"""What the service knows of each mode: static facts from the configuration, and the
live load its engine reports, as the policy reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engines.base import Engine
from engines.prompt_lookup import LookupParams
from policies.base import ModeLoad


@dataclass(frozen=True, slots=True)
class ModeInfo:
    """Static facts about a mode, from the configuration."""

    method: str | None = None
    num_speculative_tokens: int = 0
    gpu_group: str = "0"
    k_schedule: tuple[tuple[int, int, int], ...] = ()   # vLLM's per-batch K table
    # Engines of this group must not run at the same time: CPU engines each bound to
    # every core oversubscribe the cores when two are busy (each runs far below half
    # speed), unlike GPU engines, which the device time-slices.
    exclusive: bool = False
    # The drafter card's held-out acceptance by kind of prompt (engines/drafter_card.py).
    card_tau: Mapping[str, float] = field(default_factory=dict, compare=False)
    # Prompt lookup's n-gram bounds: its acceptance is replayed on every answer.
    lookup: LookupParams | None = None


NO_INFO = ModeInfo()   # a mode the configuration says nothing of (fakes in tests)


def mode_load(name: str, engine: Engine, info: ModeInfo) -> ModeLoad:
    """The mode's live load from its engine's stats, with its static facts."""
    s = engine.stats()
    return ModeLoad(mode=name, up=s.up, batch_size=s.batch_size,
                    speculative=s.spec is not None, kv_cache_usage=s.kv_cache_usage,
                    acceptance_rate=s.recent_acceptance_rate,
                    mean_accepted_length=s.recent_mean_accepted_length,
                    method=info.method, num_speculative_tokens=info.num_speculative_tokens,
                    gpu_group=info.gpu_group, step_profile=s.step_profile,
                    prefill_s=s.prefill_s,
                    k_schedule=info.k_schedule, draft_token_s=s.draft_token_s,
                    step_drafted=s.step_drafted, replayed=info.lookup is not None)
