"""A response as server-sent events, in OpenAI's order and with its event types.

``response.created``, ``response.in_progress``, the output message and its text
part opened, ``response.output_text.delta`` per engine delta, then the part and
the message closed and ``response.completed`` (``response.incomplete`` when the
length limit cut the reply), each numbered by ``sequence_number``. Every frame
names its type on an ``event:`` line, as OpenAI and vLLM send them; there is no
``[DONE]``. Keep-alive comments fill silences (``gateway/sse.py``).

A failure after the stream started is one ``error`` event, then the end. It carries
the Responses error fields and the OpenAI error envelope under ``error``, as
OpenAI's own error events do, so that the ``openai`` SDK raises ``APIError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from pydantic import BaseModel

from engines.events import Finished
from gateway.errors import http_error
from gateway.responses.endpoint import (
    ResponsesEndpoint,
    final_status,
    full_text,
    message_id,
    output_text,
    usage,
)
from gateway.sse import COMMENT, StreamErrorObserver, final_mode, frame
from service.serving import Call, Delta, Serving, StreamFailed

_AT: dict[str, Any] = {"output_index": 0, "content_index": 0}  # the one message, its one text part


@dataclass(slots=True)
class _Events:
    """Frames events, numbering them in the order they are sent."""

    sequence: int = 0

    def __call__(self, event: type[BaseModel], /, *, extra: dict[str, Any] | None = None,
                 **fields: Any) -> str:
        payload = event(sequence_number=self.sequence, **fields)
        self.sequence += 1
        return f"event: {fields['type']}\n" + frame(payload, extra)


async def response_events(serving: Serving, endpoint: ResponsesEndpoint, call: Call,
                          on_error: StreamErrorObserver) -> AsyncIterator[str]:
    send = _Events()
    item_id = message_id(call)
    started = endpoint.response(call, "in_progress", [])
    yield send(ResponseCreatedEvent, type="response.created", response=started)
    yield send(ResponseInProgressEvent, type="response.in_progress", response=started)
    yield send(ResponseOutputItemAddedEvent, type="response.output_item.added", output_index=0,
               item=endpoint.message(call, "in_progress", None))
    yield send(ResponseContentPartAddedEvent, type="response.content_part.added",
               item_id=item_id, part=output_text(""), **_AT)
    async for item in serving.events(call):
        if isinstance(item, Delta):
            if item.event.text:
                yield send(ResponseTextDeltaEvent, type="response.output_text.delta",
                           item_id=item_id, delta=item.event.text, logprobs=[], **_AT)
        elif isinstance(item, Finished):
            for event in _closing(send, endpoint, call, item):
                yield event
        elif isinstance(item, StreamFailed):
            error = http_error(item.error)
            on_error(error.type, error.code)
            yield send(ResponseErrorEvent, type="error", code=error.code,
                       message=error.message, param=error.param, extra=error.body())
        else:  # idle: the engine is silent
            yield COMMENT


def _closing(send: _Events, endpoint: ResponsesEndpoint, call: Call,
             finished: Finished) -> list[str]:
    text, status, item_id = full_text(call), final_status(call), message_id(call)
    message = endpoint.message(call, status, text)
    done = endpoint.response(call, status, [message], usage(finished))
    end = ResponseCompletedEvent if status == "completed" else ResponseIncompleteEvent
    return [
        send(ResponseTextDoneEvent, type="response.output_text.done", item_id=item_id,
             text=text, logprobs=[], **_AT),
        send(ResponseContentPartDoneEvent, type="response.content_part.done",
             item_id=item_id, part=output_text(text), **_AT),
        send(ResponseOutputItemDoneEvent, type="response.output_item.done", output_index=0,
             item=message),
        # The mode that served the end rides along, as on chat's last chunks.
        send(end, type=f"response.{status}", response=done, extra=final_mode(call)),
    ]
