"""A response's output items as they stream: opened, filled, and closed in order.

A message is opened (``response.output_item.added``, its text part added), filled
(``response.output_text.delta``) and closed (text, part and item done). A function
call is opened with its id, call id and name, filled with
``response.function_call_arguments.delta`` and closed (arguments done, item done).
Opening an item closes the one before it, as OpenAI sends them: one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openai.types.responses import (
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from pydantic import BaseModel

from engines.tool_calls import ToolCall, ToolCallDelta
from gateway.responses.endpoint import (
    OutputItem,
    ResponsesEndpoint,
    Status,
    output_text,
)
from gateway.responses.tools import function_call
from gateway.sse import frame
from service.serving import Call


@dataclass(slots=True)
class Events:
    """Frames events, numbering them in the order they are sent."""

    sequence: int = 0

    def __call__(self, event: type[BaseModel], /, *, extra: dict[str, Any] | None = None,
                 **fields: Any) -> str:
        payload = event(sequence_number=self.sequence, **fields)
        self.sequence += 1
        return f"event: {fields['type']}\n" + frame(payload, extra)


@dataclass(slots=True)
class OutputItems:
    """The items sent so far; the last one may still be open."""

    send: Events
    endpoint: ResponsesEndpoint
    call: Call
    items: list[OutputItem] = field(default_factory=list)
    is_open: bool = False
    text: str = ""                       # the open item's text or arguments so far

    def text_delta(self, delta: str) -> list[str]:
        events = [] if self._open_is(message=True) else self.open_message()
        self.text += delta
        return [*events, self.send(ResponseTextDeltaEvent, type="response.output_text.delta",
                                   item_id=self.items[-1].id, delta=delta, logprobs=[],
                                   **self._at(), content_index=0)]

    def call_delta(self, d: ToolCallDelta) -> list[str]:
        events: list[str] = []
        if d.id is not None:  # a new call: its first fragment
            events += self.close("completed")
            item = function_call(ToolCall(d.id, d.name or "", ""), "in_progress")
            self.items.append(item)
            self.is_open, self.text = True, ""
            events.append(self.send(ResponseOutputItemAddedEvent,
                                    type="response.output_item.added", item=item, **self._at()))
        if d.arguments and self._open_is(message=False):
            self.text += d.arguments
            events.append(self.send(
                ResponseFunctionCallArgumentsDeltaEvent,
                type="response.function_call_arguments.delta", item_id=self.items[-1].id,
                delta=d.arguments, **self._at()))
        return events

    def open_message(self) -> list[str]:
        events = self.close("completed")
        item = self.endpoint.message(self.call, "in_progress", None)
        self.items.append(item)
        self.is_open, self.text = True, ""
        return [*events,
                self.send(ResponseOutputItemAddedEvent, type="response.output_item.added",
                          item=item, **self._at()),
                self.send(ResponseContentPartAddedEvent, type="response.content_part.added",
                          item_id=item.id, part=output_text(""), **self._at(),
                          content_index=0)]

    def close(self, status: Status) -> list[str]:
        """The open item closed with ``status`` (nothing when none is open)."""
        if not self.is_open:
            return []
        self.is_open = False
        last, at = self.items[-1], self._at()
        if isinstance(last, ResponseFunctionToolCall):
            done: OutputItem = last.model_copy(update={"arguments": self.text,
                                                        "status": status})
            events = [self.send(ResponseFunctionCallArgumentsDoneEvent,
                                type="response.function_call_arguments.done",
                                item_id=last.id, arguments=self.text, **at)]
        else:
            done = self.endpoint.message(self.call, status, self.text)
            events = [
                self.send(ResponseTextDoneEvent, type="response.output_text.done",
                          item_id=last.id, text=self.text, logprobs=[], **at, content_index=0),
                self.send(ResponseContentPartDoneEvent, type="response.content_part.done",
                          item_id=last.id, part=output_text(self.text), **at,
                          content_index=0)]
        self.items[-1] = done
        return [*events, self.send(ResponseOutputItemDoneEvent,
                                   type="response.output_item.done", item=done, **at)]

    def _open_is(self, *, message: bool) -> bool:
        return self.is_open and isinstance(self.items[-1], ResponseFunctionToolCall) != message

    def _at(self) -> dict[str, Any]:
        return {"output_index": len(self.items) - 1}
