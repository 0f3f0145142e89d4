"""How long the routing decision takes per request, with each policy store.

Times ``Dispatcher.decide`` (live engine stats, the learned-state lookups, the
adaptive policy's cost model, the audit entry) over many calls, with learned
state for several modes and workload classes. With Redis, the shared state's
background sync runs against a real Redis on loopback during the measurement,
as it does in the gateway. Prints p50 / p99 / max per store.

    .venv/bin/python -m bench.decision_latency [--calls 20000] [--redis-url redis://...]

Without --redis-url a private redis-server is started on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import socket
import statistics
import subprocess
import time

from policies.adaptive import AdaptivePolicy
from policies.shared_state import SharedPolicyState
from policies.store.base import PolicyStore
from policies.store.memory import MemoryStore
from service.dispatch import Dispatcher
from service.mode_info import ModeInfo
from tests.fakes.engine import FakeEngine

MODES = {"standard": ModeInfo(), "ngram": ModeInfo("ngram", 4),
         "eagle3": ModeInfo("eagle3", 3), "dflash": ModeInfo("dflash", 4)}
CLASSES = ["default", "chat", "code", "math", "copy"]


async def measure(store: PolicyStore, calls: int, classes: int = len(CLASSES),
                  in_flight: int = 0) -> list[float]:
    """``classes`` workload classes with learned state; ``in_flight`` requests of
    them held open in the engines (the policy prices each group's mix)."""
    names = (CLASSES + [f"class-{i}" for i in range(classes)])[:classes]
    state = SharedPolicyState(store, "bench")
    engines = {m: FakeEngine(m, speculative=info.method is not None) for m, info in MODES.items()}
    for engine in engines.values():
        await engine.start()
    dispatcher = Dispatcher(engines, AdaptivePolicy(), state, MODES, rng=random.Random(0))
    now = time.time()
    for cls in names:
        for mode in ("ngram", "eagle3", "dflash"):
            for _ in range(20):
                state.observe(mode, cls, 10, 40, random.randint(0, 40), 200, now)
    await state.sync_once()
    for i in range(in_flight):   # admitted, not finished: counted per mode and class
        mode = list(MODES)[i % len(MODES)]
        dispatcher.admission.admit(mode, names[i % len(names)])
    sync = asyncio.create_task(state.run())
    samples = []
    try:
        for i in range(calls):
            begin = time.perf_counter_ns()
            dispatcher.decide(None, 120, None if i % 3 else 256, names[i % len(names)],
                              f"req-{i}")
            samples.append((time.perf_counter_ns() - begin) / 1000)
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the sync loop run, as other requests would
    finally:
        sync.cancel()
        await asyncio.gather(sync, return_exceptions=True)
    return samples


def report(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    print(f"{name:28s} calls={len(ordered):6d}  p50={p50:7.1f} µs  p99={p99:7.1f} µs  "
          f"max={ordered[-1]:8.1f} µs")


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server not found; pass --redis-url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--bind", "127.0.0.1"],
                            stdout=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


async def main(args: argparse.Namespace) -> None:
    from policies.store.redis_store import RedisStore

    report("in-memory store", await measure(MemoryStore(), args.calls))
    # How it scales: with the most workload classes the state keeps (max_classes, 64)
    # and with many requests in flight across them.
    report("in-memory, 64 classes", await measure(MemoryStore(), args.calls, classes=64))
    report("in-memory, 64 cls, 256 open", await measure(MemoryStore(), args.calls, classes=64,
                                                         in_flight=256))
    proc = None
    url = args.redis_url
    if url is None:
        proc, url = start_redis()
    try:
        store = RedisStore(url, prefix=f"bench{time.time_ns()}")
        report("redis store (loopback)", await measure(store, args.calls))
        began = time.perf_counter()
        for _ in range(200):
            await store.read_state()
        print(f"(background sync read_state round trip: "
              f"{(time.perf_counter() - began) / 200 * 1000:.2f} ms, off the request path)")
        await store.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--redis-url")
    asyncio.run(main(parser.parse_args()))
