"""Concurrency sweeps and the mixed, time-varying workload, over every set-up.

Every set-up at a point sees the same requests (same seed). Sweeps measure the
steady state: the first ``WARMUP`` share of completions is left out (auto
learns there; static modes fill their batch). The mixed run counts everything:
learning and following the drift is part of what it measures.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.baselines import Setup
from sim.loop import SimResult, Simulation
from sim.params import SimParams
from sim.router import PolicyRouter
from sim.workload import ClosedLoop, Phase, RequestSource

WARMUP = 0.25
SWEEP_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
SWEEP_MIXES: Mapping[str, Mapping[str, float]] = {
    "math (high acceptance)": {"math": 1.0},
    "chat (low acceptance)": {"chat": 1.0},
}


def requests_for(concurrency: int, scale: float = 1.0) -> int:
    """Enough completions for a stable steady state, fewer at low concurrency."""
    return max(int(60 * scale), int(8 * concurrency * scale))


@dataclass(frozen=True, slots=True)
class PointResult:
    setup: str
    kind: str
    concurrency: int
    tokens_per_s: float
    p50_s: float
    p99_s: float
    ttft_p50_s: float
    routed: Mapping[str, int] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(result: SimResult, warmup: float) -> tuple[float, float, float, float]:
    """(tokens/s, p50 latency, p99 latency, p50 time to first token) after warm-up."""
    skip = int(len(result.progress) * warmup)
    t0, tok0 = result.progress[skip - 1] if skip > 0 else (0.0, 0)
    t1, tok1 = result.progress[-1]
    window = result.completed[skip:]
    latencies = [r.latency for r in window]
    ttft = [r.first_token_at - r.arrival for r in window if r.first_token_at is not None]
    tps = (tok1 - tok0) / (t1 - t0) if t1 > t0 else 0.0
    return tps, percentile(latencies, 0.5), percentile(latencies, 0.99), \
        statistics.median(ttft) if ttft else float("nan")


def simulate(setup: Setup, source: RequestSource, params: SimParams,
             seed: int) -> tuple[SimResult, dict[str, int]]:
    engines, router = setup.build(seed)
    result = Simulation(engines, router, source, switch_s=params.steps.engine_switch_s).run()
    routed = dict(router.chosen) if isinstance(router, PolicyRouter) else \
        {engines[0].name: len(result.completed)}
    return result, routed


def run_point(setup: Setup, mix: Mapping[str, float], concurrency: int, params: SimParams,
              seed: int, scale: float = 1.0) -> PointResult:
    source = ClosedLoop.fixed(concurrency, mix, requests_for(concurrency, scale), seed)
    result, routed = simulate(setup, source, params, seed)
    tps, p50, p99, ttft = measure(result, WARMUP)
    return PointResult(setup.name, setup.kind, concurrency, tps, p50, p99, ttft, routed)


def sweep(setups: Sequence[Setup], mix: Mapping[str, float], params: SimParams, seed: int,
          concurrencies: Sequence[int] = SWEEP_CONCURRENCY,
          scale: float = 1.0) -> list[PointResult]:
    return [run_point(s, mix, c, params, seed + c, scale)
            for c in concurrencies for s in setups]


def oracle(points: Sequence[PointResult], concurrency: int) -> PointResult:
    """The best static mode at this point, each having had the whole GPU."""
    return max((p for p in points if p.kind == "static" and p.concurrency == concurrency),
               key=lambda p: p.tokens_per_s)


def mixed_phases(scale: float = 1.0) -> list[Phase]:
    """Load rising 1 -> 128 concurrent and back while the mix drifts from math and
    code towards open chat; short answers (max_tokens 16) throughout."""
    levels = (1, 2, 4, 8, 16, 32, 64, 128, 64, 32, 16, 8, 4, 2, 1)
    phases = []
    for i, c in enumerate(levels):
        w = i / (len(levels) - 1)
        mix = {"math": 0.45 - 0.35 * w, "code": 0.20 - 0.15 * w,
               "chat": 0.20 + 0.50 * w, "short": 0.15}
        phases.append(Phase(c, mix, max(int(24 * scale), int(4 * c * scale))))
    return phases


@dataclass(frozen=True, slots=True)
class MixedResult:
    setup: str
    kind: str
    tokens_per_s: float
    p50_s: float
    p99_s: float
    makespan_s: float
    phase_s: tuple[float, ...]             # how long each phase took
    phase_tokens: tuple[int, ...]
    routed: Mapping[str, int] = field(default_factory=dict)


def run_mixed(setup: Setup, params: SimParams, seed: int, scale: float = 1.0) -> MixedResult:
    phases = mixed_phases(scale)
    result, routed = simulate(setup, ClosedLoop(phases, seed), params, seed)
    starts = [*result.phase_started, result.end]
    durations = tuple(b - a for a, b in itertools.pairwise(starts))
    tokens = [0] * len(phases)
    for r in result.completed:
        tokens[r.phase] += r.generated
    lat = [r.latency for r in result.completed]
    total = sum(tokens)
    return MixedResult(setup.name, setup.kind, total / result.end, percentile(lat, 0.5),
                       percentile(lat, 0.99), result.end, durations, tuple(tokens), routed)
