"""Wire models shared by the OpenAI endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)


def _valid_unicode(value: str) -> str:
    # A JSON escape like "\ud800" decodes to a lone surrogate: no tokenizer can
    # encode it and no UTF-8 response can carry it, so refuse it at the edge.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it contains an unpaired "
                         "surrogate escape such as \\ud800)") from None
    return value


_UNICODE = AfterValidator(_valid_unicode)
# Length bounds go inside the alias, before the Unicode check: declared on the
# field instead, pydantic reports them as list lengths ("at most 256 items").
Text = Annotated[str, _UNICODE]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256), _UNICODE]
StopString = Name
User = Annotated[str, StringConstraints(max_length=512), _UNICODE]


class WireModel(BaseModel):
    """Requests reject unknown arguments and non-finite numbers, like OpenAI does.

    Strict: ``"10"``, ``true`` or ``2.0`` for an integer and ``"true"`` for a
    boolean are type errors, as in OpenAI's API, not silently converted values.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class StreamOptions(WireModel):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # sent by newer SDKs; nothing to obfuscate here


class SamplingFields(WireModel):
    """Fields both endpoints share, with OpenAI's documented ranges."""

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

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        return stop

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


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens).model_dump()
