"""SpecGate ``auto`` inside the simulator: the real policy, fed like the gateway feeds it.

This mirrors ``service.dispatch.Dispatcher`` (``decide``),
``service.mode_info.mode_load`` and ``service.learning.Learner`` without importing
the gateway: a ``ModeLoad`` per engine from its stat logger, the requests in flight
per engine and workload class (the dispatcher counts its open streams), the learned
acceptance and output length of the request's class and of the classes in flight
from ``SharedPolicyState`` over a ``MemoryStore``, on the simulated clock; every
finished request is observed; the state syncs with the store every
``sync_interval_s`` of simulated time. A cost decision moves the device group's
requests on other modes to the chosen one, as the gateway does
(``service/moves.py``): the new engine prefills prompt + the tokens generated so far
(``SimEngine._admit`` charges exactly that) and decodes on."""

from __future__ import annotations

import random
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.auto_decision import decide_auto, note_departure
from policies.base import DecisionKind, ModeLoad
from policies.move_costs import cost_is_measured, served_before_move
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
    """What ``service.mode_info.mode_load`` builds from an engine's stats, from the
    simulated one."""
    rate, length = engine.stats.window.snapshot(now)
    mode = engine.mode
    return ModeLoad(
        mode=engine.name, up=True, batch_size=engine.batch_size,
        speculative=mode.method is not None,
        kv_cache_usage=engine.kv_used / engine.kv_capacity if engine.kv_capacity else 1.0,
        acceptance_rate=rate, mean_accepted_length=length, method=mode.method,
        num_speculative_tokens=mode.num_speculative_tokens, gpu_group=engine.gpu_group,
        step_profile=engine.stats.steps.snapshot(),
        prefill_s=engine.stats.prefill.seconds, k_schedule=engine.k_schedule,
        replayed=mode.method == "ngram")


def in_flight_by_class(engine: SimEngine) -> dict[str, int]:
    """What the dispatcher counts from its open streams: requests per workload class."""
    counts: dict[str, int] = {}
    for r in (*engine.running, *engine.waiting):
        counts[r.cls.name] = counts.get(r.cls.name, 0) + 1
    return counts


class PolicyRouter(Router):
    def __init__(self, settings: AdaptiveSettings, seed: int,
                 sync_interval_s: float = 0.25, move_min_remaining_tokens: int | None = 32,
                 max_moves: int = 2) -> None:
        self.clock = SimClock()
        self.store = MemoryStore(clock=self.clock)
        self.state = SharedPolicyState(self.store, "sim", settings.model_copy(),
                                       clock=self.clock, sync_interval_s=sync_interval_s)
        self.policy = AdaptivePolicy(settings.model_copy())
        self.state.on_settings_change(self.policy.follow)
        self.memory = RoutingMemory()
        self.rng = random.Random(seed)
        self.sync_interval_s = sync_interval_s
        self._last_sync = -sync_interval_s
        self.reasons: dict[str, int] = {}
        self.chosen: dict[str, int] = {}
        self.move_min_remaining_tokens = move_min_remaining_tokens   # None: never move
        self.max_moves = max_moves
        self.moved = 0
        self._engines: Mapping[str, SimEngine] = {}

    def route(self, request: SimRequest, engines: Mapping[str, SimEngine], now: float,
              arriving: int = 0) -> str:
        self.clock.now = now
        self._engines = engines
        state = self.state
        cls = state.workload_class(request.cls.name)
        _, decision = decide_auto(
            self.policy, state, self.memory,
            {name: mode_load(e, now) for name, e in engines.items()},
            prompt_tokens=request.prompt_tokens, max_tokens=request.max_tokens,
            workload_class=cls, now=now,
            in_flight={name: in_flight_by_class(e) for name, e in engines.items()},
            explore_draw=self.rng.random(), arriving=arriving)
        kind = decision.kind.value
        self.reasons[kind] = self.reasons.get(kind, 0) + 1
        self.chosen[decision.mode] = self.chosen.get(decision.mode, 0) + 1
        request.explored = decision.kind is DecisionKind.EXPLORE
        if decision.kind is DecisionKind.COST and self.move_min_remaining_tokens is not None:
            self._move_group_to(engines[decision.mode], engines)
        return decision.mode

    def _move_group_to(self, dest: SimEngine, engines: Mapping[str, SimEngine]) -> None:
        """``service.moves.Moves.switch``: the group's requests elsewhere continue on
        ``dest`` (the gateway knows ``max_tokens``, not the hidden output length)."""
        assert self.move_min_remaining_tokens is not None
        for engine in engines.values():
            if engine is dest or engine.gpu_group != dest.gpu_group or not engine.busy \
                    or not cost_is_measured(mode_load(engine, self.clock.now)):
                continue
            movers = [r for r in (*engine.running, *engine.waiting)
                      if r.moves < self.max_moves and not r.explored and
                      (r.max_tokens is None or
                       r.max_tokens - r.generated >= self.move_min_remaining_tokens)]
            if not movers:
                continue
            gone = {id(r) for r in movers}
            engine.running = [r for r in engine.running if id(r) not in gone]
            engine.waiting = type(engine.waiting)(r for r in engine.waiting
                                                  if id(r) not in gone)
            load = mode_load(engine, self.clock.now)
            for r in movers:
                # What the old engine served of it teaches that engine's acceptance, as
                # the gateway's ``Learner.moved`` does (``policies/move_costs.py``).
                served = served_before_move(load, r.generated - r.moved_tokens)
                if served is not None:
                    self.state.observe_acceptance(
                        engine.name, r.cls.name, drafts=served.drafts,
                        draft_tokens=served.draft_tokens, accepted=served.accepted,
                        completion_tokens=served.tokens, now=self.clock.now)
                r.moves += 1
                r.moved_tokens = r.generated
                r.moved_drafts = (r.drafts, r.draft_tokens, r.accepted)
                dest.submit(r)
                self.moved += 1

    def finished(self, request: SimRequest, now: float) -> None:
        self.clock.now = now
        group = self._engines[request.mode].gpu_group
        note_departure(self.policy, self.memory, group,
                       sum(len(e.running) + len(e.waiting) for e in self._engines.values()
                           if e.gpu_group == group), now)
        # Like the gateway: a moved request teaches what its last engine served.
        drafts, draft_tokens, accepted = request.moved_drafts
        self.state.observe(request.mode, request.cls.name, drafts=request.drafts - drafts,
                           draft_tokens=request.draft_tokens - draft_tokens,
                           accepted=request.accepted - accepted,
                           completion_tokens=request.generated - request.moved_tokens,
                           now=now, answer_tokens=request.generated)
        # ``Learner`` (``service/learning.py``): prompt lookup measured on every answer.
        for name, engine in self._engines.items():
            if engine.mode.method == "ngram" and name != request.mode and not request.moves:
                drafts, draft_tokens, accepted = engine.replay(request)
                self.state.observe_acceptance(
                    name, request.cls.name, drafts=drafts, draft_tokens=draft_tokens,
                    accepted=accepted, completion_tokens=request.generated, now=now,
                    speculative=True)

    def tick(self, now: float) -> None:
        self.clock.now = now
        if now - self._last_sync >= self.sync_interval_s:
            self._last_sync = now
            drive(self.state.sync_once())
