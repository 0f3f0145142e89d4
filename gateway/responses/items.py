"""The items of a Responses request: input messages, earlier function calls and their
outputs, and the function tools it may offer.

Input items become chat messages, rendered as chat's are: a ``function_call`` item is
an assistant turn's ``tool_calls`` entry (consecutive calls, and the assistant text
just before them, make one turn), a ``function_call_output`` is a ``tool`` turn
answering its ``call_id``. Other item types (``reasoning``, ``item_reference``,
built-in tools' calls) are refused by validation: they need state or tools this
gateway does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, JsonValue, Tag

from gateway.chat.protocol import ChatMessage
from gateway.chat.tools import AssistantToolCall, CalledFunction, FunctionName
from gateway.wire_types import Name, Text, WireModel
from service.errors import InvalidRequest

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class InputText(WireModel):
    """A text part: ``input_text`` from a caller, ``output_text`` replayed from a reply."""

    type: Literal["input_text", "output_text"]
    text: Text
    # A reply's parts replayed as input carry these (the Agents SDK sends them back).
    annotations: list[dict[str, JsonValue]] | None = Field(None, max_length=1024)
    logprobs: list[dict[str, JsonValue]] | None = None


def _text(content: str | list[InputText]) -> str:
    return content if isinstance(content, str) else "".join(p.text for p in content)


class InputMessage(WireModel):
    """An easy input message, or a ``message`` item (an earlier reply sent back)."""

    role: Literal["user", "system", "developer", "assistant"]
    content: Text | list[InputText]
    type: Literal["message"] | None = None
    id: Name | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(WireModel):
    """A call the model made earlier (a ``function_call`` output item sent back)."""

    type: Literal["function_call"]
    call_id: Name
    name: FunctionName
    arguments: Text                      # JSON text, as the model returned it
    id: Name | None = None
    status: ItemStatus | None = None
    namespace: Name | None = None


class FunctionCallOutputItem(WireModel):
    """The caller's result for the call ``call_id``."""

    type: Literal["function_call_output"]
    call_id: Name
    output: Text | list[InputText]
    id: Name | None = None
    status: ItemStatus | None = None


def _item_type(data: Any) -> str | None:
    kind = (data.get("type") if isinstance(data, dict) else getattr(data, "type", None)) \
        or "message"
    return _TAGS.get(kind) if isinstance(kind, str) else None


# Union tags are capitalised so that error locations (``param``) leave them out.
_TAGS = {"message": "Message", "function_call": "FunctionCall",
         "function_call_output": "FunctionCallOutput"}
InputItem = Annotated[
    Annotated[InputMessage, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")],
    Discriminator(_item_type, custom_error_type="input_item_type",
                  custom_error_message="input items must be of type 'message', "
                  "'function_call' or 'function_call_output' (reasoning, item references "
                  "and built-in tools' items are not supported here)")]


def chat_messages(items: Sequence[InputMessage | FunctionCallItem | FunctionCallOutputItem]
                  ) -> list[ChatMessage]:
    """The items as chat messages; a 400 naming the item for an output that answers
    no earlier call (as OpenAI's)."""
    messages: list[ChatMessage] = []
    called: set[str] = set()
    for i, item in enumerate(items):
        if isinstance(item, InputMessage):
            messages.append(ChatMessage(role=item.role, content=_text(item.content)))
        elif isinstance(item, FunctionCallItem):
            called.add(item.call_id)
            call = AssistantToolCall(id=item.call_id, type="function", function=CalledFunction(
                name=item.name, arguments=item.arguments))
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or ()), call]
            else:
                messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
        else:
            if item.call_id not in called:
                raise InvalidRequest(f"no function_call item before this one has the call_id "
                                     f"{item.call_id!r} its output answers", param=f"input.{i}")
            messages.append(ChatMessage(role="tool", tool_call_id=item.call_id,
                                        content=_text(item.output)))
    return messages


class FunctionTool(WireModel):
    """A function tool, flat (chat nests the same fields under ``function``)."""

    type: Literal["function"]
    name: FunctionName
    description: Text | None = None
    parameters: dict[str, JsonValue] | None = None
    strict: bool | None = None


class FunctionToolChoice(WireModel):
    type: Literal["function"]
    name: FunctionName


Tool = FunctionTool
ToolChoice = Literal["none", "auto", "required"] | FunctionToolChoice
