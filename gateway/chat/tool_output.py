"""Tool calls read from generated text, in the ``openai`` SDK's message and delta types."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_chunk import (
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)
from openai.types.chat.chat_completion_message_tool_call import Function

from engines.tool_calls import StreamDelta, ToolCall, ToolCallDelta


def message_tool_calls(calls: tuple[ToolCall, ...]) -> list[ChatCompletionMessageToolCall]:
    return [ChatCompletionMessageToolCall(
        id=c.id, type="function", function=Function(name=c.name, arguments=c.arguments))
        for c in calls]


def _delta_call(d: ToolCallDelta) -> ChoiceDeltaToolCall:
    # Only what this fragment carries: OpenAI sends id, type and name once, on a
    # call's first fragment, and then only argument text.
    function: dict[str, Any] = {}
    if d.name is not None:
        function["name"] = d.name
    if d.arguments is not None or d.name is not None:
        function["arguments"] = d.arguments or ""
    head: dict[str, Any] = {"id": d.id, "type": "function"} if d.id is not None else {}
    return ChoiceDeltaToolCall(index=d.index, **head,
                               function=ChoiceDeltaToolCallFunction(**function))


def choice_delta(d: StreamDelta) -> ChoiceDelta:
    fields: dict[str, Any] = {}
    if d.content:
        fields["content"] = d.content
    if d.calls:
        fields["tool_calls"] = [_delta_call(c) for c in d.calls]
    return ChoiceDelta(**fields)
