"""A response as server-sent events, in OpenAI's order and with its event types.

``response.created``, ``response.in_progress``, then the output items one at a time
(``gateway/responses/stream_items.py``), then ``response.completed``
(``response.incomplete`` when the length limit cut the reply), each numbered by
``sequence_number``. Without tools the one message is opened first and each engine
delta is a ``response.output_text.delta``; with tools the reply is read as tool
calls while it streams (chat's ``ToolCallStream``), and text opens a message, a call
a ``function_call`` item. Every frame names its type on an ``event:`` line, as
OpenAI and vLLM send them; there is no ``[DONE]``. Keep-alive comments fill
silences (``gateway/sse.py``).

A failure after the stream started is one ``error`` event, then the end. It carries
the Responses error fields and the OpenAI error envelope under ``error``, as
OpenAI's own error events do, so that the ``openai`` SDK raises ``APIError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
)

from engines.events import Finished
from engines.tool_call_stream import ToolCallStream
from engines.tool_calls import StreamDelta
from gateway.errors import http_error
from gateway.responses.endpoint import ResponsesEndpoint, final_status, usage
from gateway.responses.stream_items import Events, OutputItems
from gateway.sse import COMMENT, StreamErrorObserver, final_mode
from service.serving import Call, Delta, Serving, StreamFailed


async def response_events(serving: Serving, endpoint: ResponsesEndpoint, call: Call,
                          on_error: StreamErrorObserver) -> AsyncIterator[str]:
    send = Events()
    output = OutputItems(send, endpoint, call)
    tools = ToolCallStream(call.tools) if call.tools is not None else None
    started = endpoint.response(call, "in_progress", [])
    yield send(ResponseCreatedEvent, type="response.created", response=started)
    yield send(ResponseInProgressEvent, type="response.in_progress", response=started)
    if tools is None:
        for event in output.open_message():
            yield event
    async for item in serving.events(call):
        if isinstance(item, Delta):
            text = item.event.text
            found = tools.feed(text, item.event.token_ids) if tools is not None else \
                StreamDelta(text, ()) if text else None
            for event in _deltas(output, found):
                yield event
        elif isinstance(item, Finished):
            for event in _closing(send, output, tools, item):
                yield event
        elif isinstance(item, StreamFailed):
            error = http_error(item.error)
            on_error(error.type, error.code)
            yield send(ResponseErrorEvent, type="error", code=error.code,
                       message=error.message, param=error.param, extra=error.body())
        else:  # idle: the engine is silent
            yield COMMENT


def _deltas(output: OutputItems, found: StreamDelta | None) -> list[str]:
    if found is None:
        return []
    events = output.text_delta(found.content) if found.content else []
    for d in found.calls:
        events += output.call_delta(d)
    return events


def _closing(send: Events, output: OutputItems, tools: ToolCallStream | None,
             finished: Finished) -> list[str]:
    call, status = output.call, final_status(output.call)
    events = _deltas(output, tools.finish()) if tools is not None else []
    if not output.items:  # a reply with neither text nor calls: an empty message
        events += output.open_message()
    events += output.close(status)
    done = output.endpoint.response(call, status, output.items, usage(finished))
    end = ResponseCompletedEvent if status == "completed" else ResponseIncompleteEvent
    # The mode that served the end rides along, as on chat's last chunks.
    return [*events, send(end, type=f"response.{status}", response=done,
                          extra=final_mode(call))]
