"""Sweep cells with the policy's own state read after each: what auto saw.

The CPU sweep (``bench/cpu_sweep.py``) says how fast each mode ran; this says why
``auto`` chose what it did. It runs the chosen cells the way the sweep does (rounds in
alternating order, each cell once every engine is idle) against a gateway started
with an admin key, and after each cell reads ``GET /admin/policy``: every engine's
step profile and live mean accepted length, and what is learned per class. Findings
in docs/policy.md came from it: n-gram's step at one batch costs more on copy-heavy
prompts than on free text ("N-gram's step depends on the class"), and a drafter
measured only alone looked too cheap at a larger batch ("Steps the profile has not
measured").

    .venv/bin/python -m bench.policy_trace --workloads free,copy --policies ngram,standard \\
        --concurrency 4,16 --rounds 2
    .venv/bin/python -m bench.policy_trace --workloads code --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import openai

from bench import cpu_sweep
from bench.gateway_process import GatewayProcess


async def trace(url: str, admin_key: str, workloads: tuple[str, ...],
                policies: tuple[str, ...], concurrency: tuple[int, ...], rounds: int,
                max_tokens: int) -> list[dict[str, Any]]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                timeout=600)
    admin = httpx.AsyncClient(base_url=url, timeout=10,
                              headers={"authorization": f"Bearer {admin_key}"})
    model = (await client.models.list()).data[0].id
    await cpu_sweep.warm_up(client, model, max_tokens, workloads)
    rows = []
    for c in concurrency:
        for r in range(rounds):
            for workload in workloads:
                for policy in policies if r % 2 == 0 else policies[::-1]:
                    await cpu_sweep.settle(url)
                    cell = await cpu_sweep.run_cell(client, model, workload, c, policy, 1,
                                                    max_tokens, r)
                    state = (await admin.get("/admin/policy")).json()
                    row = {"concurrency": c, "round": r, "workload": workload,
                           "policy": policy, "tokens_per_s": cell.tokens_per_s,
                           "served_by": cell.served_by, "decisions": cell.decisions,
                           "load": state["load"], "acceptance": state["acceptance"]}
                    print(_line(row), flush=True)
                    rows.append(row)
    await admin.aclose()
    await client.close()
    return rows


def _line(row: dict[str, Any]) -> str:
    """The cell, and each engine that served it: its step profile (batch: seconds)."""
    profiles = "; ".join(
        f"{mode} " + " ".join(f"{p['batch']}:{p['seconds']:.4f}"
                              for p in row["load"][mode]["step_profile"])
        for mode in row["served_by"])
    return (f"c={row['concurrency']:2} round {row['round']} {row['workload']:5} "
            f"{row['policy']:8} {row['tokens_per_s']:7.1f} tok/s  served by "
            f"{row['served_by']}  " + "".join(f"{d} " for d in row["decisions"])
            + f"profile {profiles}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="code",
                        help=f"comma-separated, of: {', '.join(cpu_sweep.WORKLOADS)}")
    parser.add_argument("--policies", default=",".join(cpu_sweep.POLICIES),
                        help="comma-separated modes to force, and/or auto")
    parser.add_argument("--concurrency", default="4", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("bench/out/policy_trace.json"))
    args = parser.parse_args()
    workloads = tuple(args.workloads.split(","))
    policies = tuple(args.policies.split(","))
    for name, given, known in (("workload", workloads, cpu_sweep.WORKLOADS),
                               ("policy", policies, cpu_sweep.POLICIES)):
        unknown = set(given) - set(known)
        if unknown:
            parser.error(f"unknown {name}(s): {', '.join(sorted(unknown))}")
    key = secrets.token_hex(16)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with GatewayProcess(args.out.with_suffix(".gateway.log"),
                        {"SPECGATE_MAX_MODEL_LEN": "1024",
                         "SPECGATE_ADMIN_KEY": key}) as gateway:
        rows = asyncio.run(trace(gateway.url, key, workloads, policies,
                                 tuple(int(c) for c in args.concurrency.split(",")),
                                 args.rounds, args.max_tokens))
    args.out.write_text(json.dumps(rows, indent=1))
    print(f"cells and policy state: {args.out}")


if __name__ == "__main__":
    main()
