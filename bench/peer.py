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

It prints each set-up's whole-run completion tokens/s and per phase, per batch the
per-phase ceiling (each phase at the best vLLM server's rate for it: what perfect
routing between single-method servers would reach), and the summary line

    peer_auto_vs_best_single=… peer_auto_vs_ceiling=… peer_standard_vs_vllm=… peer_eagle3_vs_vllm=…

    .venv/bin/python -m bench.peer [--workloads mixed,light] [--setups ...] [--max-tokens 128]
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
from bench.peer_workloads import PROMPTS, WORKLOADS, Phase

OUT = Path("bench/out/peer.json")


@dataclass
class PhaseResult:
    name: str
    tokens: int
    seconds: float
    served_by: dict[str, int] = field(default_factory=dict)
    front_end_cpu_s: float = 0.0

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

    @property
    def front_end_ms_per_1k_tokens(self) -> float:
        """The HTTP front end's own CPU time per 1,000 completion tokens."""
        cpu = sum(p.front_end_cpu_s for p in self.phases)
        return 1e6 * cpu / self.tokens if self.tokens else 0.0


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
            await one(client, model, prompt, min(max_tokens, 16),
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


async def run_batch(servers: dict[str, Server], workload: str, max_tokens: int
                    ) -> list[Run]:
    """Every phase on every set-up in turn, the order rotating by phase."""
    clients = {setup: client_for(server.url) for setup, server in servers.items()}
    models = {setup: (await c.models.list()).data[0].id for setup, c in clients.items()}
    order = list(servers)
    phases: dict[str, list[PhaseResult]] = {setup: [] for setup in order}
    for i, phase in enumerate(WORKLOADS[workload]):
        for setup in order[i % len(order):] + order[:i % len(order)]:
            mode = forced_mode(setup)
            headers = {"x-spec-mode": mode} if mode else {}
            cpu = servers[setup].front_end_cpu_s()
            result = await run_phase(clients[setup], models[setup], phase, max_tokens,
                                     headers)
            result.front_end_cpu_s = servers[setup].front_end_cpu_s() - cpu
            phases[setup].append(result)
    for c in clients.values():
        await c.close()
    runs = [Run(setup, workload, phases[setup]) for setup in order]
    for run in runs:
        auto = run.setup == "specgate:auto"
        print(f"{run.setup:22} {workload:6} {run.tokens_per_s:7.1f} tok/s  front end "
              f"{run.front_end_ms_per_1k_tokens:5.0f} ms CPU/1k tokens  "
              + "  ".join(f"{p.name} {p.tokens_per_s:.1f}"
                          + (f" {p.served_by}" if auto and p.served_by else "")
                          for p in run.phases), flush=True)
    return runs


def measure(setups: list[str], workloads: list[str], max_tokens: int,
            log_dir: Path) -> list[list[Run]]:
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
                        for run in asyncio.run(run_batch(servers, workload, max_tokens))])
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
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in SETUPS] + [w for w in workloads
                                                         if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    measured = measure(setups, workloads, args.max_tokens, args.out.parent)
    summary = summarize(measured, workloads)
    args.out.write_text(json.dumps({"batches": [[asdict(r) for r in runs] for runs in measured],
                                    "summary": summary}, indent=1))
    line = " ".join(f"{k}={v:.3f}" for k, v in summary.items() if k.startswith("peer_"))
    print(line, flush=True)


if __name__ == "__main__":
    main()
