"""The real CPU sweep: every mode forced by header versus ``auto``, side by side.

The gateway serves the embedded model with its four vLLM CPU engines; closed-loop
clients (the official ``openai`` SDK over HTTP, streaming) keep ``c`` requests in
flight for c = 1, 2, 4, 8, 16, on three workloads sent as three workload classes:

* ``copy``: the answer repeats text from the prompt, where n-gram prompt lookup
  drafts well;
* ``free``: open-ended creative writing, where the shipped trained EAGLE-3 drafter
  accepts less than on the held-out chat prompts (about 1.5 tokens per verification
  step, against 1.9 there: docs/drafters.md) and, on answers this short, runs close
  to plain decoding at low concurrency; plain decoding wins at high; n-gram stays
  close to plain decoding (the small model repeats itself, so prompt lookup matches
  some of its output);
* ``code``: short Python functions to write, the kind the trained drafters accept
  most on (held-out code prompts: EAGLE-3 about 2.3 tokens per verification step),
  with little in the prompt for n-gram lookup to copy.

At each (workload, c) the five policies run back to back in one block (the four
forced modes and ``auto``), in four rounds of alternating order, so that machine
noise hits them alike (with two rounds, 8 requests a cell, the same engine measured
up to 20% apart within one cell on a noisy machine; each round starts at the prompt
where the last one ended, so every prompt is sent about equally); ``auto`` learns
from what every finished request measured, forced ones included, just as in
production. Every mode serves one request per workload first (warm-up, not
measured), and each cell starts once every engine is idle, plus a second.
Throughput is completion tokens per second of wall time. Each ``auto`` request's
``x-spec-decision`` header (why the policy chose its mode, with its cost margin) is
kept in the cells, in the order the requests were sent, and printed with each cell.

    .venv/bin/python -m bench.cpu_sweep [--requests-per-client 1] [--max-tokens 32] [--rounds 4]
        [--workloads copy,free,code] [--concurrency 1,2,4,8,16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import openai

from bench.gateway_process import GatewayProcess

CONCURRENCY = (1, 2, 4, 8, 16)
POLICIES = ("standard", "ngram", "eagle3", "dflash", "auto")
PASSAGES = (
    "The committee met on Tuesday to review the budget for the new library, the repairs "
    "to the bridge on Mill Street, and the schedule for the summer festival in the park.",
    "To reset the router, unplug it, wait thirty seconds, plug it back in, and wait until "
    "the green light on the front panel stops blinking before you connect again.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen inside the "
    "chloroplasts of plant cells, and it feeds almost every food chain on Earth.",
)
FREE = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe your ideal weekend in a few sentences.",
    "Invent a new board game and explain how to win it.",
    "Write a poem about autumn leaves and the first frost.",
)
CODE = (
    "Write a Python function `is_palindrome(text)` that returns True when the text reads "
    "the same backwards, ignoring case and spaces.",
    "Write a Python function `word_counts(text)` that returns a dict mapping each word in "
    "the text to how many times it occurs.",
    "Implement `flatten(items)` in Python: it takes a list that may contain nested lists "
    "and returns one flat list of all the values.",
    "Write a Python function `fahrenheit_to_celsius(f)` that converts a temperature and "
    "rounds it to one decimal place.",
)
WORKLOADS = {
    "copy": [f"Repeat the following text word for word.\n\n{p}" for p in PASSAGES],
    "free": list(FREE),
    "code": list(CODE),
}


@dataclass
class Cell:
    workload: str
    concurrency: int
    policy: str
    tokens: int
    seconds: float
    latencies: list[float]
    served_by: dict[str, int]
    decisions: list[str] = field(default_factory=list)  # auto's x-spec-decision, as sent
    rounds: list[float] = field(default_factory=list)   # tokens/s of each round's block

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(q * len(lat)))]


async def one(client: openai.AsyncOpenAI, model: str, prompt: str, workload: str,
              policy: str, max_tokens: int) -> tuple[int, float, str, str]:
    began = time.monotonic()
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_headers={"x-spec-mode": policy, "x-workload-class": workload})
    tokens = 0
    async for chunk in raw.parse():
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return (tokens, time.monotonic() - began, raw.headers.get("x-spec-mode", "?"),
            raw.headers.get("x-spec-decision", ""))


def requests_per_client(concurrency: int, per_client: int) -> int:
    """At least ``per_client`` each, and at least 4 in all per round (16 over the
    default four rounds): a cell of 1–2 requests would measure one prompt's length
    more than the mode's speed."""
    return max(per_client, -(-4 // concurrency))


async def warm_up(client: openai.AsyncOpenAI, model: str, max_tokens: int,
                  workloads: tuple[str, ...]) -> None:
    """One request per mode and measured workload before measuring: an engine's first
    requests pay one-off costs (allocations, kernel selection) that are not speed."""
    for workload in workloads:
        for policy in POLICIES[:-1]:
            await one(client, model, WORKLOADS[workload][0], workload, policy, max_tokens)


async def settle(url: str) -> None:
    """Until every engine is idle, then a second more: a CPU engine keeps its core
    busy for a while after its last request (seen: the cell right after DFlash
    on the same core ran up to 2x slower), which must not be billed to the next
    policy measured."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for _ in range(120):
            engines = (await http.get("/ready")).json()["engines"].values()
            if all(e["in_flight"] == e["running"] == e["waiting"] == 0 for e in engines):
                break
            await asyncio.sleep(0.25)
    await asyncio.sleep(1.0)


async def run_cell(client: openai.AsyncOpenAI, model: str, workload: str, concurrency: int,
                   policy: str, per_client: int, max_tokens: int, round_no: int = 0) -> Cell:
    prompts = WORKLOADS[workload]
    per_client = requests_per_client(concurrency, per_client)
    first = round_no * concurrency * per_client   # each round goes on where the last ended
    # (when sent, the result): the cell keeps its requests in the order they were sent,
    # so that auto's decisions read in the order they were made.
    sent: list[tuple[float, tuple[int, float, str, str]]] = []

    async def worker(w: int) -> None:
        for k in range(per_client):
            prompt = prompts[(first + w * per_client + k) % len(prompts)]
            at = time.monotonic()
            sent.append((at, await one(client, model, prompt, workload, policy, max_tokens)))

    began = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    seconds = time.monotonic() - began
    results = [r for _, r in sorted(sent, key=lambda x: x[0])]
    served: dict[str, int] = {}
    for _, _, mode, _ in results:
        served[mode] = served.get(mode, 0) + 1
    return Cell(workload, concurrency, policy, sum(r[0] for r in results), seconds,
                [r[1] for r in results], served,
                [r[3] for r in results] if policy == "auto" else [])


async def sweep(url: str, per_client: int, max_tokens: int,
                concurrency: tuple[int, ...], rounds: int,
                workloads: tuple[str, ...] = tuple(WORKLOADS)) -> list[Cell]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=600)
    model = (await client.models.list()).data[0].id
    await warm_up(client, model, max_tokens, workloads)
    cells = []
    for c in concurrency:
        for workload in workloads:
            # Rounds in alternating order (forward, then backward, ...): a drift in the
            # machine's speed during a block then favours no policy.
            parts: dict[str, list[Cell]] = {p: [] for p in POLICIES}
            for r in range(rounds):
                for policy in POLICIES if r % 2 == 0 else POLICIES[::-1]:
                    await settle(url)
                    parts[policy].append(await run_cell(client, model, workload, c, policy,
                                                        per_client, max_tokens, r))
            for policy in POLICIES:
                cell = merge(parts[policy])
                print(f"{workload:5} c={c:2} {policy:8} {cell.tokens_per_s:7.1f} tok/s  "
                      f"p50 {cell.pct(0.5):5.2f} s  served by {cell.served_by}"
                      + (f"  decisions {cell.decisions}" if cell.decisions else ""), flush=True)
                cells.append(cell)
    await client.close()
    return cells


def merge(parts: list[Cell]) -> Cell:
    served: dict[str, int] = {}
    for p in parts:
        for mode, n in p.served_by.items():
            served[mode] = served.get(mode, 0) + n
    first = parts[0]
    return Cell(first.workload, first.concurrency, first.policy, sum(p.tokens for p in parts),
                sum(p.seconds for p in parts), [x for p in parts for x in p.latencies], served,
                [d for p in parts for d in p.decisions], [p.tokens_per_s for p in parts])


def auto_vs_best(cells: list[Cell]) -> dict[tuple[str, int], float]:
    """auto's throughput over the best forced mode's, per (workload, concurrency)."""
    ratios = {}
    for key in {(c.workload, c.concurrency) for c in cells}:
        group = {c.policy: c.tokens_per_s for c in cells if (c.workload, c.concurrency) == key}
        best = max(v for p, v in group.items() if p != "auto")
        ratios[key] = group["auto"] / best
    return ratios


def round_ratios(cells: list[Cell]) -> dict[tuple[str, int], list[float]]:
    """auto over the best forced mode within each round, per (workload, concurrency):
    a round's five blocks run back to back, so the spread of these is how far one
    cell's figure moves with the machine alone. Empty where the cells do not carry
    their rounds (sweeps written before the rounds were kept)."""
    out = {}
    for key in {(c.workload, c.concurrency) for c in cells}:
        group = {c.policy: c.rounds for c in cells if (c.workload, c.concurrency) == key}
        n = {len(r) for r in group.values()}
        if len(n) != 1 or 0 in n:
            out[key] = []
            continue
        out[key] = [group["auto"][r] / max(v[r] for p, v in group.items() if p != "auto")
                    for r in range(n.pop())]
    return out


def markdown(cells: list[Cell]) -> str:
    ratios, per_round = auto_vs_best(cells), round_ratios(cells)
    head = " | ".join(POLICIES)
    lines = [f"| workload | c | {head} | auto / best forced | per round | auto served by |",
             "|---|---|" + "---|" * (len(POLICIES) + 3)]
    for workload in _measured(cells):
        for c in sorted({x.concurrency for x in cells}):
            row = {x.policy: x for x in cells if (x.workload, x.concurrency) == (workload, c)}
            tps = " | ".join(f"{row[p].tokens_per_s:.1f}" for p in POLICIES)
            served = ", ".join(f"{m} {n}" for m, n in sorted(row["auto"].served_by.items()))
            rounds = per_round[(workload, c)]
            spread = f"{min(rounds):.2f}–{max(rounds):.2f}" if rounds else "–"
            lines.append(f"| {workload} | {c} | {tps} | {ratios[(workload, c)]:.2f} | "
                         f"{spread} | {served} |")
    lines += ["", "Completion tokens/s (streamed, wall time). Latency p50 / p99 (s):", "",
              "| workload | c | " + " | ".join(POLICIES) + " |",
              "|---|---|" + "---|" * len(POLICIES)]
    for workload in _measured(cells):
        for c in sorted({x.concurrency for x in cells}):
            row = {x.policy: x for x in cells if (x.workload, x.concurrency) == (workload, c)}
            lat = " | ".join(f"{row[p].pct(0.5):.2f} / {row[p].pct(0.99):.2f}" for p in POLICIES)
            lines.append(f"| {workload} | {c} | {lat} |")
    return "\n".join(lines)


def _measured(cells: list[Cell]) -> list[str]:
    return [w for w in WORKLOADS if any(c.workload == w for c in cells)]


def plot(cells: list[Cell], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for workload in _measured(cells):
        fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4))
        for policy in POLICIES:
            row = sorted((x for x in cells if x.workload == workload and x.policy == policy),
                         key=lambda x: x.concurrency)
            cs = [x.concurrency for x in row]
            style = {"linewidth": 2.5, "color": "black"} if policy == "auto" else {}
            ax_t.plot(cs, [x.tokens_per_s for x in row], marker="o", label=policy, **style)
            ax_l.plot(cs, [x.pct(0.5) for x in row], marker="o", label=f"{policy} p50", **style)
            ax_l.plot(cs, [x.pct(0.99) for x in row], linestyle="--", alpha=0.5, **style)
        for ax, label in ((ax_t, "completion tokens/s"), (ax_l, "latency (s), p50 solid, "
                                                                "p99 dashed")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent requests")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        ax_t.legend()
        fig.suptitle(f"Real vLLM CPU engines, embedded model, workload '{workload}'")
        fig.tight_layout()
        path = out / f"cpu_sweep_{workload}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def run(out: Path, per_client: int = 1, max_tokens: int = 32,
        concurrency: tuple[int, ...] = CONCURRENCY, url: str | None = None,
        rounds: int = 4, workloads: tuple[str, ...] = tuple(WORKLOADS)) -> list[Cell]:
    out.mkdir(parents=True, exist_ok=True)
    if url is not None:
        cells = asyncio.run(sweep(url, per_client, max_tokens, concurrency, rounds,
                                  workloads))
    else:
        with GatewayProcess(out / "cpu_sweep.gateway.log",
                            {"SPECGATE_MAX_MODEL_LEN": "1024"}) as gateway:
            cells = asyncio.run(sweep(gateway.url, per_client, max_tokens, concurrency,
                                        rounds, workloads))
    (out / "cpu_sweep.json").write_text(json.dumps(
        [asdict(c) | {"tokens_per_s": c.tokens_per_s} for c in cells], indent=1))
    return cells


def load(path: Path) -> list[Cell]:
    """Cells written by ``run`` (its ``cpu_sweep.json``)."""
    rows = json.loads(path.read_text())
    return [Cell(r["workload"], r["concurrency"], r["policy"], r["tokens"], r["seconds"],
                 r["latencies"], r["served_by"], r.get("decisions", []), r.get("rounds", []))
            for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-client", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--url", help="a running gateway (else one is started here)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/cpu"))
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)),
                        help="comma-separated concurrency levels")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    args = parser.parse_args()
    workloads = tuple(args.workloads.split(","))
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    cells = run(args.out, args.requests_per_client, args.max_tokens,
                tuple(int(c) for c in args.concurrency.split(",")), url=args.url,
                rounds=args.rounds, workloads=workloads)
    plot(cells, args.out)
    text = markdown(cells)
    (args.out / "cpu_sweep.md").write_text(text + "\n")
    print(text)
    ratios = auto_vs_best(cells).values()
    per_round = [statistics.median(r) for r in round_ratios(cells).values() if r]
    print(f"cpu_auto_vs_best_min={min(ratios):.3f} median={statistics.median(ratios):.3f}"
          + (f" round_median_min={min(per_round):.3f}" if per_round else ""))


if __name__ == "__main__":
    main()
