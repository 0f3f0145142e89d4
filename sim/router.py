"""SpecGate ``auto`` inside the simulator: the real policy, fed like the gateway feeds it.

This mirrors ``service.dispatch.Dispatcher`` (``decide``/``_load``/``_learn``)
without importing the gateway: a ``ModeLoad`` per engine from its stat logger,
the requests in flight per engine and workload class (the dispatcher counts its
open streams), the learned acceptance and output length of the request's class
and of the classes in flight from ``SharedPolicyState`` over a ``MemoryStore``,
on the simulated clock; every finished request is observed; the state syncs
with the store every ``sync_interval_s`` of simulated time.
"""

from __future__ import annotations

import random
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.assemble import decide_auto
from policies.base import ModeLoad
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from sim.engine import SimEngine
from sim.loop import Router
from sim.workload import SimRequest

T = TypeVar("T")


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the memory store never waits) without
    an event loop; one that would suspend is a bug here, so it fails loudly."""
    try:
        coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coro.close()
    raise RuntimeError("the policy store suspended; the simulator drives only "
                       "stores that complete without waiting")


class SimClock:
    """The simulated time, read by the store and the shared state like ``time.time``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def mode_load(engine: SimEngine, now: float) -> ModeLoad:
    """What ``Dispatcher._load`` builds from an engine's stats, from the simulated one."""
    rate, length = engine.stats.window.snapshot(now)
    mode = engine.mode
    return ModeLoad(
        mode=engine.name, up=True, batch_size=engine.batch_size,
        speculative=mode.method is not None,
        kv_cache_usage=engine.kv_used / engine.kv_capacity if engine.kv_capacity else 1.0,
        acceptance_rate=rate, mean_accepted_length=length, method=mode.method,
        num_speculative_tokens=mode.num_speculative_tokens, gpu_group=engine.gpu_group,
        step_profile=engine.stats.steps.snapshot())


def in_flight_by_class(engine: SimEngine) -> dict[str, int]:
    """What the dispatcher counts from its open streams: requests per workload class."""
    counts: dict[str, int] = {}
    for r in (*engine.running, *engine.waiting):
        counts[r.cls.name] = counts.get(r.cls.name, 0) + 1
    return counts


class PolicyRouter(Router):
    def __init__(self, settings: AdaptiveSettings, seed: int,
                 sync_interval_s: float = 0.25) -> None:
        self.clock = SimClock()
        self.store = MemoryStore(clock=self.clock)
        self.state = SharedPolicyState(self.store, "sim", settings.model_copy(),
                                       clock=self.clock, sync_interval_s=sync_interval_s)
        self.policy = AdaptivePolicy(settings.model_copy())

        def follow(new: AdaptiveSettings) -> None:
            self.policy.settings = new
        self.state.on_settings_change(follow)
        self.memory = RoutingMemory()
        self.rng = random.Random(seed)
        self.sync_interval_s = sync_interval_s
        self._last_sync = -sync_interval_s
        self.reasons: dict[str, int] = {}
        self.chosen: dict[str, int] = {}

    def route(self, request: SimRequest, engines: Mapping[str, SimEngine], now: float) -> str:
        self.clock.now = now
        state = self.state
        cls = state.workload_class(request.cls.name)
        _, decision = decide_auto(
            self.policy, state, self.memory,
            {name: mode_load(e, now) for name, e in engines.items()},
            prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens,
            workload_class=cls, now=now,
            in_flight={name: in_flight_by_class(e) for name, e in engines.items()},
            explore_draw=self.rng.random())
        kind = decision.kind.value
        self.reasons[kind] = self.reasons.get(kind, 0) + 1
        self.chosen[decision.mode] = self.chosen.get(decision.mode, 0) + 1
        return decision.mode

    def finished(self, request: SimRequest, now: float) -> None:
        self.clock.now = now
        self.state.observe(request.mode, request.cls.name, drafts=request.drafts,
                           draft_tokens=request.draft_tokens, accepted=request.accepted,
                           completion_tokens=request.generated, now=now)

    def tick(self, now: float) -> None:
        self.clock.now = now
        if now - self._last_sync >= self.sync_interval_s:
            self._last_sync = now
            drive(self.state.sync_once())
