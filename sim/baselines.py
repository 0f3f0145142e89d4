"""The serving set-ups compared: each static mode alone, vLLM's per-engine dynamic
draft length, and SpecGate ``auto`` (every mode an engine on one GPU).

A set-up is built fresh for every simulated point, from a seed, so that no
state leaks between points and every set-up sees the same requests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from policies.adaptive_settings import AdaptiveSettings
from sim.acceptance import alpha_for, engine_tau, mean_accepted_length
from sim.engine import SimEngine
from sim.loop import Router, StaticRouter
from sim.params import AUTO_MODES, CLASSES, ModeSpec, SimParams
from sim.steptime import StepShape, StepTimeModel

Build = Callable[[int], tuple[list[SimEngine], Router]]


@dataclass(frozen=True, slots=True)
class Setup:
    name: str
    kind: str                              # "static", "dynamic-k" or "auto"
    build: Build


def static(mode: ModeSpec, params: SimParams) -> Setup:
    """One engine with all of the device's memory."""
    def build(seed: int) -> tuple[list[SimEngine], Router]:
        engine = SimEngine(mode, params, params.hardware.gpu_memory_utilization,
                           random.Random(seed))
        return [engine], StaticRouter(mode.name)
    return Setup(mode.name, "static", build)


def dynamic_k(mode: ModeSpec, params: SimParams, table: Mapping[int, int]) -> Setup:
    """vLLM's ``num_speculative_tokens_per_batch_size``: one engine, K by batch size."""
    def build(seed: int) -> tuple[list[SimEngine], Router]:
        engine = SimEngine(mode, params, params.hardware.gpu_memory_utilization,
                           random.Random(seed), k_table=table)
        return [engine], StaticRouter(mode.name)
    return Setup(f"{mode.name}", "dynamic-k", build)


def auto(params: SimParams, settings: AdaptiveSettings,
         modes: Sequence[ModeSpec] = AUTO_MODES,
         tables: Mapping[str, Mapping[int, int]] | None = None) -> Setup:
    """SpecGate: every mode an engine on one GPU, memory split evenly, the real policy;
    ``tables``: the K table of each K-table mode, by name."""
    from sim.router import PolicyRouter  # the router imports the loop; keep this module light

    share = params.hardware.gpu_memory_utilization / len(modes)
    tables = tables or {}

    def build(seed: int) -> tuple[list[SimEngine], Router]:
        engines = [SimEngine(m, params, share, random.Random(seed * 31 + i),
                             k_table=tables.get(m.name))
                   for i, m in enumerate(modes)]
        return engines, PolicyRouter(settings, seed=seed + 7)
    return Setup("auto", "auto", build)


def policy_settings(params: SimParams) -> AdaptiveSettings:
    """The live settings an operator would give this GPU: plain decoding timed once
    at batch 1 and 32 (both memory-bound on this model) gives ``fixed`` and
    ``per_seq``; the data sheet gives compute per token and the knee (weights over
    memory bandwidth, in tokens of compute). Speculative modes get no step-time
    priors of their own: their measured profiles replace the prior once they run.
    Everything else is the gateway's default."""
    model = StepTimeModel(params)
    plain_1 = model.step(AUTO_MODES[0], StepShape(1))
    slope = (model.step(AUTO_MODES[0], StepShape(32)) - plain_1) / 31
    c = params.steps
    return AdaptiveSettings(step_fixed_s=plain_1 - slope, step_per_seq_s=slope,
                            step_per_token_s=c.compute_per_token_s,
                            step_knee_tokens=c.weight_read_s / c.compute_per_token_s,
                            prefill_per_token_s=c.compute_per_token_s)


def analytic_tokens_per_s(mode: ModeSpec, params: SimParams, batch: int, k: int,
                          tau_by_class: Sequence[float]) -> float:
    """Steady-state decode throughput at ``batch`` and draft length ``k``, the
    geometric mean over workload classes (one table serves all traffic)."""
    model = StepTimeModel(params)
    step = model.step(mode, StepShape(batch, 0, k))
    logs = []
    for tau in tau_by_class:
        per_step = mean_accepted_length(alpha_for(tau, mode.depth), k) if k > 0 else 1.0
        logs.append(math.log(batch * per_step / step))
    return math.exp(sum(logs) / len(logs))


def best_k_table(mode: ModeSpec, params: SimParams, batches: Sequence[int],
                 classes: Sequence[str] = ("math", "chat")) -> dict[int, int]:
    """The best table for this engine: at every batch size of the grid, the K
    (0 = plain steps) with the highest steady-state throughput over the classes,
    found by exhaustive search with the calibrated step-time model."""
    taus = [engine_tau(mode, CLASSES[c].tau[mode.family], params) for c in classes]
    table: dict[int, int] = {}
    for b in batches:
        table[b] = max(range(mode.depth + 1),
                       key=lambda k: analytic_tokens_per_s(mode, params, b, k, taus))
    return table
