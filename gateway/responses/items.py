"""The items of a Responses request: input messages, and the tools it may offer.

Only message items are taken as input. Other item types (``function_call``,
``function_call_output``, ``reasoning``, ``item_reference``) are refused by
validation: they belong to tool calling and stored state. Function tools are
modelled so that tool calling can be added here; the request refuses them for now.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from gateway.chat.protocol import ChatMessage
from gateway.wire_types import Name, Text, WireModel


class InputText(WireModel):
    """A text part: ``input_text`` from a caller, ``output_text`` replayed from a reply."""

    type: Literal["input_text", "output_text"]
    text: Text
    # A reply's parts replayed as input carry these (the Agents SDK sends them back).
    annotations: list[dict[str, JsonValue]] | None = Field(None, max_length=1024)
    logprobs: list[dict[str, JsonValue]] | None = None


class InputMessage(WireModel):
    """An easy input message, or a ``message`` item (an earlier reply sent back)."""

    role: Literal["user", "system", "developer", "assistant"]
    content: Text | list[InputText]
    type: Literal["message"] | None = None
    id: Name | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_message(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "message"):
            raise ValueError(f"input items of type {str(kind)[:64]!r} are not supported "
                             "here: send messages only (tool calls and stored items are "
                             "not supported yet)")
        return data

    def chat_message(self) -> ChatMessage:
        text = self.content if isinstance(self.content, str) else \
            "".join(part.text for part in self.content)
        return ChatMessage(role=self.role, content=text)


class FunctionTool(WireModel):
    type: Literal["function"]
    name: Name
    description: Text | None = None
    parameters: dict[str, JsonValue] | None = None
    strict: bool | None = None


class FunctionToolChoice(WireModel):
    type: Literal["function"]
    name: Name


Tool = FunctionTool
ToolChoice = Literal["none", "auto", "required"] | FunctionToolChoice
