"""Streaming throughput through the gateway vs the same engine driven directly.

One process, one vLLM engine (plain decoding on the embedded model). Each
round drives the engine directly through the ``Engine`` contract, then through
the gateway over real HTTP (uvicorn on loopback, SSE parsed by the client),
at each concurrency, alternating so that machine noise hits both sides alike.
Prints tokens/s for both and their ratio (gateway / direct; 1.0 = no overhead).

    .venv/bin/python -m bench.gateway_overhead [--rounds 3] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import time
import uuid
from pathlib import Path

import httpx
import uvicorn

from engines.base import Engine
from engines.embedded import prepare_embedded
from engines.engine_spec import EngineSpec
from engines.events import TextDelta
from engines.request import GenerationRequest, SamplingOptions
from engines.tokenizer import ChatTurn, HfTokenizer
from engines.vllm_engine import VllmEngine
from gateway.app import create_app
from service.runtime import Components
from service.settings import Settings

PROMPTS = [f"Write a short story about a {animal} who learns to {skill}."
           for animal in ("cat", "dog", "fox", "owl") for skill in ("swim", "sing")]


async def direct(engine: Engine, tokenizer: HfTokenizer, concurrency: int, requests: int,
                 max_tokens: int) -> tuple[int, float]:
    async def one(i: int) -> int:
        ids = tokenizer.render_chat([ChatTurn("user", PROMPTS[i % len(PROMPTS)])])
        request = GenerationRequest(uuid.uuid4().hex, tuple(ids),
                                    SamplingOptions(max_tokens=max_tokens, temperature=0.0))
        tokens = 0
        async for event in engine.generate(request):
            if isinstance(event, TextDelta):
                tokens += len(event.token_ids)
        return tokens

    return await _drive(one, concurrency, requests)


async def through_gateway(client: httpx.AsyncClient, model: str, concurrency: int,
                          requests: int, max_tokens: int) -> tuple[int, float]:
    async def one(i: int) -> int:
        body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]}
        tokens = 0
        async with client.stream("POST", "/v1/chat/completions", json=body,
                                 headers={"x-spec-mode": "standard"}) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        return tokens

    return await _drive(one, concurrency, requests)


async def _drive(one, concurrency: int, requests: int) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    queue = list(range(requests))
    total = 0

    async def worker() -> None:
        nonlocal total
        while queue:
            tokens = await one(queue.pop())  # not `total += await ...`: that loses updates
            total += tokens

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total, time.perf_counter() - began


async def main(args: argparse.Namespace) -> None:
    model = prepare_embedded(Path(args.cache_dir))
    tokenizer = HfTokenizer(str(model.target_dir))
    engine = VllmEngine(EngineSpec(mode="standard", model=str(model.target_dir),
                                   max_model_len=1024, kv_cache_bytes=512 * 1024**2,
                                   dtype=Settings().resolved_dtype()))
    print("starting the engine ...", flush=True)
    await engine.start()
    app = create_app(Settings(modes={"standard": {}}),  # type: ignore[dict-item]
                     components=Components(model.served_name, tokenizer, {"standard": engine},
                                           max_model_len=1024))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    results: dict[int, dict[str, list[float]]] = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
        await through_gateway(client, model.served_name, 1, 2, 8)  # warm-up
        for c in args.concurrency:
            results[c] = {"direct": [], "gateway": []}
            requests = max(c * 2, 4)
            for r in range(args.rounds):
                for side in ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct"):
                    if side == "direct":
                        tokens, wall = await direct(engine, tokenizer, c, requests,
                                                    args.max_tokens)
                    else:
                        tokens, wall = await through_gateway(client, model.served_name, c,
                                                             requests, args.max_tokens)
                    results[c][side].append(tokens / wall)
                    print(f"c={c} round {r} {side:8s} {tokens} tokens in {wall:.2f}s "
                          f"= {tokens / wall:.1f} tok/s", flush=True)
    server.should_exit = True
    await serving
    await engine.shutdown()
    print("\nconcurrency | direct tok/s | gateway tok/s | gateway/direct")
    for c, sides in results.items():
        d, g = statistics.median(sides["direct"]), statistics.median(sides["gateway"])
        print(f"{c:11d} | {d:12.1f} | {g:13.1f} | {g / d:14.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cache-dir", default=str(Settings().cache_dir))
    asyncio.run(main(parser.parse_args()))
