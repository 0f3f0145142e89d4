"""Run every scenario and write a markdown report with PNG plots.

The last line printed is the summary the issue asks for:
``calibration_max_err=… auto_vs_oracle_min=… mixed_vs_best_static=… auto_vs_plain_min=…
auto_vs_best_single_min=… mixed_vs_best_single=…``. A "single" set-up is one engine
with the whole GPU: every static mode and every K-table engine (priced with its
costs, ``KTableCosts``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sim.acceptance import engine_tau
from sim.baselines import (
    Setup,
    analytic_tokens_per_s,
    auto,
    best_k_table,
    dynamic_k,
    policy_settings,
    static,
)
from sim.calibrate import CalibrationRow, compare, max_speedup_error
from sim.params import (
    CLASSES,
    DFLASH_CHAIN,
    EAGLE3_CHAIN,
    PLAIN,
    STATIC_MODES,
    KTableCosts,
    SimParams,
)
from sim.scenarios import (
    SWEEP_CONCURRENCY,
    SWEEP_MIXES,
    MixedResult,
    PointResult,
    oracle,
    run_mixed,
    sweep,
)


@dataclass(frozen=True, slots=True)
class Summary:
    calibration_max_err: float
    auto_vs_oracle_min: float
    mixed_vs_best_static: float
    auto_vs_plain_min: float
    auto_vs_best_single_min: float
    mixed_vs_best_single: float

    def line(self) -> str:
        return (f"calibration_max_err={self.calibration_max_err:.3f} "
                f"auto_vs_oracle_min={self.auto_vs_oracle_min:.3f} "
                f"mixed_vs_best_static={self.mixed_vs_best_static:.3f} "
                f"auto_vs_plain_min={self.auto_vs_plain_min:.3f} "
                f"auto_vs_best_single_min={self.auto_vs_best_single_min:.3f} "
                f"mixed_vs_best_single={self.mixed_vs_best_single:.3f}")


def setups(params: SimParams) -> tuple[list[Setup], dict[str, dict[int, int]]]:
    tables = {m.name: best_k_table(m, params, SWEEP_CONCURRENCY)
              for m in (EAGLE3_CHAIN, DFLASH_CHAIN)}
    built = [static(m, params) for m in STATIC_MODES]
    built += [dynamic_k(m, params, tables[m.name]) for m in (EAGLE3_CHAIN, DFLASH_CHAIN)]
    built.append(auto(params, policy_settings(params)))
    return built, tables


# Seeds of the mixed run averaged into the summary (the table shows the first).
MIXED_SEEDS = 5

# The targets: auto / oracle at every sweep point, auto / best single
# static mode on the mixed workload, auto / plain everywhere.
TARGETS = (("auto_vs_oracle_min", 0.97), ("mixed_vs_best_static", 1.15),
           ("auto_vs_plain_min", 1.0), ("auto_vs_best_single_min", 0.97),
           ("mixed_vs_best_single", 1.10))
# Why a target can be missed; the tables above hold the figures (docs/simulator.md has more).
MISSED_WHY = {
    "mixed_vs_best_static": (
        "compare auto with the per-phase oracle in the mixed table (the fastest static mode "
        "in each phase, switching for free): where that oracle is itself below this target "
        "against the best static engine, no choice among these engines, one at a time, "
        "reaches it; auto loses the rest at phase changes: docs/simulator.md."),
    "mixed_vs_best_single": (
        "the best single engine is named in the mixed table; the K-table engines pay their "
        "costs (docs/simulator.md, \"What a K table costs\")."),
    "auto_vs_plain_min": (
        "where plain decoding and the mode auto keeps are closer than the cost model's "
        "error, auto can stay on the slower one (the sweep tables show the point)."),
}


def targets_md(summary: Summary) -> list[str]:
    out = ["| target | value | wanted | met |", "|---|---|---|---|"]
    notes = []
    for name, wanted in TARGETS:
        value = float(getattr(summary, name))
        met = value >= wanted - 5e-4
        out.append(f"| {name} | {value:.3f} | ≥ {wanted:.2f} | "
                   f"{'yes' if met else f'no, short by {wanted - value:.3f}'} |")
        if not met and name in MISSED_WHY:
            notes.append(f"- `{name}`: {MISSED_WHY[name]}")
    return [*out, "", *notes] if notes else out


def k_table_effect_md(params: SimParams) -> list[str]:
    """What the honest K-table model does to its baseline: steady-state tokens/s of
    each best table with its costs, and as the generous model priced it (tree
    acceptance, K = 0 free, no graph penalty), math and chat traffic."""
    generous = replace(params, k_table=KTableCosts(0.0, 2, 0.0, 189, 0.0, 1.0))
    out = ["What the K table's costs do (steady state, one engine, math + chat):", "",
           "| engine | c | honest tok/s | generous tok/s | honest / generous |",
           "|---|---|---|---|---|"]
    for mode in (EAGLE3_CHAIN, DFLASH_CHAIN):
        for c in (1, 8, 32, 128):
            figures = []
            for p in (params, generous):
                table = best_k_table(mode, p, SWEEP_CONCURRENCY)
                k = max((kk for b, kk in table.items() if b <= c), default=0)
                taus = [engine_tau(mode, CLASSES[n].tau[mode.family], p)
                        for n in ("math", "chat")]
                figures.append(analytic_tokens_per_s(mode, p, c, k, taus))
            out.append(f"| {mode.name} | {c} | {_fmt(figures[0])} | {_fmt(figures[1])} | "
                       f"{figures[0] / figures[1]:.3f} |")
    return out


def _fmt(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def calibration_md(rows: Sequence[CalibrationRow]) -> list[str]:
    out = ["| method | c | published | simulated | error |", "|---|---|---|---|---|"]
    for r in rows:
        unit = " tok/s" if r.mode == PLAIN.name else "x"
        digits = 0 if r.mode == PLAIN.name else 2
        out.append(f"| {r.mode} | {r.concurrency} | {_fmt(r.published, digits)}{unit} | "
                   f"{_fmt(r.simulated, digits)}{unit} | {r.error:+.1%} |")
    return out


def sweep_md(points: Sequence[PointResult],
             names: Sequence[str]) -> tuple[list[str], float, float, float]:
    head = "| c | " + " | ".join(names) + " | oracle | auto/oracle | auto/plain |"
    out = [head, "|" + "---|" * (len(names) + 4)]
    lat = ["| c | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    worst_oracle, worst_plain, worst_single = float("inf"), float("inf"), float("inf")
    for c in sorted({p.concurrency for p in points}):
        row = {p.setup: p for p in points if p.concurrency == c}
        best = oracle(points, c)
        single = max(p.tokens_per_s for p in row.values() if p.kind != "auto")
        a = row["auto"].tokens_per_s
        vs_oracle, vs_plain = a / best.tokens_per_s, a / row[PLAIN.name].tokens_per_s
        worst_oracle, worst_plain = min(worst_oracle, vs_oracle), min(worst_plain, vs_plain)
        worst_single = min(worst_single, a / single)
        cells = " | ".join(_fmt(row[n].tokens_per_s) for n in names)
        out.append(f"| {c} | {cells} | {best.setup} {_fmt(best.tokens_per_s)} | "
                   f"{vs_oracle:.3f} | {vs_plain:.3f} |")
        lat.append(f"| {c} | " + " | ".join(
            f"{row[n].p50_s:.2f} / {row[n].p99_s:.2f}" for n in names) + " |")
    routed = [f"- c={p.concurrency}: " + ", ".join(f"{m} {n}" for m, n in sorted(p.routed.items()))
              for p in points if p.setup == "auto"]
    return ([*out, "", "Latency p50 / p99 (s, end to end):", "", *lat, "",
             "Where `auto` sent requests:", "", *routed], worst_oracle, worst_plain, worst_single)


def plot_sweep(points: Sequence[PointResult], names: Sequence[str], title: str,
               path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name in names:
        mine = sorted((p for p in points if p.setup == name), key=lambda p: p.concurrency)
        xs = [p.concurrency for p in mine]
        style = "-" if name == "auto" else "--"
        width = 2.5 if name == "auto" else 1.2
        for ax, ys in zip(axes, ([p.tokens_per_s for p in mine], [p.p50_s for p in mine],
                                 [p.p99_s for p in mine]), strict=True):
            ax.plot(xs, ys, style, marker="o", linewidth=width, label=name)
    for ax, label in zip(axes, ("output tokens/s", "p50 latency (s)", "p99 latency (s)"),
                         strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_mixed(results: Sequence[MixedResult], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for r in results:
        rates = [t / s if s > 0 else 0.0 for t, s in zip(r.phase_tokens, r.phase_s, strict=True)]
        ax.plot(range(len(rates)), rates, "-" if r.setup == "auto" else "--", marker="o",
                linewidth=2.5 if r.setup == "auto" else 1.2, label=r.setup)
    ax.set_xlabel("phase (concurrency 1 → 128 → 1, mix drifting from math/code to chat)")
    ax.set_ylabel("output tokens/s in the phase")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mixed_md(results: Sequence[MixedResult]) -> tuple[list[str], float, float, float]:
    out = ["| set-up | tokens/s | makespan (s) | p50 (s) | p99 (s) | routed |",
           "|---|---|---|---|---|---|"]
    for r in results:
        routed = ", ".join(f"{m} {n}" for m, n in sorted(r.routed.items()))
        out.append(f"| {r.setup} ({r.kind}) | {_fmt(r.tokens_per_s)} | {r.makespan_s:.1f} | "
                   f"{r.p50_s:.2f} | {r.p99_s:.2f} | {routed} |")
    statics = [r for r in results if r.kind == "static"]
    a = next(r for r in results if r.setup == "auto")
    best = max(statics, key=lambda r: r.tokens_per_s)
    single = max((r for r in results if r.kind != "auto"), key=lambda r: r.tokens_per_s)
    plain = next(r for r in statics if r.setup == PLAIN.name)
    # Per-phase oracle: the fastest static mode in each phase (phases as each run saw them).
    oracle_s = sum(min(r.phase_s[i] for r in statics) for i in range(len(a.phase_s)))
    tokens = sum(a.phase_tokens)
    out += ["", f"Best single static mode: **{best.setup}**, {_fmt(best.tokens_per_s)} tok/s; "
            f"auto / best static = **{a.tokens_per_s / best.tokens_per_s:.3f}**; "
            f"auto / plain = {a.tokens_per_s / plain.tokens_per_s:.3f}; per-phase oracle "
            f"(fastest static in each phase, summed) ≈ {_fmt(tokens / oracle_s)} tok/s, "
            f"auto / that = {a.tokens_per_s * oracle_s / tokens:.3f}. Best single engine "
            f"(static or K table): **{single.setup}** ({single.kind}), "
            f"{_fmt(single.tokens_per_s)} tok/s; auto / that = "
            f"**{a.tokens_per_s / single.tokens_per_s:.3f}**."]
    return (out, a.tokens_per_s / best.tokens_per_s, a.tokens_per_s / plain.tokens_per_s,
            a.tokens_per_s / single.tokens_per_s)


def write_report(out: Path, params: SimParams, seed: int = 100, scale: float = 2.0) -> Summary:
    out.mkdir(parents=True, exist_ok=True)
    rows = compare(params, scale=2.0)
    built, tables = setups(params)
    names = [s.name for s in built]
    md = ["# SpecGate serving simulator: results", "",
          f"Generated by `python -m sim report --out {out}` (seed {seed}, scale {scale}). "
          "Model, equations and sources: docs/simulator.md. Simulated, not measured on a GPU.",
          "", "## Calibration (GSM8K, Llama-3.1-8B-Instruct, B200)", "",
          *calibration_md(rows), "",
          f"Largest speedup error: **{max_speedup_error(rows):.1%}**.", "",
          "## vLLM per-batch-size draft length (best table found)", ""]
    for name, table in tables.items():
        md.append(f"- `{name}`: " + ", ".join(f"batch ≥ {b}: K={k}" for b, k in table.items()))
    md += ["", *k_table_effect_md(params)]
    worst_oracle, worst_plain, worst_single = float("inf"), float("inf"), float("inf")
    for i, (title, mix) in enumerate(SWEEP_MIXES.items()):
        points = sweep(built, mix, params, seed, scale=scale)
        lines, w_o, w_p, w_s = sweep_md(points, names)
        worst_oracle, worst_plain = min(worst_oracle, w_o), min(worst_plain, w_p)
        worst_single = min(worst_single, w_s)
        png = f"sweep_{i}.png"
        plot_sweep(points, names, f"Concurrency sweep: {title}", out / png)
        md += ["", f"## Sweep: {title}", "", "Output tokens/s:", "", *lines, "",
               f"![{title}]({png})"]
    mixed = [run_mixed(s, params, seed, scale) for s in built]
    mixed_table, first_vs_best, vs_plain, first_vs_single = mixed_md(mixed)
    plot_mixed(mixed, out / "mixed.png")
    # The mixed run is one long path through a chaotic system: a decision that goes
    # the other way shifts every later one. One seed's figure can be a lucky draw, so
    # the summary gives the mean over several.
    per_seed, per_seed_single = [first_vs_best], [first_vs_single]
    for extra in range(1, MIXED_SEEDS):
        runs = [run_mixed(s, params, seed + 100 * extra, scale) for s in built]
        _, vs_best_seed, vs_plain_seed, vs_single_seed = mixed_md(runs)
        per_seed.append(vs_best_seed)
        per_seed_single.append(vs_single_seed)
        vs_plain = min(vs_plain, vs_plain_seed)
    vs_best = statistics.fmean(per_seed)
    vs_single = statistics.fmean(per_seed_single)
    md += ["", "## Mixed, time-varying workload", "", *mixed_table, "", "![mixed](mixed.png)",
           "", f"Over {MIXED_SEEDS} seeds ({seed}, {seed + 100}, …), auto / best static: "
           + ", ".join(f"{r:.3f}" for r in per_seed)
           + f"; mean **{vs_best:.3f}** (the summary's figure), range "
           f"{min(per_seed):.3f}–{max(per_seed):.3f}. Auto / best single engine (static or "
           "K table): " + ", ".join(f"{r:.3f}" for r in per_seed_single)
           + f"; mean **{vs_single:.3f}**."]
    summary = Summary(max_speedup_error(rows), worst_oracle, vs_best, min(worst_plain, vs_plain),
                      worst_single, vs_single)
    md += ["", "## Summary", "", "```", summary.line(), "```", "", "## Targets", "",
           *targets_md(summary), ""]
    (out / "report.md").write_text("\n".join(md))
    return summary
