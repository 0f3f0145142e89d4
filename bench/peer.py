"""SpecGate against what a user would run instead: vLLM's own OpenAI server.

Each set-up serves the embedded model on this whole machine, one after another,
and gets the same phased workloads from the same client (the official ``openai``
SDK, streaming, greedy, closed loop: each phase keeps ``c`` requests in flight
until its requests are done). No workload-class labels are sent: callers do not
send them. The set-ups:

* ``vllm:<method>``: ``python -m vllm.entrypoints.openai.api_server`` with one
  decoding method (plain, n-gram, EAGLE-3, DFlash, and EAGLE-3 / DFlash with a
  K table), the drafters SpecGate ships, the same engine arguments as SpecGate's;
* ``specgate:auto``: ``specgate serve`` as ``make serve`` starts it, measured
  first after start (cold: nothing learned), then ``specgate:<mode>`` forced by
  header on the same process.

It prints each set-up's whole-run completion tokens/s and per phase, the per-phase
ceiling (each phase at the best vLLM server's rate for it: what perfect routing
between single-method servers would reach), and the summary line

    peer_auto_vs_best_single=… peer_auto_vs_ceiling=… peer_standard_vs_vllm=… peer_eagle3_vs_vllm=…

    .venv/bin/python -m bench.peer [--workloads mixed,light] [--setups ...] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import openai

from bench.peer_servers import SETUPS, Server, start_server
from bench.peer_workloads import PROMPTS, WORKLOADS, Phase

OUT = Path("bench/out/peer.json")


@dataclass
class PhaseResult:
    name: str
    tokens: int
    seconds: float
    served_by: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class Run:
    setup: str
    workload: str
    phases: list[PhaseResult]

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.phases)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


async def one(client: openai.AsyncOpenAI, model: str, prompt: str, max_tokens: int,
              headers: dict[str, str]) -> tuple[int, str]:
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_headers=headers)
    tokens = 0
    async for chunk in raw.parse():
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return tokens, raw.headers.get("x-spec-mode", "")


async def run_phase(client: openai.AsyncOpenAI, model: str, phase: Phase, max_tokens: int,
                    headers: dict[str, str]) -> PhaseResult:
    queue = list(reversed(phase.prompts()))
    served: dict[str, int] = {}
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while queue:
            got, mode = await one(client, model, queue.pop(), max_tokens, headers)
            tokens += got
            served[mode] = served.get(mode, 0) + 1

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(phase.concurrency)))
    return PhaseResult(phase.name, tokens, time.monotonic() - began,
                       {m: n for m, n in served.items() if m})


async def run_workload(url: str, setup: str, workload: str, max_tokens: int,
                       mode: str | None) -> Run:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=900)
    model = (await client.models.list()).data[0].id
    headers = {"x-spec-mode": mode} if mode else {}
    phases = [await run_phase(client, model, phase, max_tokens, headers)
              for phase in WORKLOADS[workload]]
    await client.close()
    run = Run(setup, workload, phases)
    print(f"{setup:22} {workload:6} {run.tokens_per_s:7.1f} tok/s  "
          + "  ".join(f"{p.name} {p.tokens_per_s:.1f}"
                      + (f" {p.served_by}" if mode is None and p.served_by else "")
                      for p in phases), flush=True)
    return run


async def warm_up(url: str, max_tokens: int, mode: str | None) -> None:
    """Two short requests (not measured): first requests pay one-off allocations."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=900)
    model = (await client.models.list()).data[0].id
    headers = {"x-spec-mode": mode} if mode else {}
    for prompt in (PROMPTS["chat"][0], PROMPTS["code"][0]):
        await one(client, model, prompt, min(max_tokens, 16), headers)
    await client.close()


def measure(setups: list[str], workloads: list[str], max_tokens: int, log_dir: Path) -> list[Run]:
    runs: list[Run] = []
    vllm = [s for s in setups if s.startswith("vllm:")]
    gateway = [s for s in setups if s.startswith("specgate:")]
    for setup in vllm:
        with start_server(SETUPS[setup], log_dir / f"{setup.replace(':', '-')}.log") as server:
            runs += _measure_server(server, [setup], workloads, max_tokens)
    if gateway:
        # auto first, on a fresh process: what a user gets after `make serve`.
        gateway.sort(key=lambda s: s != "specgate:auto")
        with start_server(SETUPS["specgate:auto"], log_dir / "specgate.log") as server:
            runs += _measure_server(server, gateway, workloads, max_tokens)
    return runs


def _measure_server(server: Server, setups: list[str], workloads: list[str],
                    max_tokens: int) -> list[Run]:
    runs = []
    for setup in setups:
        mode = setup.split(":", 1)[1] if setup.startswith("specgate:") else None
        mode = None if mode == "auto" else mode
        if mode is not None or setup.startswith("vllm:"):
            asyncio.run(warm_up(server.url, max_tokens, mode))
        for workload in workloads:
            runs.append(asyncio.run(run_workload(server.url, setup, workload, max_tokens, mode)))
    return runs


def summarize(runs: list[Run], workloads: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    worst_single, worst_ceiling = float("inf"), float("inf")
    for workload in workloads:
        these = [r for r in runs if r.workload == workload]
        singles = [r for r in these if r.setup.startswith("vllm:")]
        auto = next((r for r in these if r.setup == "specgate:auto"), None)
        if not singles:
            continue
        best = max(singles, key=lambda r: r.tokens_per_s)
        # Each phase at its best single server's rate: the time perfect routing would take.
        ceiling_s = sum(p.tokens / max(s.phases[i].tokens_per_s for s in singles)
                        for i, p in enumerate(best.phases))
        ceiling = best.tokens / ceiling_s
        print(f"{workload}: best single {best.setup} {best.tokens_per_s:.1f} tok/s, "
              f"per-phase ceiling {ceiling:.1f} tok/s", flush=True)
        out[f"{workload}_best_single"] = best.tokens_per_s
        out[f"{workload}_ceiling"] = ceiling
        if auto is not None:
            worst_single = min(worst_single, auto.tokens_per_s / best.tokens_per_s)
            worst_ceiling = min(worst_ceiling, auto.tokens_per_s / ceiling)
        for mode, peer in (("standard", "vllm:plain"), ("eagle3", "vllm:eagle3")):
            ours = next((r for r in these if r.setup == f"specgate:{mode}"), None)
            theirs = next((r for r in these if r.setup == peer), None)
            if ours and theirs:
                key = f"peer_{mode}_vs_vllm"
                out[key] = min(out.get(key, float("inf")),
                               ours.tokens_per_s / theirs.tokens_per_s)
    if worst_single != float("inf"):
        out["peer_auto_vs_best_single"] = worst_single
        out["peer_auto_vs_ceiling"] = worst_ceiling
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in SETUPS] + [w for w in workloads
                                                         if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs = measure(setups, workloads, args.max_tokens, args.out.parent)
    summary = summarize(runs, workloads)
    args.out.write_text(json.dumps({"runs": [asdict(r) for r in runs], "summary": summary},
                                   indent=1))
    line = " ".join(f"{k}={v:.3f}" for k, v in summary.items() if k.startswith("peer_"))
    print(line, flush=True)


if __name__ == "__main__":
    main()
