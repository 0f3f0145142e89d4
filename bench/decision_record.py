"""Record every routing decision and move the dispatcher makes on a scripted run.

A refactor of the request path must not change a single decision. This drives a
``Dispatcher`` (adaptive policy, a mover, one exclusive device group of four
modes, prompt lookup replayed) through phases of arrivals at rising and falling
load, on fake engines that advance one token per tick, with a fake clock and a
seeded draw: the run is deterministic. It prints the log's SHA-256 and writes
the log as JSON; run it before and after a change and compare.

    .venv/bin/python -m bench.decision_record [--out bench/out/decisions.json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from engines.events import Finished, GenerationEvent, SpecDecodeSummary, TextDelta
from engines.prompt_lookup import LookupParams
from engines.request import GenerationRequest, SamplingOptions
from engines.stats import EngineStats
from policies.adaptive import AdaptivePolicy
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from service.dispatch import Dispatcher
from service.mode_info import ModeInfo
from service.moves import Mover
from service.stream import Completed, Move, OpenStream, Routing
from tests.fakes.engine import FakeEngine

MODES = {
    "standard": ModeInfo(gpu_group="cpu", exclusive=True),
    "ngram": ModeInfo("ngram", 4, gpu_group="cpu", exclusive=True,
                      lookup=LookupParams(2, 5, 4), card_tau={"copy": 3.0}),
    "eagle3": ModeInfo("eagle3", 3, gpu_group="cpu", exclusive=True,
                       card_tau={"chat": 1.9, "code": 2.1}),
    "dflash": ModeInfo("dflash", 4, gpu_group="cpu", exclusive=True),
}
ACCEPTANCE = {"standard": 0.0, "ngram": 0.3, "eagle3": 0.45, "dflash": 0.35}
# (workload class, requests, arrivals per tick, max_tokens)
PHASES = [("code", 6, 1, 48), ("copy", 8, 2, 40), ("chat", 24, 8, 64), ("code", 6, 2, 48),
          ("chat", 40, 20, 64), ("copy", 10, 4, 40), ("chat", 12, 4, 64), ("code", 4, 1, 48)]


class TickedEngine(FakeEngine):
    """A fake engine whose requests emit their first token at once, then one a tick;
    its step grows with the batch (a drafter's faster), and its drafts are accepted
    by kind of prompt (the prompt's first token says which)."""

    def __init__(self, mode: str, tick: asyncio.Condition, **kwargs: object) -> None:
        super().__init__(mode, **kwargs)  # type: ignore[arg-type]
        self.tick = tick
        draft = 0.0 if mode == "standard" else 0.02 if mode == "ngram" else 0.25
        self.profile = tuple((b, 0.02 * (1 + draft) * (1 + 0.08 * b), 1)
                             for b in (1, 2, 4, 8, 16, 32))

    def stats(self) -> EngineStats:
        return replace(super().stats(), step_profile=self.profile)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        first = True
        kind = request.prompt_token_ids[0] if request.prompt_token_ids else 0
        async for event in super().generate(request):
            if isinstance(event, TextDelta) and not first:
                async with self.tick:
                    await self.tick.wait()
            if isinstance(event, Finished) and event.spec_decode is not None:
                s = event.spec_decode
                rate = self.acceptance * (0.5, 1.0, 1.4)[kind % 3]
                event = replace(event, spec_decode=SpecDecodeSummary(
                    s.num_drafts, s.num_draft_tokens, int(s.num_draft_tokens * min(rate, 0.9))))
            first = False
            yield event


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def record() -> list[dict[str, object]]:
    tick = asyncio.Condition()
    engines = {m: TickedEngine(m, tick, speculative=info.method is not None,
                               acceptance=ACCEPTANCE[m]) for m, info in MODES.items()}
    for engine in engines.values():
        await engine.start()
    log: list[dict[str, object]] = []
    clock = Clock()

    def decided(routing: Routing) -> None:
        d = routing.decision
        log.append({"t": clock.now, "decide": d.mode, "kind": d.kind.value, "reason": d.reason,
                    "margin": d.margin, "class": routing.workload_class})

    def moved(move: Move) -> None:
        log.append({"t": clock.now, "move": move.request_id, "from": move.source,
                    "to": move.target, "tokens": move.tokens_so_far})

    def completed(done: Completed) -> None:
        log.append({"t": clock.now, "done": done.routing.decision.mode,
                    "tokens": done.finished.completion_tokens})

    dispatcher = Dispatcher(engines, AdaptivePolicy(), SharedPolicyState(MemoryStore(), "rec"),
                            MODES, clock=clock, rng=random.Random(7), observers=[completed],
                            decision_observers=[decided],
                            mover=Mover(lambda m: MODES[m].gpu_group, min_remaining_tokens=8),
                            move_observers=[moved])
    readers: list[asyncio.Task[None]] = []

    async def read(stream: OpenStream) -> None:
        async for _ in stream.events():
            pass

    n = 0
    rng = random.Random(11)
    for cls, count, per_tick, max_tokens in PHASES:
        sent = 0
        while sent < count or any(not r.done() for r in readers):
            for _ in range(min(per_tick, count - sent)):
                n += 1
                kind = {"chat": 3, "code": 4, "copy": 5}[cls]
                prompt = (kind, *(rng.randrange(1, 50) for _ in range(rng.randrange(8, 40))))
                if cls == "copy":   # the answer is in the prompt: prompt lookup drafts it
                    prompt = (*prompt, *range(1000, 1000 + max_tokens), 7)
                request = GenerationRequest(f"r{n}", prompt, SamplingOptions(
                    max_tokens=max_tokens, temperature=0.0))
                forced = "standard" if n % 9 == 0 else None
                routing = dispatcher.decide(forced, len(prompt), max_tokens, cls, f"r{n}")
                stream = await dispatcher.open(routing, request)
                readers.append(asyncio.create_task(read(stream)))
                sent += 1
            clock.now += 0.05
            async with tick:
                tick.notify_all()
            await settle()
        await asyncio.gather(*readers)
        readers.clear()
        clock.now += 1.0
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/out/decisions.json"))
    args = parser.parse_args()
    log = asyncio.run(record())
    text = json.dumps(log, indent=1, sort_keys=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    kinds = {key: sum(1 for e in log if key in e) for key in ("decide", "move", "done")}
    print(f"decisions={kinds['decide']} moves={kinds['move']} completed={kinds['done']} "
          f"sha256={hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
