"""Wire models of ``POST /v1/chat/completions``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from gateway.protocol import Name, SamplingFields, Text, WireModel


class TextPart(WireModel):
    type: Literal["text"]
    text: Text


class ChatMessage(WireModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart] | None = None
    name: Name | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a '{self.role}' message needs 'content'")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ResponseFormat(WireModel):
    type: Literal["text"]


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    # Accepted for SDK compatibility; they change nothing here.
    store: bool | None = None
    parallel_tool_calls: bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("'top_logprobs' requires 'logprobs' to be true")
        if self.stream_options is not None and not self.stream:
            raise ValueError("'stream_options' is only allowed when 'stream' is true")
        return self

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
