"""Wire models shared by the OpenAI endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

StopString = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class WireModel(BaseModel):
    """Requests reject unknown arguments and non-finite numbers, like OpenAI does."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StreamOptions(WireModel):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # sent by newer SDKs; nothing to obfuscate here


class SamplingFields(WireModel):
    """Fields both endpoints share, with OpenAI's documented ranges."""

    model: str = Field(min_length=1, max_length=256)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=128)
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stop: StopString | list[StopString] | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=512)
    metadata: dict[str, str] | None = None

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


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens).model_dump()
