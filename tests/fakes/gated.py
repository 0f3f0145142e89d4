"""A fake engine whose requests wait at a gate before their first event.

That is what a request looks like while it waits in a full batch or prefills
a long prompt: admitted, silent, holding its place. Tests open the gate when
they are ready, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engines.base import EngineError, EngineUnavailable
from engines.events import GenerationEvent
from engines.request import GenerationRequest
from tests.fakes.engine import FakeEngine


class GatedEngine(FakeEngine):
    def __init__(self, mode: str, **kwargs: object) -> None:
        super().__init__(mode, **kwargs)  # type: ignore[arg-type]
        self.gate = asyncio.Event()
        self.waiting: list[str] = []
        # Raised once the gate opens, as an engine refusing the request late.
        self.refuse: EngineError | None = None

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        if not self.started:
            raise EngineUnavailable(f"engine for mode {self.mode!r} is not up")
        self.waiting.append(request.request_id)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.aborted.append(request.request_id)
            raise
        finally:
            self.waiting.remove(request.request_id)
        if self.refuse is not None:
            raise self.refuse
        async for event in super().generate(request):
            yield event


def gated_engines(**kwargs: object) -> dict[str, FakeEngine]:
    return {mode: GatedEngine(mode, speculative=mode != "standard", **kwargs)
            for mode in ("standard", "ngram", "eagle3", "dflash")}


async def wait_until(predicate, limit_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(limit_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")
