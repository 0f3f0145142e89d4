"""Fit the step-time model to the published GSM8K table, and check the fit by simulation.

``fit`` is a deterministic Nelder-Mead over the log of six coefficients,
against a steady-state model of the published benchmark (closed loop at
concurrency ``c``: ``c`` sequences decoding, plus the prompts of the requests
that replace finished ones). ``compare`` then runs the discrete-event
simulator itself on the GSM8K workload and sets its numbers beside the
published ones; that is the check that counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sim.baselines import static
from sim.params import (
    DFLASH_10,
    EAGLE3_10,
    EAGLE3_60,
    MATH,
    PLAIN,
    PUBLISHED_CONCURRENCY,
    PUBLISHED_PLAIN_TPS,
    PUBLISHED_SPEEDUP,
    DrafterCost,
    ModeSpec,
    SimParams,
    StepCoefficients,
)
from sim.scenarios import run_point
from sim.steptime import StepShape, StepTimeModel

SPEC_MODES: tuple[ModeSpec, ...] = (EAGLE3_10, EAGLE3_60, DFLASH_10)


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    mode: str                              # "standard" rows hold tokens/s, others speedups
    concurrency: int
    published: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.published - 1.0


def steady_state_tps(params: SimParams, mode: ModeSpec, concurrency: int) -> float:
    model = StepTimeModel(params)
    length = MATH.output_mean
    # Steps per request: the prefill step (first token), then (L - 1) / tau
    # verification steps, the last one half wasted on average.
    if mode.method is None:
        steps = length
    else:
        steps = 1.0 + (length - 1.0) / MATH.tau[mode.family] + 0.5
    # Each finished request is replaced by a new prompt to prefill.
    prefill = concurrency / steps * MATH.prompt_mean
    step = model.step(mode, StepShape(concurrency, prefill))
    return concurrency * length / steps / step


def analytic_rows(params: SimParams) -> list[CalibrationRow]:
    rows = []
    for i, c in enumerate(PUBLISHED_CONCURRENCY):
        plain = steady_state_tps(params, PLAIN, c)
        rows.append(CalibrationRow(PLAIN.name, c, PUBLISHED_PLAIN_TPS[i], plain))
        for mode in SPEC_MODES:
            rows.append(CalibrationRow(mode.name, c, PUBLISHED_SPEEDUP[mode.name][i],
                                       steady_state_tps(params, mode, c) / plain))
    return rows


def compare(params: SimParams, seed: int = 11, scale: float = 1.0) -> list[CalibrationRow]:
    """Simulate the published benchmark (closed loop, GSM8K-like requests)."""
    rows = []
    for i, c in enumerate(PUBLISHED_CONCURRENCY):
        plain = run_point(static(PLAIN, params), {"math": 1.0}, c, params, seed, scale)
        rows.append(CalibrationRow(PLAIN.name, c, PUBLISHED_PLAIN_TPS[i], plain.tokens_per_s))
        for mode in SPEC_MODES:
            spec = run_point(static(mode, params), {"math": 1.0}, c, params, seed, scale)
            rows.append(CalibrationRow(mode.name, c, PUBLISHED_SPEEDUP[mode.name][i],
                                       spec.tokens_per_s / plain.tokens_per_s))
    return rows


def max_speedup_error(rows: Sequence[CalibrationRow]) -> float:
    return max(abs(r.error) for r in rows if r.mode != PLAIN.name)


def _with(params: SimParams, x: Sequence[float]) -> SimParams:
    fixed, compute, seq, spec_seq, e_pass, d_pass = x
    d = params.drafters
    return replace(
        params,
        steps=replace(params.steps, fixed_s=fixed, compute_per_token_s=compute,
                      per_seq_s=seq, spec_per_seq_s=spec_seq),
        drafters={"eagle3": replace(d["eagle3"], pass_s=e_pass),
                  "dflash": replace(d["dflash"], pass_s=d_pass)})


def _vector(params: SimParams) -> list[float]:
    s, e, d = params.steps, params.drafters["eagle3"], params.drafters["dflash"]
    return [s.fixed_s, s.compute_per_token_s, s.per_seq_s, s.spec_per_seq_s,
            e.pass_s, d.pass_s]


def _loss(params: SimParams, columns: Sequence[int] = PUBLISHED_CONCURRENCY) -> float:
    total = 0.0
    for r in analytic_rows(params):
        if r.concurrency not in columns:
            continue
        err = math.log(r.simulated / r.published)
        weight = 0.5 if r.mode == PLAIN.name else 1.0   # speedups are the target
        total += (weight * err) ** 2 + 50.0 * max(abs(weight * err) - 0.05, 0.0) ** 2
    return total


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], rounds: int = 6,
                iterations: int = 1500) -> list[float]:
    """Plain Nelder-Mead, restarted from the best point; deterministic."""
    best = list(x0)
    n = len(best)
    for _ in range(rounds):
        simplex = [list(best)] + [[v + (0.3 if i == j else 0.0) for j, v in enumerate(best)]
                                  for i in range(n)]
        values = [f(p) for p in simplex]
        for _ in range(iterations):
            order = sorted(range(n + 1), key=values.__getitem__)
            simplex = [simplex[i] for i in order]
            values = [values[i] for i in order]
            centre = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]

            worst = simplex[-1]

            def towards(t: float, centre: list[float] = centre,
                        worst: list[float] = worst) -> list[float]:
                return [c + t * (w - c) for c, w in zip(centre, worst, strict=True)]
            reflected = towards(-1.0)
            fr = f(reflected)
            if fr < values[0]:
                expanded = towards(-2.0)
                fe = f(expanded)
                simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
            elif fr < values[-2]:
                simplex[-1], values[-1] = reflected, fr
            else:
                contracted = towards(0.5)
                fc = f(contracted)
                if fc < values[-1]:
                    simplex[-1], values[-1] = contracted, fc
                else:
                    simplex = [simplex[0]] + [[b + 0.5 * (v - b) for b, v in
                                               zip(simplex[0], p, strict=True)]
                                              for p in simplex[1:]]
                    values = [values[0]] + [f(p) for p in simplex[1:]]
        best = simplex[min(range(n + 1), key=values.__getitem__)]
    return best


def fit(params: SimParams, columns: Sequence[int] = PUBLISHED_CONCURRENCY) -> SimParams:
    """Least-squares fit (in log space, so coefficients stay positive) of the
    six fitted coefficients to the published cells at ``columns`` (concurrencies);
    hardware facts and everything else are kept."""
    x = nelder_mead(lambda v: _loss(_with(params, [math.exp(u) for u in v]), columns),
                    [math.log(v) for v in _vector(params)])
    return _with(params, [math.exp(u) for u in x])


def held_out(params: SimParams) -> list[CalibrationRow]:
    """Each published column predicted by a fit to the other four (leave one column
    out): how well the model, not the fit, carries to cells it has not seen. The
    steady-state model, as the fit itself uses; ``compare`` checks the full fit by
    simulation."""
    rows = []
    for c in PUBLISHED_CONCURRENCY:
        fitted = fit(params, [x for x in PUBLISHED_CONCURRENCY if x != c])
        rows += [r for r in analytic_rows(fitted) if r.concurrency == c]
    return rows


def describe(params: SimParams) -> str:
    """The fitted values, ready to paste into sim/params.py."""
    s: StepCoefficients = params.steps
    e: DrafterCost = params.drafters["eagle3"]
    d: DrafterCost = params.drafters["dflash"]
    return (f"fixed_s={s.fixed_s:.5g} compute_per_token_s={s.compute_per_token_s:.5g} "
            f"per_seq_s={s.per_seq_s:.5g} spec_per_seq_s={s.spec_per_seq_s:.5g}\n"
            f"eagle3: pass_s={e.pass_s:.5g} (per token: {e.flops_share} x compute)\n"
            f"dflash: pass_s={d.pass_s:.5g} (per token: {d.flops_share} x compute)")
