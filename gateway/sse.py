"""SSE framing of a call's stream: chunks, keep-alive comments, an error event, ``[DONE]``.

A ``: keep-alive`` comment goes out whenever the stream has been silent for
``sse_keepalive_s`` (see ``service/keepalive.py`` for why); every SSE client, the
``openai`` SDK included, ignores it. ``[DONE]`` ends every stream, whatever happened:
a failure or an interruption is an error event (the OpenAI envelope) first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from pydantic import BaseModel

from engines.events import Finished
from gateway.endpoint import OpenAIEndpoint, dump
from gateway.errors import http_error
from gateway.protocol import SamplingFields, usage
from service.pump import Idle
from service.serving import Call, Delta, Serving, StreamFailed

COMMENT: Final = ": keep-alive\n\n"
DONE: Final = "data: [DONE]\n\n"

# Told (error type, code) of errors that reach the client inside a 200 stream, which
# the HTTP error handlers never see (metrics count them).
StreamErrorObserver = Callable[[str, str | None], None]


async def sse_body(serving: Serving, endpoint: OpenAIEndpoint[Any], call: Call,
                   on_error: StreamErrorObserver) -> AsyncIterator[str]:
    wire = call.wire
    assert isinstance(wire, SamplingFields)
    include_usage, continuous = wire.include_usage(), wire.continuous_usage()
    so_far = None
    async for item in serving.events(call):
        if isinstance(item, Idle):
            yield COMMENT
        elif isinstance(item, Delta):
            if continuous:  # vLLM's continuous_usage_stats: usage so far, every chunk
                so_far = usage(*call.tokens_so_far())
            last = item.event.finish_reason is not None
            for choice in endpoint.chunk_choices(call, item.state, item.event):
                yield frame(endpoint.chunk(call, [choice], so_far, include_usage),
                            final_mode(call) if last else None)
        elif isinstance(item, Finished):
            if include_usage:
                yield frame(endpoint.chunk(call, [], usage(item.prompt_tokens,
                                                           item.completion_tokens), True),
                            final_mode(call))
        elif isinstance(item, StreamFailed):
            envelope = http_error(item.error)
            on_error(envelope.type, envelope.code)
            yield frame(envelope.body())
    yield DONE


def final_mode(call: Call) -> dict[str, Any]:
    """What a stream's last chunks carry besides the SDK's fields (which the ``openai``
    SDK keeps as extra attributes): the mode that served the end of the response, how
    often it moved (``service/moves.py``) and, when some were, how many of those moves
    were failovers from an engine that died (``service/failover.py``). The
    ``x-spec-mode`` header, sent before the first chunk, names the mode it started on."""
    extra: dict[str, Any] = {"spec_mode": call.stream.mode, "spec_moves": call.stream.moves}
    if call.stream.failovers:
        extra["spec_failovers"] = call.stream.failovers
    return extra


def frame(payload: BaseModel | dict[str, Any], extra: dict[str, Any] | None = None) -> str:
    data = dump(payload) if isinstance(payload, BaseModel) else payload
    if extra:
        data = {**data, **extra}
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
