"""Wire models shared by the OpenAI endpoints."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from openai.types import CompletionUsage
from pydantic import Field, field_validator, model_validator

from engines.request import StructuredOutput
from gateway.fields import Endpoint, drop_refused
from gateway.structured import ResponseFormat, StructuredOutputs, constraint
from gateway.wire_types import (
    CacheSalt,
    Name,
    StopString,
    Text,
    TokenId,
    TokenIdKey,
    User,
    WireModel,
)

__all__ = ["Name", "SamplingFields", "Text", "User", "WireModel", "usage"]


class StreamOptions(WireModel):
    include_usage: bool | None = False
    # vLLM's: with include_usage, every chunk carries the usage so far.
    continuous_usage_stats: bool | None = False
    include_obfuscation: bool | None = None  # sent by newer SDKs; nothing to obfuscate here


class SamplingFields(WireModel):
    """Fields both endpoints share, with OpenAI's and vLLM's documented ranges.

    What each field does, and which vLLM fields are refused and why, is the
    table in ``gateway/fields.py``.
    """

    endpoint: ClassVar[Endpoint]

    model: Name
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=128)
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stop: StopString | list[StopString] | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: User | None = None
    metadata: dict[Text, Text] | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's sampling extras.
    top_k: int | None = Field(None, ge=-1, le=2**31 - 1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=100.0)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    logit_bias: dict[TokenIdKey, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = \
        Field(None, max_length=1024)
    stop_token_ids: list[TokenId] | None = Field(None, max_length=256)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: list[TokenId] | None = Field(None, min_length=1, max_length=262_144)
    bad_words: list[Name] | None = Field(None, max_length=256)
    cache_salt: CacheSalt | None = None
    # Prompt shaping, applied by the gateway (it tokenizes for every engine).
    add_special_tokens: bool | None = None     # None: vLLM's default for the endpoint
    truncate_prompt_tokens: int | None = Field(None, ge=-1, le=2**63 - 1)
    truncation_side: Literal["left", "right"] | None = None
    # Accepted as vLLM accepts them; they change nothing here (gateway/fields.py says why).
    length_penalty: float = 1.0
    watermarking: bool | None = None
    session_id: User | None = None
    routed_experts_prompt_start: int = Field(0, ge=0, le=2**63 - 1)
    return_token_offsets: bool | None = False
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        return drop_refused(data, cls.endpoint)

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        return stop

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def continuous_usage(self) -> bool:
        o = self.stream_options
        return bool(o and o.include_usage and o.continuous_usage_stats)

    def constraint(self) -> StructuredOutput | None:
        return constraint(self.response_format, self.structured_outputs)

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


# OpenAPI: a 200 is JSON, or server-sent events when the request set "stream".
# The event schema describes one event, as OpenAPI 3.2's itemSchema does: its
# data is a JSON chunk, an error object, or [DONE].
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "A completion (JSON), or with \"stream\": true a stream of "
                         "completion chunks as server-sent events ending in [DONE]",
          "content": {"text/event-stream": {"schema": {
              "type": "object", "required": ["data"],
              "properties": {"data": {"type": "string"}}}}}},
}


def usage(prompt_tokens: int, completion_tokens: int) -> CompletionUsage:
    return CompletionUsage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                           total_tokens=prompt_tokens + completion_tokens)
