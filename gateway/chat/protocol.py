"""Wire models of ``POST /v1/chat/completions``."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, JsonValue, field_validator, model_validator

from engines.tool_calls import ToolsRequest
from gateway.chat.tools import ToolCalls, ToolChoice, Tools, tools_request
from gateway.fields import Endpoint
from gateway.protocol import Name, SamplingFields, Text, User, WireModel


class TextPart(WireModel):
    type: Literal["text"]
    text: Text


class ChatMessage(WireModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: Name | None = None
    tool_calls: ToolCalls | None = None      # assistant: the calls it made
    tool_call_id: Name | None = None         # tool: the call this result answers

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a '{self.role}' message needs 'content'")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only an assistant message has 'tool_calls'")
        if (self.tool_call_id is None) == (self.role == "tool"):
            raise ValueError("a 'tool' message needs 'tool_call_id', and only it has one")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


# Names apply_chat_template takes itself: as template kwargs they would collide with them.
_TEMPLATE_CALL_ARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length",
    "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"})


def _template_variable(name: str) -> str:
    if not (name.isascii() and name.isidentifier() and len(name) <= 64):
        raise ValueError("template variable names must be identifiers of at most 64 characters")
    return name


TemplateKwarg = Annotated[str, AfterValidator(_template_variable)]


class ChatCompletionRequest(SamplingFields):
    endpoint: ClassVar[Endpoint] = "chat"

    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # The chat template's inputs (vLLM's fields, with its defaults).
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[Text, Text]] | None = Field(None, max_length=256)
    chat_template_kwargs: dict[TemplateKwarg, JsonValue] | None = Field(None, max_length=64)
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh",
                              "max"] | None = None
    modalities: list[Literal["text"]] | None = Field(None, max_length=4)
    # Tools (gateway/chat/tools.py): checked against each other in tools().
    tools: Tools | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Accepted for SDK compatibility; they change nothing here (gateway/fields.py).
    store: bool | None = None
    include_reasoning: bool = True
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    prompt_cache_key: User | None = None
    safety_identifier: User | None = None
    verbosity: Literal["low", "medium", "high"] | None = None

    @field_validator("chat_template_kwargs")
    @classmethod
    def _not_call_args(cls, kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
        taken = sorted(set(kwargs or ()) & _TEMPLATE_CALL_ARGS)
        if taken:
            raise ValueError(f"{taken[0]!r} cannot be passed as a template variable here")
        return kwargs

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("'top_logprobs' requires 'logprobs' to be true")
        if self.stream_options is not None and not self.stream:
            raise ValueError("'stream_options' is only allowed when 'stream' is true")
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("'continue_final_message' needs 'add_generation_prompt': false")
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise ValueError("'continue_final_message' needs an assistant message last")
        return self

    def template_kwargs(self) -> dict[str, Any]:
        """Variables for the chat template besides the messages, as vLLM passes them."""
        kwargs: dict[str, Any] = dict(self.chat_template_kwargs or {})
        if self.documents is not None:
            kwargs["documents"] = self.documents
        if self.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.reasoning_effort
            # Templates that need an explicit opt-in to think (vLLM does the same).
            kwargs.setdefault("enable_thinking", self.reasoning_effort != "none")
        return kwargs

    def tools_request(self) -> ToolsRequest | None:
        """What the request asks of tools; a 400 naming the field for one that cannot
        be served (a tool_choice naming no declared function...)."""
        constrained = bool(self.structured_outputs and self.structured_outputs.kinds())
        return tools_request(self.tools, self.tool_choice, self.parallel_tool_calls,
                             constrained)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens

    def logprobs_k(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


def chat_logprobs(entries: list[Any]) -> dict[str, Any]:
    """OpenAI's chat ``logprobs`` object from engine ``TokenLogprob`` entries."""
    return {"content": [
        {"token": e.token, "logprob": e.logprob, "bytes": list(e.token_bytes),
         "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.token_bytes)}
                          for t in e.top]}
        for e in entries]}
