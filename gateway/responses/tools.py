"""Function tools on the Responses API, served by chat's tool machinery.

The flat Responses tools and ``tool_choice`` are read as chat's nested ones, so the
same checks (``tools_request``), the same vLLM session (constraint for ``required`` /
a named function, the parser for ``auto``) and the same template rendering apply.
Calls found in the reply come back as ``function_call`` output items.
"""

from __future__ import annotations

from typing import Any

from openai.types.responses import ResponseFunctionToolCall
from openai.types.responses.tool_choice_function import ToolChoiceFunction

from engines.tool_calls import ToolCall, ToolsRequest
from gateway.chat.tools import (
    ChatTool,
    FunctionDefinition,
    NamedFunction,
    NamedToolChoice,
    tools_request,
)
from gateway.chat.tools import ToolChoice as ChatToolChoice
from gateway.responses.items import FunctionTool, FunctionToolChoice, ItemStatus, ToolChoice


def chat_tools(tools: list[FunctionTool] | None) -> list[ChatTool] | None:
    if not tools:
        return None
    return [ChatTool(type="function", function=FunctionDefinition(
        name=t.name, description=t.description, parameters=t.parameters, strict=t.strict))
        for t in tools]


def chat_tool_choice(choice: ToolChoice | None) -> ChatToolChoice | None:
    if isinstance(choice, FunctionToolChoice):
        return NamedToolChoice(type="function", function=NamedFunction(name=choice.name))
    return choice


def responses_tools_request(tools: list[FunctionTool] | None, choice: ToolChoice | None,
                            parallel_tool_calls: bool | None,
                            constrained: bool) -> ToolsRequest | None:
    if not tools and choice == "auto":
        choice = None  # "auto" with no tools asks for nothing (OpenAI accepts it)
    return tools_request(chat_tools(tools), chat_tool_choice(choice), parallel_tool_calls,
                         constrained)


def template_tools(tools: list[FunctionTool] | None) -> list[dict[str, Any]] | None:
    """The tools as the chat template gets them (chat's nested objects)."""
    converted = chat_tools(tools)
    return [t.model_dump(exclude_none=True) for t in converted] if converted else None


def echoed_tool_choice(choice: ToolChoice | None) -> Any:
    """``tool_choice`` as a response echoes it (OpenAI's default is ``auto``)."""
    if isinstance(choice, FunctionToolChoice):
        return ToolChoiceFunction(type="function", name=choice.name)
    return choice or "auto"


def function_call_id(call_id: str) -> str:
    """The item id of a call: ``fc_`` and the call id's own random part."""
    return "fc_" + call_id.removeprefix("call_")


def function_call(call: ToolCall, status: ItemStatus) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", id=function_call_id(call.id), call_id=call.id, name=call.name,
        arguments=call.arguments, status=status)
