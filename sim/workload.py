"""Requests and where they come from: closed loop (fixed concurrency, possibly
changing by phase) or open loop (Poisson arrivals at a rate)."""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.params import CLASSES, WorkloadClass


@dataclass(slots=True)
class SimRequest:
    id: int
    cls: WorkloadClass
    prompt_tokens: int
    output_tokens: int                     # what the model will generate (hidden from policy)
    max_tokens: int | None
    arrival: float
    phase: int = 0
    mode: str = ""
    generated: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    moves: int = 0
    explored: bool = False                 # routed by an exploration draw: never moved
    # What other engines had served when the request last moved (see sim/router.py).
    moved_tokens: int = 0
    moved_drafts: tuple[int, int, int] = (0, 0, 0)

    @property
    def latency(self) -> float:
        assert self.finished_at is not None
        return self.finished_at - self.arrival


def _lognormal(rng: random.Random, mean: float, sd: float) -> float:
    sigma2 = math.log(1.0 + (sd / mean) ** 2)
    return rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))


@dataclass(slots=True)
class RequestFactory:
    """Draws requests of a class mix from its own seeded stream, so that every
    policy compared at one point sees the same sequence of requests."""

    seed: int
    _rng: random.Random = field(init=False)
    _next_id: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def make(self, mix: Mapping[str, float], now: float, phase: int = 0) -> SimRequest:
        names = sorted(mix)
        cls = CLASSES[self._rng.choices(names, weights=[mix[n] for n in names])[0]]
        prompt = max(1, round(_lognormal(self._rng, cls.prompt_mean, cls.prompt_sd)))
        out = round(_lognormal(self._rng, cls.output_mean, cls.output_sd))
        out = min(max(out, cls.output_lo), cls.output_hi)
        self._next_id += 1
        return SimRequest(self._next_id, cls, prompt, out,
                          cls.output_hi if cls.sends_max_tokens else None, now, phase)


@dataclass(frozen=True, slots=True)
class Phase:
    concurrency: int
    mix: Mapping[str, float]
    requests: int


class RequestSource(ABC):
    """Feeds the event loop: initial arrivals, and arrivals caused by completions."""

    @abstractmethod
    def start(self) -> list[SimRequest]: ...

    @abstractmethod
    def on_finish(self, request: SimRequest, now: float) -> list[SimRequest]: ...

    @abstractmethod
    def done(self, completed: int) -> bool: ...


class ClosedLoop(RequestSource):
    """``concurrency`` clients, each sending its next request when the last one ends.
    A phased loop changes concurrency and mix once a phase's requests are issued."""

    def __init__(self, phases: Sequence[Phase], seed: int, stop_after: int | None = None) -> None:
        self.phases = list(phases)
        self.factory = RequestFactory(seed)
        self.phase = 0
        self.issued_in_phase = 0
        self.in_flight = 0
        self.total = stop_after if stop_after is not None else sum(p.requests for p in phases)
        self.phase_started: list[float] = [0.0]

    @classmethod
    def fixed(cls, concurrency: int, mix: Mapping[str, float], requests: int,
              seed: int) -> ClosedLoop:
        # Keep issuing past the last measured completion: the tail of a closed loop
        # otherwise drains at falling concurrency and skews the steady state.
        return cls([Phase(concurrency, mix, requests + concurrency)], seed, stop_after=requests)

    def start(self) -> list[SimRequest]:
        return self._top_up(0.0)

    def on_finish(self, request: SimRequest, now: float) -> list[SimRequest]:
        self.in_flight -= 1
        return self._top_up(now)

    def done(self, completed: int) -> bool:
        return completed >= self.total

    def _top_up(self, now: float) -> list[SimRequest]:
        new: list[SimRequest] = []
        while self.phase < len(self.phases):
            p = self.phases[self.phase]
            if self.issued_in_phase >= p.requests:
                self.phase += 1
                self.issued_in_phase = 0
                if self.phase < len(self.phases):
                    self.phase_started.append(now)
                continue
            if self.in_flight >= p.concurrency:
                break
            new.append(self.factory.make(p.mix, now, self.phase))
            self.issued_in_phase += 1
            self.in_flight += 1
        return new


class PoissonOpenLoop(RequestSource):
    """Arrivals at ``rate`` per second whatever the service does (exponential gaps)."""

    def __init__(self, rate: float, mix: Mapping[str, float], requests: int, seed: int) -> None:
        self.rate = rate
        self.mix = mix
        self.total = requests
        self.factory = RequestFactory(seed)
        self._gaps = random.Random(seed + 1)

    def start(self) -> list[SimRequest]:
        now, out = 0.0, []
        for _ in range(self.total):
            now += self._gaps.expovariate(self.rate)
            out.append(self.factory.make(self.mix, now))
        return out

    def on_finish(self, request: SimRequest, now: float) -> list[SimRequest]:
        return []

    def done(self, completed: int) -> bool:
        return completed >= self.total
