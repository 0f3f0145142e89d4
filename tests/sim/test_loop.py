"""The event loop's invariants: one GPU, engines take turns, batches bounded by KV."""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Mapping

from sim.baselines import auto, policy_settings
from sim.engine import SimEngine, kv_capacity_tokens
from sim.loop import Simulation, StaticRouter
from sim.params import DFLASH_10, PLAIN, SimParams
from sim.router import PolicyRouter
from sim.workload import ClosedLoop, PoissonOpenLoop, SimRequest

PARAMS = SimParams()


def test_steps_on_one_gpu_never_overlap() -> None:
    engines, _ = auto(PARAMS, policy_settings(PARAMS)).build(3)
    router = PolicyRouter(policy_settings(PARAMS), seed=3)
    source = ClosedLoop.fixed(16, {"math": 0.5, "chat": 0.5}, 120, seed=3)
    result = Simulation(engines, router, source, switch_s=1e-4, record_steps=True).run()
    assert len({s.engine for s in result.steps}) >= 2, "the test needs engines sharing the GPU"
    for a, b in itertools.pairwise(result.steps):
        assert a.end <= b.start + 1e-12
        if a.engine != b.engine:                  # a context switch is charged
            assert b.start - a.end >= 1e-4 - 1e-12


def test_kv_capacity_bounds_the_batch() -> None:
    share = 0.10                                 # ~1.7 GiB of KV: a few long requests
    engine = SimEngine(PLAIN, PARAMS, share, random.Random(0))
    cap = kv_capacity_tokens(PARAMS, PLAIN, share)
    assert 0 < cap < 64 * 2500
    source = ClosedLoop.fixed(64, {"code": 1.0}, 100, seed=1)
    result = Simulation([engine], StaticRouter(PLAIN.name), source, record_steps=True).run()
    assert max(s.batch for s in result.steps) < 64
    assert engine.kv_used <= cap
    assert len(result.completed) >= 100


def test_more_memory_means_bigger_batches() -> None:
    small = kv_capacity_tokens(PARAMS, DFLASH_10, 0.2)
    big = kv_capacity_tokens(PARAMS, DFLASH_10, 0.9)
    assert big > 4 * small > 0


def test_closed_loop_keeps_its_concurrency() -> None:
    engine = SimEngine(PLAIN, PARAMS, 0.9, random.Random(0))
    source = ClosedLoop.fixed(8, {"math": 1.0}, 80, seed=2)
    result = Simulation([engine], StaticRouter(PLAIN.name), source, record_steps=True).run()
    assert len(result.completed) == 80
    assert all(s.batch == 8 for s in result.steps)


def test_poisson_open_loop_arrives_at_its_rate() -> None:
    source = PoissonOpenLoop(rate=20.0, mix={"chat": 1.0}, requests=2000, seed=4)
    arrivals = [r.arrival for r in source.start()]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert abs(statistics.mean(gaps) - 1 / 20.0) < 0.005
    # Exponential gaps: the standard deviation equals the mean.
    assert abs(statistics.stdev(gaps) / statistics.mean(gaps) - 1.0) < 0.1
    engine = SimEngine(PLAIN, PARAMS, 0.9, random.Random(0))
    small = PoissonOpenLoop(rate=2.0, mix={"chat": 1.0}, requests=30, seed=4)
    result = Simulation([engine], StaticRouter(PLAIN.name), small).run()
    assert len(result.completed) == 30
    assert all(r.finished_at is not None and r.finished_at > r.arrival
               for r in result.completed)


class _Recording(StaticRouter):
    def __init__(self, mode: str) -> None:
        super().__init__(mode)
        self.seen: list[tuple[float, int]] = []

    def route(self, request: SimRequest, engines: Mapping[str, SimEngine], now: float,
              arriving: int = 0) -> str:
        self.seen.append((request.arrival, arriving))
        return self.mode


def test_requests_arriving_together_are_routed_as_one_burst() -> None:
    """As the gateway does (service/arrivals.py): each request of a burst is routed
    knowing how many of the burst come after it; closed-loop clients that start
    together are a burst, and a window of 0 turns it off."""
    for window, first_wave in ((0.005, [3, 2, 1, 0]), (0.0, [0, 0, 0, 0])):
        engine = SimEngine(PLAIN, PARAMS, 0.5, random.Random(0))
        router = _Recording(PLAIN.name)
        source = ClosedLoop.fixed(4, {"chat": 1.0}, 12, seed=2)
        Simulation([engine], router, source, burst_window_s=window).run()
        assert [n for _, n in router.seen[:4]] == first_wave
        assert all(at == 0.0 for at, _ in router.seen[:4])
