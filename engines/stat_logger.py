"""A per-engine vLLM stat logger.

vLLM's own Prometheus logger keeps only the last engine created in a process
(each engine clears the ``vllm:*`` collectors and labels itself ``engine="0"``),
so every SpecGate engine gets its own logger object and reads its numbers from
there. vLLM calls ``record()`` from the engine's output loop with per-step
deltas; this class only adds them up, so it is cheap on that hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engines.stats import AcceptanceWindow, PrefillCost, SpecDecodeCounters, StepTimeProfile


@dataclass(slots=True)
class LiveCounters:
    """What the logger has seen so far; read by :class:`VllmEngine.stats`."""

    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    window: AcceptanceWindow = field(default_factory=AcceptanceWindow)
    steps: StepTimeProfile = field(default_factory=StepTimeProfile)
    prefill: PrefillCost = field(default_factory=PrefillCost)
    speculative: bool = False            # the engine has a drafter
    # Does another engine of this one's device group hold requests now? (None: no
    # peers.) A step timed while a peer also steps is not this engine's cost: the
    # cost model adds the peers' steps itself (``policies.cost.estimate``).
    peers_busy: Callable[[], bool] | None = None
    # The previous step seen: (engine iteration index, when recorded, anything
    # scheduled, a peer busy then).
    last_step: tuple[int, float, bool, bool] | None = None

    def observe_step(self, index: int, prefills: int, decodes: int, at: float,
                     draft_tokens: int | None = None) -> None:
        """Time one engine step as the interval since the previous one, kept for steps
        that directly follow a busy step and decode (requests ran on from it, so the
        engine never sat idle between the two): a pure decode step is a sample of the
        step profile, one that also prefills a sample of the prefill cost
        (``PrefillCost``).
        Not vLLM's ``elapsed_ms``, which misses the forward pass on a single-process
        executor (docs/policy.md, "The cost of each mode").
        Nor a step with a peer of the device group busy at either end: the engines
        took turns (on a GPU, or on a shared core), so the interval holds the peer's
        steps too, and the cost model, which adds the peers' steps to every round,
        would count them twice: an engine timed beside another reads slower than it
        is, and auto turns away from it.
        ``draft_tokens``: what the step verified, for a speculative engine (None for
        plain decoding): n-gram's step costs more where it drafts more."""
        shared = self.peers_busy is not None and self.peers_busy()
        previous = self.last_step
        self.last_step = (index, at, prefills + decodes > 0, shared)
        if previous is None:
            return
        last_index, last_at, busy, shared_before = previous
        if not busy or index != last_index + 1 or shared or shared_before:
            return
        if prefills:      # timed only beside running decodes (``PrefillCost.add``)
            self.prefill.add(prefills, at - last_at, decodes, self.steps)
        elif decodes > 0:
            self.steps.add(decodes, at - last_at, draft_tokens)

    def spec_counters(self) -> SpecDecodeCounters:
        return SpecDecodeCounters(
            num_drafts=self.num_drafts,
            num_draft_tokens=self.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens,
            accepted_per_position=tuple(self.accepted_per_position),
        )

    def observe_spec_step(self, drafts: int, draft_tokens: int, accepted: int,
                          per_position: list[int], sequences: int = 0) -> None:
        """One step's spec-decode counts; ``sequences`` decoded in the step. The live
        window counts every decoded sequence as a step, drafted for or not (n-gram
        drafts only where the text matches), so that its mean accepted length is
        tokens per step."""
        self.num_drafts += drafts
        self.num_draft_tokens += draft_tokens
        self.num_accepted_tokens += accepted
        if len(self.accepted_per_position) < len(per_position):
            self.accepted_per_position.extend(
                [0] * (len(per_position) - len(self.accepted_per_position)))
        for pos, count in enumerate(per_position):
            self.accepted_per_position[pos] += count
        self.window.add(time.monotonic(), max(drafts, sequences), draft_tokens, accepted)


def make_stat_logger_factory(counters: LiveCounters) -> Any:
    """Return a vLLM ``StatLoggerFactory`` whose loggers feed ``counters``.

    vLLM is imported here, not at module import, so that importing ``engines``
    stays cheap and works where vLLM is not installed.
    """
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _SpecGateStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self._counters = counters

        def record(self, scheduler_stats: Any, iteration_stats: Any,
                   mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
            if scheduler_stats is None:
                return
            c = self._counters
            c.running = scheduler_stats.num_running_reqs
            c.waiting = scheduler_stats.num_waiting_reqs
            c.kv_cache_usage = scheduler_stats.kv_cache_usage
            details = getattr(scheduler_stats, "iteration_details", None)
            spec = scheduler_stats.spec_decoding_stats
            if details is not None and not details.is_dummy:
                draft_tokens = spec.num_draft_tokens if spec is not None else \
                    0 if c.speculative else None
                c.observe_step(details.iteration_index, details.num_ctx_requests,
                               details.num_generation_requests, time.monotonic(),
                               draft_tokens)
            decoded = details.num_generation_requests \
                if details is not None and not details.is_dummy else 0
            if spec is not None:
                c.observe_spec_step(spec.num_drafts, spec.num_draft_tokens,
                                    spec.num_accepted_tokens,
                                    list(spec.num_accepted_tokens_per_pos), decoded)
            elif c.speculative and decoded > 0:     # nothing drafted: a plain step
                c.observe_spec_step(0, 0, 0, [], decoded)

        def log_engine_initialized(self) -> None:
            pass

    return _SpecGateStatLogger
