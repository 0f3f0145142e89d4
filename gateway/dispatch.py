"""Choose the mode for a request and open its event stream on that engine.

The first event is pulled *before* any HTTP response starts, so that an
engine refusing the request becomes a real 4xx/5xx instead of an error
buried inside a 200 event stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from engines.base import Engine, EngineUnavailable, InvalidGenerationRequest
from engines.events import GenerationEvent
from engines.request import GenerationRequest
from gateway.errors import OpenAIError, bad_request, unavailable
from gateway.settings import AUTO
from policies.base import Decision, DecisionInput, ModeLoad, NoModeAvailable, Policy

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OpenStream:
    """An engine stream whose first event has already arrived."""

    decision: Decision
    first: GenerationEvent
    rest: AsyncIterator[GenerationEvent]

    async def events(self) -> AsyncIterator[GenerationEvent]:
        try:
            yield self.first
            async for event in self.rest:
                yield event
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        closer = getattr(self.rest, "aclose", None)
        if closer is not None:
            await closer()

    @property
    def headers(self) -> dict[str, str]:
        return {"x-spec-mode": self.decision.mode, "x-spec-decision": self.decision.reason}


class Dispatcher:
    def __init__(self, engines: Mapping[str, Engine], policy: Policy,
                 clock: Callable[[], float] = time.time) -> None:
        self.engines = engines
        self.policy = policy
        self.clock = clock

    def valid_header_values(self) -> list[str]:
        return [AUTO, *sorted(self.engines)]

    def parse_spec_mode(self, header: str | None) -> str | None:
        """The forced mode named by ``x-spec-mode``; None for auto."""
        if header is None:
            return None
        value = header.strip().lower()
        if value in ("", AUTO):
            return None
        if value not in self.engines:
            shown = header if header.isprintable() and len(header) <= 64 else repr(header[:64])
            raise bad_request(
                f"unknown x-spec-mode {shown!r}; valid values: "
                + ", ".join(self.valid_header_values()),
                param="x-spec-mode", code="invalid_spec_mode")
        return value

    def decide(self, override: str | None, prompt_tokens: int,
               max_tokens: int | None, workload_class: str) -> Decision:
        loads = {name: self._load(name, engine) for name, engine in self.engines.items()}
        if override is not None and not loads[override].up:
            raise unavailable(f"mode {override!r} is not available right now; "
                              f"retry later or use x-spec-mode: auto")
        inputs = DecisionInput(modes=loads, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                               now=self.clock(), override=override,
                               workload_class=workload_class)
        try:
            return self.policy.decide(inputs)
        except NoModeAvailable as e:
            raise unavailable("no decoding engine is available right now; retry later",
                              code="no_engine_available") from e

    async def open(self, decision: Decision, request: GenerationRequest) -> OpenStream:
        engine = self.engines[decision.mode]
        stream = engine.generate(request)
        try:
            first = await anext(stream)
        except StopAsyncIteration as e:
            raise OpenAIError(500, "the engine returned no output", type="server_error") from e
        except InvalidGenerationRequest as e:
            raise bad_request(f"the engine rejected the request: {e}") from e
        except EngineUnavailable as e:
            raise unavailable(f"mode {decision.mode!r} is not available right now") from e
        return OpenStream(decision, first, stream)

    @staticmethod
    def _load(name: str, engine: Engine) -> ModeLoad:
        s = engine.stats()
        return ModeLoad(mode=name, up=s.up, batch_size=s.batch_size,
                        speculative=s.spec is not None, kv_cache_usage=s.kv_cache_usage,
                        acceptance_rate=s.recent_acceptance_rate,
                        mean_accepted_length=s.recent_mean_accepted_length)
