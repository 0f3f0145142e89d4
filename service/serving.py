"""Serving one generation request, whatever endpoint it came from.

``start`` checks the request against the model's limits, makes the one routing
call (decide, admit, open the engine stream, await its first event) and returns
the ``Call``. ``collect`` runs it to its end; ``events`` yields typed stream
items (deltas, idle ticks, the end or a failure). The endpoint-specific steps
(the prompt from the wire request, its sampling options) come from an
``Endpoint``; shaping the output and framing it for HTTP is the gateway's.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar

from engines.base import EngineError
from engines.events import Failed, Finished, TextDelta, TokenLogprob
from engines.request import GenerationRequest, SamplingOptions
from engines.tokenizer import Tokenizer
from engines.tool_call_stream import ToolCallStream
from engines.tool_calls import ToolCallParser, ToolCallSession
from service import keepalive
from service.arrivals import Arrival
from service.dispatch import Dispatcher
from service.errors import EngineFailed, InvalidRequest, ModelNotFound, ServiceError
from service.pump import Idle, Interrupted
from service.request_class import Asked, request_class
from service.stream import OpenStream


class WireRequest(Protocol):
    """What serving reads from an endpoint's validated request."""

    @property
    def model(self) -> str: ...
    @property
    def n(self) -> int | None: ...
    @property
    def stream(self) -> bool | None: ...
    @property
    def cache_salt(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, str] | None: ...


W = TypeVar("W", bound=WireRequest)


class Endpoint(ABC, Generic[W]):
    """One endpoint's request-specific steps, for its wire request type ``W``."""

    id_prefix: str
    id_separator = "-"              # OpenAI's Responses ids read ``resp_…``
    max_tokens_param = "max_tokens"  # the wire field a length error names

    @abstractmethod
    def prompt_token_ids(self, wire: W, tokenizer: Tokenizer, max_model_len: int) -> list[int]:
        """The prompt as the engine gets it (rendered, encoded, truncated as asked)."""

    @abstractmethod
    def sampling_extras(self, wire: W) -> tuple[int | None, int | None]:
        """(requested max_tokens or None, logprobs k or None)."""

    @abstractmethod
    def sampling(self, wire: W, *, max_tokens: int, n: int, logprobs: int | None,
                 vocab_size: int) -> SamplingOptions: ...

    def tool_calls(self, wire: W, parser: ToolCallParser | None) -> ToolCallSession | None:
        """The request's tools (its output is read back as tool calls), or None; raises
        ``InvalidRequest`` for tools this gateway cannot serve."""
        return None

    def asked(self, wire: W) -> Asked:
        """The message answered and the assistant turns before it, for the request's
        class (``service/request_class.py``); by default, the prompt as it is."""
        return Asked()


@dataclass(frozen=True, slots=True)
class RoutingHeaders:
    """The request headers that steer routing (raw; validated by the dispatcher)."""

    spec_mode: str | None = None
    workload_class: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    max_model_len: int
    max_n: int
    request_timeout_s: float = 0.0       # arrival to last token; 0 = none
    keepalive_s: float = 0.0             # idle ticks while a stream is silent; 0 = none


@dataclass(slots=True)
class ChoiceState:
    """Everything streamed so far for one choice."""

    index: int
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    chars_sent: int = 0
    opened: bool = False
    # With tools: this choice's text read as tool calls while it streams.
    tool_stream: ToolCallStream | None = None

    def add(self, delta: TextDelta) -> None:
        self.text.append(delta.text)
        self.tokens += len(delta.token_ids)
        if delta.logprobs:
            self.logprobs.extend(delta.logprobs)
        if delta.finish_reason is not None:
            self.finish_reason = "length" if delta.finish_reason == "length" else "stop"


@dataclass(slots=True)
class Call:
    """One accepted request on its way through an engine."""

    id: str
    created: int
    model: str
    wire: WireRequest
    generation: GenerationRequest
    stream: OpenStream
    choices: list[ChoiceState]
    tools: ToolCallSession | None = None

    def tokens_so_far(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens streamed so far)."""
        return len(self.generation.prompt_token_ids), sum(c.tokens for c in self.choices)


@dataclass(frozen=True, slots=True)
class Delta:
    """New text for one choice (already added to its ``state``)."""

    state: ChoiceState
    event: TextDelta


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The stream ended with an error after the response had started."""

    error: ServiceError


StreamItem = Delta | Idle | Finished | StreamFailed

ENDED_EARLY = "the engine stream ended without finishing"


class Serving:
    def __init__(self, dispatcher: Dispatcher, model_name: str, limits: Limits,
                 tokenizer: Tokenizer, tool_parser: ToolCallParser | None = None) -> None:
        self.dispatcher = dispatcher
        self.tokenizer = tokenizer
        self.tool_parser = tool_parser
        self.model_name = model_name
        self.limits = limits

    async def start(self, endpoint: Endpoint[W], wire: W, headers: RoutingHeaders) -> Call:
        timeout = self.limits.request_timeout_s
        deadline = time.monotonic() + timeout if timeout else None
        # Counted as arriving before tokenising, so that a burst's first request sees
        # the rest of the burst when it is priced (service/arrivals.py).
        arrival = self.dispatcher.arrivals.enter()
        try:
            return await self._start(endpoint, wire, headers, deadline, arrival)
        except Interrupted as e:
            raise e.error(timeout) from None
        finally:
            arrival.leave()

    async def _start(self, endpoint: Endpoint[W], wire: W, headers: RoutingHeaders,
                     deadline: float | None, arrival: Arrival) -> Call:
        if wire.model != self.model_name:
            raise ModelNotFound(f"The model '{wire.model}' does not exist; this server "
                                f"serves '{self.model_name}'", param="model",
                                code="model_not_found")
        hints = self.dispatcher.hints(headers.spec_mode, headers.workload_class,
                                      (wire.metadata or {}).get("workload_class"))
        tools = endpoint.tool_calls(wire, self.tool_parser)
        prompt = endpoint.prompt_token_ids(wire, self.tokenizer, self.limits.max_model_len)
        requested, logprobs_k = endpoint.sampling_extras(wire)
        max_tokens = self._check_length(len(prompt), requested, endpoint.max_tokens_param)
        n = wire.n or 1
        if n > self.limits.max_n:
            raise InvalidRequest(f"'n' must be at most {self.limits.max_n}", param="n")
        request_id = f"{endpoint.id_prefix}{endpoint.id_separator}{uuid.uuid4().hex}"
        sampling = endpoint.sampling(wire, max_tokens=max_tokens, n=n, logprobs=logprobs_k,
                                     vocab_size=self.tokenizer.vocab_size)
        if tools is not None:  # tool_choice required / named: the output is constrained
            sampling = tools.adjust(sampling)
        generation = GenerationRequest(
            request_id=request_id, prompt_token_ids=tuple(prompt), sampling=sampling,
            cache_salt=wire.cache_salt)
        hints = replace(hints, workload_class=request_class(
            hints.workload_class, generation, self.tokenizer,
            raw_prompt=endpoint.id_prefix == "cmpl", asked=lambda: endpoint.asked(wire)))
        stream = await self.dispatcher.route(
            hints, generation, requested_max_tokens=requested, deadline=deadline,
            first_wait_s=keepalive.first_event_wait(bool(wire.stream), self.limits.keepalive_s),
            arrival=arrival)
        if isinstance(stream.first, Failed):
            await stream.aclose()
            raise EngineFailed(stream.first.message, retryable=stream.first.retryable)
        return Call(id=request_id, created=int(time.time()), model=self.model_name, wire=wire,
                    generation=generation, stream=stream,
                    choices=[ChoiceState(i) for i in range(n)], tools=tools)

    def _check_length(self, prompt_tokens: int, requested: int | None, param: str) -> int:
        limit = self.limits.max_model_len
        if prompt_tokens == 0:
            raise InvalidRequest("the prompt is empty", param="prompt")
        if requested is None:
            if prompt_tokens >= limit:
                raise InvalidRequest(
                    f"This model's maximum context length is {limit} tokens; the prompt "
                    f"has {prompt_tokens}. Please shorten it.", code="context_length_exceeded")
            return limit - prompt_tokens
        if prompt_tokens + requested > limit:
            raise InvalidRequest(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_tokens + requested} tokens ({prompt_tokens} in the prompt, "
                f"{requested} for the completion). Please reduce the prompt or {param}.",
                param=param, code="context_length_exceeded")
        return requested

    async def collect(self, call: Call) -> Finished:
        """Run the call to its end; every choice's text is in ``call.choices``."""
        stream = call.stream
        stream.buffered = True      # its engine may die: it can start again elsewhere
        restarts = stream.restarts
        try:
            async for event in stream.events():
                if stream.restarts != restarts:   # what the dead engine gave is dropped
                    restarts = stream.restarts
                    call.choices = [ChoiceState(c.index) for c in call.choices]
                if isinstance(event, TextDelta):
                    call.choices[event.index].add(event)
                elif isinstance(event, Failed):
                    raise EngineFailed(event.message, retryable=event.retryable)
                else:
                    return event
        except Interrupted as e:
            raise e.error(self.limits.request_timeout_s) from None
        raise EngineFailed(ENDED_EARLY, retryable=False)

    async def events(self, call: Call) -> AsyncIterator[StreamItem]:
        """The call's stream: deltas, ``Idle`` while silent for ``keepalive_s``, and last
        either ``Finished`` or ``StreamFailed``, whatever happened. Closes the stream."""
        stream = call.stream
        try:
            while True:
                try:
                    event = await stream.next(self.limits.keepalive_s)
                except StopAsyncIteration:
                    yield StreamFailed(EngineFailed(ENDED_EARLY, retryable=False))
                    return
                if isinstance(event, Idle | Finished):
                    yield event
                    if isinstance(event, Finished):
                        return
                elif isinstance(event, TextDelta):
                    state = call.choices[event.index]
                    state.add(event)
                    yield Delta(state, event)
                else:
                    yield StreamFailed(EngineFailed(event.message, retryable=event.retryable))
                    return
        except Interrupted as e:
            yield StreamFailed(e.error(self.limits.request_timeout_s))
        except EngineError as e:  # refused after the response started (see keepalive.py)
            yield StreamFailed(EngineFailed(f"the engine refused the request: {e}"))
        finally:
            await stream.aclose()
