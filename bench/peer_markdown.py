"""A results page from ``bench.peer`` runs: the summary table over workloads, the
phases where auto falls short, and each set-up's run as the benchmark printed it.

    .venv/bin/python -m bench.peer_markdown OUT.md RUN.json [RUN.json ...] [--title T]
        [--note TEXT]

Each JSON file is one ``bench.peer --out`` (one or more workloads). Ratios are taken
within one batch of one file, never across files: the machine's speed drifts between
runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAIN = "vllm:plain"
AUTO = "specgate:auto"
# Phases whose answers reuse the prompt: held to 0.95x their best server.
REUSE = ("copy", "followup", "followups", "memo", "changes")
REUSE_FLOOR = 0.95
TPOT_CEILING = 1.10


@dataclass(frozen=True)
class Phase:
    name: str
    tokens: int
    seconds: float
    latency: Mapping[str, float]     # ttft / tpot p50 / p99, ms
    served_by: Mapping[str, int]
    moves: int
    decided: Mapping[str, int]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tpot_p50(self) -> float:
        return self.latency.get("tpot_p50_ms", 0.0)


@dataclass(frozen=True)
class Run:
    setup: str
    workload: str
    front_end_cpu_s: float
    phases: tuple[Phase, ...]

    @property
    def rate(self) -> float:
        seconds = sum(p.seconds for p in self.phases)
        return sum(p.tokens for p in self.phases) / seconds if seconds else 0.0

    @property
    def front_end_ms(self) -> float:
        """The front end's CPU per 1,000 completion tokens."""
        tokens = sum(p.tokens for p in self.phases)
        return 1e6 * self.front_end_cpu_s / tokens if tokens else 0.0


@dataclass(frozen=True)
class Workload:
    """One workload's runs within one batch of one file."""

    name: str
    runs: tuple[Run, ...]

    def get(self, setup: str) -> Run | None:
        return next((r for r in self.runs if r.setup == setup), None)

    @property
    def singles(self) -> list[Run]:
        return [r for r in self.runs if r.setup.startswith("vllm:")]

    @property
    def best(self) -> Run:
        return max(self.singles, key=lambda r: r.rate)

    def phase_best(self, i: int) -> Run:
        return max(self.singles, key=lambda r: r.phases[i].rate)

    @property
    def ceiling(self) -> float:
        """Each phase at its best single server's rate: perfect routing's speed."""
        best = self.best
        seconds = sum(p.tokens / self.phase_best(i).phases[i].rate
                      for i, p in enumerate(best.phases))
        return sum(p.tokens for p in best.phases) / seconds


def load(path: Path) -> list[Workload]:
    data: Mapping[str, Any] = json.loads(path.read_text())
    out = []
    for batch in data["batches"]:
        runs = [Run(r["setup"], r["workload"],
                    sum(p["front_end_cpu_s"] for p in r["phases"]),
                    tuple(Phase(p["name"], p["tokens"], p["seconds"], lat, p["served_by"],
                                p["moves"], p["decided"])
                          for p, lat in zip(r["phases"], r["latency"], strict=True)))
                for r in batch]
        for name in dict.fromkeys(r.workload for r in runs):
            these = tuple(r for r in runs if r.workload == name)
            if any(r.setup.startswith("vllm:") for r in these):
                out.append(Workload(name, these))
    return out


def summary(workloads: Sequence[Workload]) -> list[str]:
    setups = list(dict.fromkeys(r.setup for w in workloads for r in w.singles))
    head = ["workload", *setups, "per-phase ceiling", "SpecGate auto", "auto / best single",
            "auto / vLLM plain"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        best, ceiling, auto, plain = w.best, w.ceiling, w.get(AUTO), w.get(PLAIN)
        cells = [f"`{w.name}`"]
        for setup in setups:
            run = w.get(setup)
            cells.append("" if run is None else
                         f"**{run.rate:.1f}**" if run is best else f"{run.rate:.1f}")
        cells.append(f"{ceiling:.1f} ({ceiling / best.rate:.2f}x)")
        if auto is None:
            cells += ["", "", ""]
        else:
            cells += [f"{auto.rate:.1f}", f"{auto.rate / best.rate:.2f}x",
                      "" if plain is None else f"{auto.rate / plain.rate:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def shortfalls(workloads: Sequence[Workload]) -> list[str]:
    """Auto's phases below 0.95x the phase's best server, and above 1.10x its TPOT."""
    lines = []
    for w in workloads:
        auto = w.get(AUTO)
        if auto is None:
            continue
        slow, tpot = [], []
        for i, p in enumerate(auto.phases):
            best = w.phase_best(i).phases[i]
            ratio = p.rate / best.rate if best.rate else 0.0
            served = ", ".join(f"{m} {n}" for m, n in p.served_by.items())
            if ratio < REUSE_FLOOR:
                reuse = " (reuses the prompt)" if p.name.split("@")[0] in REUSE else ""
                slow.append(f"{p.name} {ratio:.2f}x{reuse}: served by {served}, "
                            f"{p.moves} moves")
            fastest = min((s.phases[i].tpot_p50 for s in w.singles if s.phases[i].tpot_p50),
                          default=0.0)
            if fastest and p.tpot_p50 > TPOT_CEILING * fastest:
                tpot.append(f"{p.name} {p.tpot_p50 / fastest:.2f}x")
        lines.append(f"- `{w.name}`: below {REUSE_FLOOR:.2f}x the phase's best server: "
                     + ("; ".join(slow) or "none") + f". TPOT p50 above {TPOT_CEILING:.2f}x "
                     "the phase's fastest: " + (", ".join(tpot) or "none") + ".")
    return lines


def printed(run: Run) -> list[str]:
    """The run as ``bench.peer`` prints it."""
    lines = [f"{run.setup:22} {run.workload:8} {run.rate:7.1f} tok/s  front end "
             f"{run.front_end_ms:5.0f} ms CPU/1k tokens"]
    for p in run.phases:
        lat = p.latency
        extra = f"  {dict(p.served_by)} moves {p.moves} {dict(p.decided)}" \
            if run.setup == AUTO and p.served_by else ""
        lines.append(f"    {p.name:14} {p.rate:7.1f} tok/s  TTFT p50/p99 "
                     f"{lat.get('ttft_p50_ms', 0):6.0f}/{lat.get('ttft_p99_ms', 0):6.0f} ms  "
                     f"TPOT p50/p99 {lat.get('tpot_p50_ms', 0):5.1f}/"
                     f"{lat.get('tpot_p99_ms', 0):5.1f} ms{extra}")
    return lines


def render(files: Sequence[Path], title: str, note: str = "") -> str:
    workloads = [w for f in files for w in load(f)]
    out = [f"# {title}", ""]
    if note:
        out += [note.strip(), ""]
    out += ["## Summary", "", *summary(workloads), "",
            "Completion tokens/s over the whole workload; bold: the best single server; "
            "the per-phase ceiling runs each phase at its best single server's rate.", "",
            *shortfalls(workloads), "", "## Runs", ""]
    for w in workloads:
        out += [f"### `{w.name}`", "", "```"]
        for run in w.runs:
            out += printed(run)
        out += ["```", ""]
    return "\n".join(out)


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--title", default="bench.peer")
    parser.add_argument("--note", default="", help="what ran and how to rerun it")
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.out.write_text(render(args.runs, args.title, args.note))


if __name__ == "__main__":
    main()
