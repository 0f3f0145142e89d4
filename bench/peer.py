"""SpecGate against what a user would run instead: vLLM's own OpenAI server.

Each set-up serves the embedded model with the whole machine, and all get the same
phased workloads from the same client (the official ``openai`` SDK, streaming,
greedy, closed loop: each phase keeps ``c`` requests in flight until its requests
are done). No workload-class labels are sent: callers do not send them. The set-ups:

* ``vllm:<method>``: ``python -m vllm.entrypoints.openai.api_server`` with one
  decoding method (plain, n-gram, EAGLE-3, DFlash, and EAGLE-3 / DFlash with a
  K table), the drafters SpecGate ships, the same engine arguments as SpecGate's;
* ``specgate:auto``: ``specgate serve`` as ``make serve`` starts it, on a process of
  its own (cold: nothing learned when the workload starts);
* ``specgate:<mode>``: each mode forced by header, on another such process.

Side by side: the machines this runs on change speed from minute to minute, so a
batch of set-ups is started together (idle servers cost nothing) and each phase runs
on every set-up of the batch in turn, the order rotating from phase to phase, before
the next phase starts; every ratio compares set-ups measured within minutes of each
other. Memory bounds a batch (``BATCHES``): auto beside the single servers that set
the ceiling, the forced modes beside vLLM's servers of the same methods, DFlash's
servers; plain decoding runs in each.

``--order sequential`` runs as users send traffic instead: whole workloads, their
phases back to back, on one set-up after another (all of a batch up at once), the
set-ups' order rotating from round to round over ``--rounds`` rounds so that the
machine's drift cancels; a set-up then meets the transitions between phases that the
interleaved order hides.

It prints each set-up's whole-run completion tokens/s and per phase with TTFT and TPOT
p50 / p99, per batch the per-phase ceiling (each phase at the best vLLM server's rate
for it: what perfect routing between single-method servers would reach), and the
summary line

    peer_auto_vs_best_single=… peer_auto_vs_ceiling=… peer_standard_vs_vllm=… peer_eagle3_vs_vllm=…

    .venv/bin/python -m bench.peer [--workloads mixed,light,sharegpt,office] [--setups ...]
        [--order interleaved|sequential] [--rounds 2] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import openai

from bench.peer_servers import SETUPS, Server, start_server
from bench.peer_workloads import PROMPTS, WORKLOADS, Conversation, Phase, user
from sim.scenarios import percentile

OUT = Path("bench/out/peer.json")


@dataclass
class PhaseResult:
    name: str
    tokens: int
    seconds: float
    served_by: dict[str, int] = field(default_factory=dict)
    front_end_cpu_s: float = 0.0
    # Per request: seconds to the first token, and per output token after it.
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    moves: int = 0                       # requests moved between engines (SpecGate)
    # SpecGate: how each answer's mode was chosen (x-spec-decision: cost, hold, explore...).
    decided: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    def latency(self) -> dict[str, float]:
        """TTFT and TPOT p50 / p99, milliseconds."""
        return {f"{name}_{q}_ms": 1000 * percentile(values, p)
                for name, values in (("ttft", self.ttft_s), ("tpot", self.tpot_s))
                for q, p in (("p50", 0.5), ("p99", 0.99)) if values}


def merged(results: list[PhaseResult]) -> PhaseResult:
    """One phase's results over several rounds."""
    out = PhaseResult(results[0].name, 0, 0.0)
    for r in results:
        out.tokens += r.tokens
        out.seconds += r.seconds
        out.front_end_cpu_s += r.front_end_cpu_s
        out.moves += r.moves
        out.ttft_s += r.ttft_s
        out.tpot_s += r.tpot_s
        for mode, n in r.served_by.items():
            out.served_by[mode] = out.served_by.get(mode, 0) + n
        for kind, n in r.decided.items():
            out.decided[kind] = out.decided.get(kind, 0) + n
    return out


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

    @property
    def front_end_ms_per_1k_tokens(self) -> float:
        """The HTTP front end's own CPU time per 1,000 completion tokens."""
        cpu = sum(p.front_end_cpu_s for p in self.phases)
        return 1e6 * cpu / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Reply:
    tokens: int
    mode: str
    ttft_s: float | None
    total_s: float
    decision: str = ""

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.tokens < 2:
            return None
        return (self.total_s - self.ttft_s) / (self.tokens - 1)


async def one(client: openai.AsyncOpenAI, model: str, messages: Conversation,
              max_tokens: int, headers: dict[str, str]) -> Reply:
    began = time.monotonic()
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=list(messages), max_tokens=max_tokens,  # type: ignore[arg-type]
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_headers=headers)
    tokens, first = 0, None
    async for chunk in raw.parse():
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.monotonic() - began
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return Reply(tokens, raw.headers.get("x-spec-mode", ""), first, time.monotonic() - began,
                 raw.headers.get("x-spec-decision", "").split(":", 1)[0])


async def run_phase(client: openai.AsyncOpenAI, model: str, phase: Phase, max_tokens: int,
                    headers: dict[str, str]) -> PhaseResult:
    queue = list(reversed(phase.prompts()))
    result = PhaseResult(phase.name, 0, 0.0)

    async def worker() -> None:
        while queue:
            reply = await one(client, model, queue.pop(), max_tokens, headers)
            result.tokens += reply.tokens
            if reply.mode:
                result.served_by[reply.mode] = result.served_by.get(reply.mode, 0) + 1
            if reply.decision:
                result.decided[reply.decision] = result.decided.get(reply.decision, 0) + 1
            if reply.ttft_s is not None:
                result.ttft_s.append(reply.ttft_s)
            if reply.tpot_s is not None:
                result.tpot_s.append(reply.tpot_s)

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(phase.concurrency)))
    result.seconds = time.monotonic() - began
    return result


def client_for(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                              timeout=900)


async def warm_up(url: str, max_tokens: int, modes: list[str | None]) -> None:
    """Two short requests per mode (not measured): first requests pay one-off
    allocations."""
    client = client_for(url)
    model = (await client.models.list()).data[0].id
    for mode in modes:
        for prompt in (PROMPTS["chat"][0], PROMPTS["code"][0]):
            await one(client, model, user(prompt), min(max_tokens, 16),
                      {"x-spec-mode": mode} if mode else {})
    await client.close()


def forced_mode(setup: str) -> str | None:
    mode = setup.split(":", 1)[1] if setup.startswith("specgate:") else None
    return None if mode == "auto" else mode


# Side-by-side batches (see the module's notes), each under about 19 GB: a SpecGate
# process holds four engines (about 9.5 GB), a vLLM server one (about 3). Auto runs
# beside the servers that set the ceiling (EAGLE-3 alone drafts as its K-table
# server does at the batches where either drafts); plain decoding runs in every
# batch, the anchor between them.
BATCHES = (("vllm:plain", "vllm:ngram", "vllm:eagle3-ktable", "specgate:auto"),
           ("vllm:plain", "vllm:eagle3", "specgate:standard", "specgate:eagle3"),
           ("vllm:plain", "vllm:dflash", "vllm:dflash-ktable"))


def batches(setups: list[str]) -> list[list[str]]:
    """The selected set-ups in the batches that run side by side; a batch keeps its
    anchor only beside another selected set-up."""
    out, placed = [], set()
    for batch in BATCHES:
        chosen = [s for s in batch if s in setups]
        if any(s not in placed and s != "vllm:plain" for s in chosen):
            out.append(chosen)
            placed.update(chosen)
    rest = [s for s in setups if s not in placed]
    if rest:
        out.append(rest)
    return out or [list(setups)]


def rotated(items: list[str], by: int) -> list[str]:
    return items[by % len(items):] + items[:by % len(items)]


def schedule(setups: list[str], phases: int, order: str, rounds: int
             ) -> list[tuple[str, int]]:
    """(set-up, phase index) in the order they run. Interleaved: each phase on every
    set-up in turn, the order rotating by phase. Sequential: each set-up's whole
    workload, phases back to back, the set-ups' order rotating by round."""
    if order == "interleaved":
        return [(setup, i) for _ in range(rounds) for i in range(phases)
                for setup in rotated(setups, i)]
    return [(setup, i) for r in range(rounds) for setup in rotated(setups, r)
            for i in range(phases)]


async def run_batch(servers: dict[str, Server], workload: str, max_tokens: int,
                    order: str = "interleaved", rounds: int = 1) -> list[Run]:
    """The workload on every set-up of the batch, as ``schedule`` orders it."""
    clients = {setup: client_for(server.url) for setup, server in servers.items()}
    models = {setup: (await c.models.list()).data[0].id for setup, c in clients.items()}
    setups = list(servers)
    plan = WORKLOADS[workload]
    results: dict[str, list[list[PhaseResult]]] = {s: [[] for _ in plan] for s in setups}
    for setup, i in schedule(setups, len(plan), order, rounds):
        mode = forced_mode(setup)
        headers = {"x-spec-mode": mode} if mode else {}
        cpu = servers[setup].front_end_cpu_s()
        moves = servers[setup].moves() if setup.startswith("specgate:") else 0
        result = await run_phase(clients[setup], models[setup], plan[i], max_tokens, headers)
        result.front_end_cpu_s = servers[setup].front_end_cpu_s() - cpu
        if setup.startswith("specgate:"):
            result.moves = servers[setup].moves() - moves
        results[setup][i].append(result)
    for c in clients.values():
        await c.close()
    runs = [Run(setup, workload, [merged(r) for r in results[setup]]) for setup in setups]
    for run in runs:
        auto = run.setup == "specgate:auto"
        print(f"{run.setup:22} {workload:8} {run.tokens_per_s:7.1f} tok/s  front end "
              f"{run.front_end_ms_per_1k_tokens:5.0f} ms CPU/1k tokens", flush=True)
        for p in run.phases:
            lat = p.latency()
            print(f"    {p.name:14} {p.tokens_per_s:7.1f} tok/s  TTFT p50/p99 "
                  f"{lat.get('ttft_p50_ms', 0):6.0f}/{lat.get('ttft_p99_ms', 0):6.0f} ms  "
                  f"TPOT p50/p99 {lat.get('tpot_p50_ms', 0):5.1f}/"
                  f"{lat.get('tpot_p99_ms', 0):5.1f} ms"
                  + (f"  {p.served_by} moves {p.moves} {p.decided}"
                     if auto and p.served_by else ""),
                  flush=True)
    return runs


def measure(setups: list[str], workloads: list[str], max_tokens: int,
            log_dir: Path, order: str = "interleaved", rounds: int = 1) -> list[list[Run]]:
    """Per batch, its runs."""
    out = []
    for batch in batches(setups):
        with contextlib.ExitStack() as stack:
            servers: dict[str, Server] = {}
            forced: Server | None = None
            for setup in batch:
                if forced_mode(setup) is not None:
                    if forced is None:
                        forced = stack.enter_context(start_server(
                            SETUPS[setup], log_dir / "specgate-forced.log"))
                        asyncio.run(warm_up(forced.url, max_tokens,
                                            [forced_mode(x) for x in batch]))
                    servers[setup] = forced
                    continue
                name = setup.replace(":", "-")
                server = stack.enter_context(start_server(SETUPS[setup],
                                                          log_dir / f"{name}.log"))
                servers[setup] = server
                if setup != "specgate:auto":   # auto starts cold, as after `make serve`
                    asyncio.run(warm_up(server.url, max_tokens, [None]))
            out.append([run for workload in workloads
                        for run in asyncio.run(run_batch(servers, workload, max_tokens,
                                                         order, rounds))])
    return out


def summarize(batches_run: list[list[Run]], workloads: list[str]) -> dict[str, float]:
    """Each ratio within the batch that ran both sides; the worst over workloads."""
    out: dict[str, float] = {}
    for runs in batches_run:
        for workload in workloads:
            these = [r for r in runs if r.workload == workload]
            singles = [r for r in these if r.setup.startswith("vllm:")]
            if not singles:
                continue
            best = max(singles, key=lambda r: r.tokens_per_s)
            # Each phase at its best single server's rate: perfect routing's time.
            ceiling_s = sum(p.tokens / max(s.phases[i].tokens_per_s for s in singles)
                            for i, p in enumerate(best.phases))
            ceiling = best.tokens / ceiling_s
            print(f"{workload}: among {', '.join(r.setup for r in singles)}: best single "
                  f"{best.setup} {best.tokens_per_s:.1f} tok/s, per-phase ceiling "
                  f"{ceiling:.1f} tok/s", flush=True)
            auto = next((r for r in these if r.setup == "specgate:auto"), None)
            if auto is not None:
                out[f"{workload}_best_single"] = best.tokens_per_s
                out[f"{workload}_ceiling"] = ceiling
                _worst(out, "peer_auto_vs_best_single", auto.tokens_per_s / best.tokens_per_s)
                _worst(out, "peer_auto_vs_ceiling", auto.tokens_per_s / ceiling)
            for mode, peer in (("standard", "vllm:plain"), ("eagle3", "vllm:eagle3")):
                ours = next((r for r in these if r.setup == f"specgate:{mode}"), None)
                theirs = next((r for r in these if r.setup == peer), None)
                if ours and theirs:
                    _worst(out, f"peer_{mode}_vs_vllm", ours.tokens_per_s / theirs.tokens_per_s)
    return out


def _worst(out: dict[str, float], key: str, value: float) -> None:
    out[key] = min(out.get(key, float("inf")), value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--order", choices=("interleaved", "sequential"),
                        default="interleaved")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in SETUPS] + [w for w in workloads
                                                         if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    measured = measure(setups, workloads, args.max_tokens, args.out.parent, args.order,
                       args.rounds)
    summary = summarize(measured, workloads)
    args.out.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%d"), "order": args.order, "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "batches": [[{**asdict(r), "latency": [p.latency() for p in r.phases]}
                     for r in runs] for runs in measured],
        "summary": summary}, indent=1))
    line = " ".join(f"{k}={v:.3f}" for k, v in summary.items() if k.startswith("peer_"))
    print(line, flush=True)


if __name__ == "__main__":
    main()
