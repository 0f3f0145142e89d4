"""Wire models of ``POST /v1/responses`` (OpenAI's Responses API, as vLLM serves it).

Strict like the other endpoints: unknown fields and wrong JSON types are 400s.
Fields that need state this gateway does not keep (a response store, conversations,
background runs) are refused with ``code: unsupported_parameter`` when they ask for
something (``REFUSED``). Function tools are chat's (``gateway/responses/tools.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, model_validator
from pydantic_core import PydanticCustomError

from engines.request import StructuredOutput
from engines.tool_calls import ToolsRequest
from gateway.chat.tools import MAX_TOOLS
from gateway.fields import UNSUPPORTED, FieldRule, Handling, drop_refused_by
from gateway.responses.items import InputItem, Tool, ToolChoice
from gateway.responses.tools import responses_tools_request
from gateway.structured import JsonSchemaFormat, ResponseFormat, StructuredOutputs, constraint
from gateway.wire_types import CacheSalt, Name, StopString, Text, User, WireModel

_STATELESS = ("this gateway is stateless: it keeps no responses or conversations, so send "
              "the whole conversation in 'input'")


def _refused(reason: str, *neutral: object) -> FieldRule:
    return FieldRule(Handling.REFUSED, reason, neutral=neutral)


REFUSED: Mapping[str, FieldRule] = {
    "store": _refused("there is no response store here (responses cannot be retrieved "
                      "later); send 'store': false or leave it out", False),
    "previous_response_id": _refused(_STATELESS),
    "conversation": _refused(_STATELESS),
    "background": _refused("background responses need a response store; " + _STATELESS,
                           False),
    "prompt": _refused("stored prompt templates are not available here; send "
                       "'instructions' and 'input'"),
    "truncation": _refused("only 'disabled' is supported: an input longer than the "
                           "context is a 400, never silently cut", "disabled"),
    "top_logprobs": _refused("logprobs are not returned on this endpoint", 0),
}

# What ``include`` may name: outputs of tools and reasoning this gateway never produces
# (so there is nothing to include), and logprobs, which it does not return.
Includable = Literal["file_search_call.results", "web_search_call.results",
                     "web_search_call.action.sources", "message.input_image.image_url",
                     "computer_call_output.output.image_url", "code_interpreter_call.outputs",
                     "reasoning.encrypted_content", "message.output_text.logprobs"]


class TextFormat(WireModel):
    """``text.format``: OpenAI's ``response_format`` with the schema's fields inline."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    type: Literal["text", "json_object", "json_schema"]
    name: Name | None = None
    description: Text | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> TextFormat:
        if self.type == "json_schema":
            if self.name is None:
                raise ValueError("'name' is required when type is 'json_schema'")
            if self.json_schema is None:
                raise ValueError("'schema' is required when type is 'json_schema'")
        elif self.model_fields_set - {"type"}:
            raise ValueError(f"a '{self.type}' format takes no name, schema, description "
                             "or strict")
        return self

    def response_format(self) -> ResponseFormat:
        schema = None
        if self.type == "json_schema":
            assert self.name is not None  # validated
            schema = JsonSchemaFormat.model_construct(
                name=self.name, description=self.description, json_schema=self.json_schema,
                strict=self.strict)
        return ResponseFormat.model_construct(type=self.type, json_schema=schema)


class TextConfig(WireModel):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # no effect here


class Reasoning(WireModel):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponseStreamOptions(WireModel):
    include_obfuscation: bool | None = None  # nothing to obfuscate here


class ResponsesRequest(WireModel):
    model: Name
    input: Text | Annotated[list[InputItem], Field(min_length=1, max_length=4096)]
    instructions: Text | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool | None = False
    stream_options: ResponseStreamOptions | None = None
    metadata: dict[Text, Text] | None = None
    text: TextConfig | None = None
    tools: list[Tool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # false: tool_choice required calls one
    reasoning: Reasoning | None = None
    include: list[Includable] | None = Field(None, max_length=16)
    # Accepted for SDK compatibility; they change nothing here.
    user: User | None = None
    max_tool_calls: int | None = Field(None, ge=1)
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    prompt_cache_key: User | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: User | None = None
    # vLLM's extras on its Responses endpoint, with the chat endpoint's ranges.
    structured_outputs: StructuredOutputs | None = None
    top_k: int | None = Field(None, ge=-1, le=2**31 - 1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=100.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = None
    cache_salt: CacheSalt | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_stateful(cls, data: Any) -> Any:
        return drop_refused_by(data, REFUSED)

    @model_validator(mode="after")
    def _asks_for_nothing_missing(self) -> ResponsesRequest:
        if self.reasoning and (self.reasoning.summary or self.reasoning.generate_summary):
            _unsupported("reasoning.summary", "no reasoning parser is configured, so replies "
                         "carry no reasoning summary")
        if self.include and "message.output_text.logprobs" in self.include:
            _unsupported("include", "logprobs are not returned on this endpoint")
        return self

    @property
    def n(self) -> int:
        return 1  # one output per response

    def constraint(self) -> StructuredOutput | None:
        fmt = self.text.format if self.text else None
        return constraint(fmt.response_format() if fmt else None, self.structured_outputs)

    def tools_request(self) -> ToolsRequest | None:
        """What the request asks of tools, checked as chat's (400s name the field)."""
        constrained = bool(self.structured_outputs and self.structured_outputs.kinds())
        return responses_tools_request(self.tools, self.tool_choice, self.parallel_tool_calls,
                                       constrained)

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def template_variables(self) -> dict[str, JsonValue]:
        effort = self.reasoning.effort if self.reasoning else None
        if effort is None:
            return {}
        # As for chat's reasoning_effort (ChatCompletionRequest.template_kwargs).
        return {"reasoning_effort": effort, "enable_thinking": effort != "none"}


def _unsupported(param: str, reason: str) -> None:
    raise PydanticCustomError(UNSUPPORTED, "'{param}' is not supported here: {reason}",
                              {"param": param, "reason": reason})


# OpenAPI: a 200 is a response object, or with "stream" named server-sent events.
RESPONSES_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"description": "A response (JSON), or with \"stream\": true its events as "
                         "server-sent events (event: <type>, data: the event as JSON)",
          "content": {"text/event-stream": {"schema": {
              "type": "object", "required": ["event", "data"],
              "properties": {"event": {"type": "string"}, "data": {"type": "string"}}}}}},
}
