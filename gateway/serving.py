"""The request flow both OpenAI endpoints share (a template-method base).

Subclasses say how to turn a wire request into a prompt and how to shape
choices and chunks; this class validates limits, asks the dispatcher for a
mode, and runs the engine stream to a JSON body or to SSE events (with
keep-alive comments while silent), within the request's deadline.
"""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from openai.types import CompletionUsage
from pydantic import BaseModel

from engines.base import EngineError
from engines.events import Failed, Finished, TextDelta, TokenLogprob
from engines.request import GenerationRequest
from engines.tokenizer import Tokenizer
from gateway import keepalive
from gateway.dispatch import Dispatcher, OpenStream
from gateway.errors import http_error
from gateway.protocol import SamplingFields, usage
from gateway.pump import Idle, Interrupted
from gateway.sampling import sampling_options, truncate_prompt
from service.errors import EngineFailed, InvalidRequest, ModelNotFound, ServiceError


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
    keepalive_s: float = 0.0             # SSE keep-alive interval; 0 = none


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
    wire: SamplingFields
    generation: GenerationRequest
    stream: OpenStream
    choices: list[ChoiceState]

    @property
    def headers(self) -> dict[str, str]:
        return {**self.stream.headers, "x-request-id": self.id}


ENDED_EARLY = "the engine stream ended without finishing"


class Serving(ABC):
    id_prefix: str

    def __init__(self, dispatcher: Dispatcher, model_name: str, limits: Limits,
                 tokenizer: Tokenizer) -> None:
        self.dispatcher = dispatcher
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.limits = limits
        # Told about errors that reach the client inside a 200 stream, which the
        # HTTP error handlers never see (metrics count them).
        self.stream_error_observers: list[Callable[[str, str | None], None]] = []

    @abstractmethod
    def prompt_token_ids(self, wire: Any) -> list[int]: ...

    @abstractmethod
    def sampling_extras(self, wire: Any) -> tuple[int | None, int | None]:
        """(requested max_tokens or None, logprobs k or None)."""

    @abstractmethod
    def json_body(self, call: Call, finished: Finished) -> BaseModel:
        """The whole response, as the ``openai`` package's type for it."""

    @abstractmethod
    def chunk_choices(self, call: Call, state: ChoiceState, delta: TextDelta) -> list[Any]:
        """The stream choices one engine delta becomes (the SDK's chunk choice type)."""

    @abstractmethod
    def chunk(self, call: Call, choices: list[Any], usage: CompletionUsage | None,
              with_usage: bool) -> BaseModel:
        """One stream chunk; ``with_usage``: it carries ``usage`` (null until the end)."""

    async def start(self, wire: Any, headers: RoutingHeaders) -> Call:
        timeout = self.limits.request_timeout_s
        deadline = time.monotonic() + timeout if timeout else None
        try:
            return await self._start(wire, headers, deadline)
        except Interrupted as e:
            raise e.error(timeout) from None

    async def _start(self, wire: Any, headers: RoutingHeaders, deadline: float | None) -> Call:
        if wire.model != self.model_name:
            raise ModelNotFound(f"The model '{wire.model}' does not exist; this server "
                                f"serves '{self.model_name}'", param="model",
                                code="model_not_found")
        override = self.dispatcher.parse_spec_mode(headers.spec_mode)
        workload_class = self.dispatcher.parse_workload_class(
            headers.workload_class, "x-workload-class") or self.dispatcher.parse_workload_class(
            (wire.metadata or {}).get("workload_class"), "metadata.workload_class")
        prompt = truncate_prompt(wire, self.prompt_token_ids(wire), self.limits.max_model_len)
        requested, logprobs_k = self.sampling_extras(wire)
        max_tokens = self._check_length(len(prompt), requested)
        n = wire.n or 1
        if n > self.limits.max_n:
            raise InvalidRequest(f"'n' must be at most {self.limits.max_n}", param="n")
        request_id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        generation = GenerationRequest(
            request_id=request_id, prompt_token_ids=tuple(prompt),
            sampling=sampling_options(wire, max_tokens=max_tokens, n=n, logprobs=logprobs_k,
                                      vocab_size=self.tokenizer.vocab_size),
            cache_salt=wire.cache_salt)
        routing = self.dispatcher.decide(override, len(prompt), requested, workload_class,
                                         request_id)
        stream = await self.dispatcher.open(
            routing, generation, deadline=deadline,
            first_wait_s=keepalive.first_event_wait(bool(wire.stream), self.limits.keepalive_s))
        if isinstance(stream.first, Failed):
            await stream.aclose()
            raise EngineFailed(stream.first.message, retryable=stream.first.retryable)
        return Call(id=request_id, created=int(time.time()), model=self.model_name, wire=wire,
                    generation=generation, stream=stream,
                    choices=[ChoiceState(i) for i in range(n)])

    def _check_length(self, prompt_tokens: int, requested: int | None) -> int:
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
                f"{requested} for the completion). Please reduce the prompt or max_tokens.",
                param="max_tokens", code="context_length_exceeded")
        return requested

    async def collect(self, call: Call) -> dict[str, Any]:
        try:
            async for event in call.stream.events():
                if isinstance(event, TextDelta):
                    call.choices[event.index].add(event)
                elif isinstance(event, Failed):
                    raise EngineFailed(event.message, retryable=event.retryable)
                else:
                    return _dump(self.json_body(call, event))
        except Interrupted as e:
            raise e.error(self.limits.request_timeout_s) from None
        raise EngineFailed(ENDED_EARLY, retryable=False)

    async def sse(self, call: Call) -> AsyncIterator[str]:
        """The SSE body: chunks, keep-alive comments while silent, and ``[DONE]`` last,
        whatever happened (a failure or an interruption is an error event first)."""
        include_usage = call.wire.include_usage()
        continuous = call.wire.continuous_usage()
        so_far: CompletionUsage | None = None
        stream = call.stream
        try:
            while True:
                try:
                    event = await stream.next(self.limits.keepalive_s)
                except StopAsyncIteration:
                    yield self._stream_error(EngineFailed(ENDED_EARLY, retryable=False))
                    break
                if isinstance(event, Idle):
                    yield keepalive.COMMENT
                elif isinstance(event, TextDelta):
                    state = call.choices[event.index]
                    state.add(event)
                    if continuous:  # vLLM's continuous_usage_stats: usage so far, every chunk
                        so_far = _usage_so_far(call)
                    for choice in self.chunk_choices(call, state, event):
                        yield _sse(self.chunk(call, [choice], so_far, include_usage))
                elif isinstance(event, Failed):
                    yield self._stream_error(EngineFailed(event.message,
                                                          retryable=event.retryable))
                    break
                else:
                    if include_usage:
                        yield _sse(self.chunk(call, [], usage(event.prompt_tokens,
                                                              event.completion_tokens), True))
                    break
        except Interrupted as e:
            yield self._stream_error(e.error(self.limits.request_timeout_s))
        except EngineError as e:  # refused after the 200 went out (see keepalive.py)
            yield self._stream_error(EngineFailed(f"the engine refused the request: {e}"))
        finally:
            await stream.aclose()
        yield "data: [DONE]\n\n"

    def _stream_error(self, error: ServiceError) -> str:
        """An error inside a 200 stream, which the HTTP error handlers never see."""
        envelope = http_error(error)
        for observer in self.stream_error_observers:
            observer(envelope.type, envelope.code)
        return _sse(envelope.body())


def _usage_so_far(call: Call) -> CompletionUsage:
    return usage(len(call.generation.prompt_token_ids), sum(c.tokens for c in call.choices))


def _dump(model: BaseModel) -> dict[str, Any]:
    # Only the fields set (the SDK's types carry many optional ones this server never
    # fills); ``warnings=False``: stream choices are built unvalidated (a chunk's
    # finish_reason is null until the last, which the SDK's type does not allow).
    return model.model_dump(mode="json", exclude_unset=True, warnings=False)


def _sse(payload: BaseModel | dict[str, Any]) -> str:
    data = _dump(payload) if isinstance(payload, BaseModel) else payload
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
