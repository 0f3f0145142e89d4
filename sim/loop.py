"""The discrete-event loop: engines on one GPU take turns.

Engines in one process each would overlap on separate devices; on one device
their kernels time-slice, so the loop runs one engine step at a time, round
robin over the engines that have work, and charges a context switch when the
device changes hands. Arrivals are routed when they happen (or, if they land
inside a step, when that step ends: the gateway's view of load changes only
then too).
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.engine import SimEngine
from sim.workload import RequestSource, SimRequest


class Router(ABC):
    """Chooses an engine for each arriving request and hears about finished ones."""

    @abstractmethod
    def route(self, request: SimRequest, engines: Mapping[str, SimEngine], now: float,
              arriving: int = 0) -> str:
        """``arriving``: requests of its burst routed after it (``DecisionInput.arriving``)."""

    def finished(self, request: SimRequest, now: float) -> None:
        return None

    def tick(self, now: float) -> None:
        return None


class StaticRouter(Router):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def route(self, request: SimRequest, engines: Mapping[str, SimEngine], now: float,
              arriving: int = 0) -> str:
        return self.mode


@dataclass(frozen=True, slots=True)
class StepRecord:
    engine: str
    start: float
    end: float
    batch: int


@dataclass(slots=True)
class SimResult:
    completed: list[SimRequest]
    end: float
    # (time, tokens generated so far) at each completion, for windowed throughput.
    progress: list[tuple[float, int]]
    steps: list[StepRecord] = field(default_factory=list)
    phase_started: list[float] = field(default_factory=list)
    max_batch: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(self, engines: Sequence[SimEngine], router: Router, source: RequestSource,
                 switch_s: float = 0.0, record_steps: bool = False,
                 max_sim_s: float = 1e6, burst_window_s: float = 0.005) -> None:
        self.engines = {e.name: e for e in engines}
        self.order = list(engines)
        self.router = router
        self.source = source
        self.switch_s = switch_s
        self.record_steps = record_steps
        self.max_sim_s = max_sim_s
        # ``Settings.burst_window_s``: arrivals closer than this form one burst.
        self.burst_window_s = burst_window_s

    def _burst(self, ready: Sequence[SimRequest], i: int) -> int:
        """How many requests after ``ready[i]`` arrived with it: each within a window
        of the one before, as the gateway's ``service/arrivals.py`` groups them."""
        n = 0
        if self.burst_window_s <= 0:
            return 0
        for prev, r in itertools.pairwise(ready[i:]):
            if r.arrival - prev.arrival > self.burst_window_s:
                break
            n += 1
        return n

    def run(self) -> SimResult:
        now = 0.0
        tie = itertools.count()
        arrivals: list[tuple[float, int, SimRequest]] = []
        for r in self.source.start():
            heapq.heappush(arrivals, (r.arrival, next(tie), r))
        result = SimResult([], 0.0, [])
        tokens = 0
        last: SimEngine | None = None
        turn = 0
        while not self.source.done(len(result.completed)) and now < self.max_sim_s:
            ready: list[SimRequest] = []
            while arrivals and arrivals[0][0] <= now:
                ready.append(heapq.heappop(arrivals)[2])
            for i, r in enumerate(ready):
                arriving = self._burst(ready, i)
                self.engines[self.router.route(r, self.engines, now, arriving)].submit(r)
            engine, turn = self._next(turn)
            if engine is None:
                if not arrivals:
                    break
                now = arrivals[0][0]
                continue
            switch = self.switch_s if last is not None and last is not engine else 0.0
            step = engine.step(now + switch)
            start, now = now + switch, now + switch + step.duration
            last = engine
            tokens += step.tokens
            result.max_batch[engine.name] = max(result.max_batch.get(engine.name, 0),
                                                step.batch)
            if self.record_steps:
                result.steps.append(StepRecord(engine.name, start, now, step.batch))
            for r in step.finished:
                result.completed.append(r)
                result.progress.append((now, tokens))
                self.router.finished(r, now)
                for new in self.source.on_finish(r, now):
                    heapq.heappush(arrivals, (new.arrival, next(tie), new))
            self.router.tick(now)
        result.end = now
        result.phase_started = list(getattr(self.source, "phase_started", [0.0]))
        return result

    def _next(self, turn: int) -> tuple[SimEngine | None, int]:
        n = len(self.order)
        for i in range(n):
            engine = self.order[(turn + i) % n]
            if engine.busy:
                return engine, (turn + i + 1) % n
        return None, turn
