"""Tools on the wire: ``tools``, ``tool_choice``, assistant ``tool_calls`` in the
history, and what a request asks of them (checked as vLLM's request model does).

The checks that name another field (a ``tool_choice`` naming no declared tool)
run in ``tools_request`` rather than in a validator, so that the 400 names the
field at fault in ``param``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, StringConstraints

from engines.tool_calls import ToolCallParser, ToolCallSession, ToolChoiceMode, ToolsRequest
from gateway.fields import UNSUPPORTED
from gateway.wire_types import Name, Text, WireModel
from service.errors import InvalidRequest

# OpenAI's rule for function names; it also keeps them safe to write into a prompt.
FunctionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
MAX_TOOLS = 128                          # OpenAI's limit


class FunctionDefinition(WireModel):
    name: FunctionName
    description: Text | None = None
    parameters: dict[str, JsonValue] | None = None   # a JSON Schema object
    strict: bool | None = None


class ChatTool(WireModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(WireModel):
    name: FunctionName


class NamedToolChoice(WireModel):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class CalledFunction(WireModel):
    name: FunctionName
    arguments: Text                      # JSON text, as the model returned it


class AssistantToolCall(WireModel):
    id: Name
    type: Literal["function"]
    function: CalledFunction


ToolCalls = Annotated[list[AssistantToolCall], Field(min_length=1, max_length=MAX_TOOLS)]
Tools = Annotated[list[ChatTool], Field(min_length=1, max_length=MAX_TOOLS)]


def tools_request(tools: list[ChatTool] | None, choice: ToolChoice | None,
                  parallel_tool_calls: bool | None,
                  constrained: bool) -> ToolsRequest | None:
    """None when no tool is offered. ``constrained``: the request also asks for a
    structured-output constraint, which a named function cannot share (as in vLLM)."""
    if tools is None:
        if choice not in (None, "none"):
            raise InvalidRequest("'tool_choice' needs 'tools'", param="tool_choice")
        return None
    names = [t.function.name for t in tools]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise InvalidRequest(f"tools declare the function {duplicate!r} more than once",
                             param="tools")
    mode: ToolChoiceMode = "auto" if choice is None else \
        "named" if isinstance(choice, NamedToolChoice) else choice
    function = choice.function.name if isinstance(choice, NamedToolChoice) else None
    if function is not None and function not in names:
        raise InvalidRequest(f"tool_choice names the function {function!r}, which is not "
                             f"in 'tools'", param="tool_choice")
    if function is not None and constrained:
        raise InvalidRequest("a named tool_choice cannot be combined with a structured "
                             "output constraint", param="tool_choice")
    return ToolsRequest(tuple(t.model_dump(exclude_none=True) for t in tools), mode, function,
                        parallel_tool_calls)


def tool_session(request: ToolsRequest | None,
                 parser: ToolCallParser | None) -> ToolCallSession | None:
    """The session that constrains a request's output and reads it back as tool calls
    (None without tools), whichever endpoint asked; a 400 for tools that cannot be served."""
    if request is None:
        return None
    if parser is None:
        raise InvalidRequest("'tools' is not supported here: no tool-call parser is "
                             "configured on this gateway (tool_call_parser), so tool "
                             "calls could not be returned", param="tools", code=UNSUPPORTED)
    try:
        return parser.session(request)
    except ValueError as e:  # vLLM cannot build the schema of these tools
        raise InvalidRequest(f"tools: {e}", param="tools") from e
