"""Wire models of ``POST /v1/completions`` (the legacy text endpoint)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from gateway.fields import Endpoint
from gateway.protocol import SamplingFields, Text


class CompletionRequest(SamplingFields):
    endpoint: ClassVar[Endpoint] = "completions"

    # One prompt: a string, or token ids. A list holding one string is accepted
    # because SDKs often wrap a single prompt that way.
    prompt: Text | list[Text] | list[int] = Field(union_mode="left_to_right")
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    best_of: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> CompletionRequest:
        if isinstance(self.prompt, list):
            if not self.prompt:
                raise ValueError("'prompt' must not be empty")
            if isinstance(self.prompt[0], str) and len(self.prompt) != 1:
                raise ValueError("send one prompt per request (batched prompts are not supported)")
        if self.best_of is not None and self.best_of != (self.n or 1):
            raise ValueError("'best_of' other than 'n' is not supported")
        if self.stream_options is not None and not self.stream:
            raise ValueError("'stream_options' is only allowed when 'stream' is true")
        return self

    def prompt_text(self) -> str | None:
        if isinstance(self.prompt, str):
            return self.prompt
        if isinstance(self.prompt[0], str):
            return str(self.prompt[0])
        return None

    def prompt_ids(self) -> list[int] | None:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], int):
            return [int(t) for t in self.prompt]
        return None


def completion_logprobs(entries: list[Any], text_offset: int) -> dict[str, Any]:
    """OpenAI's legacy ``logprobs`` object; offsets count from the choice's start."""
    tokens, token_logprobs, top, offsets = [], [], [], []
    pos = text_offset
    for e in entries:
        tokens.append(e.token)
        token_logprobs.append(e.logprob)
        top.append({t.token: t.logprob for t in e.top})
        offsets.append(pos)
        pos += len(e.token)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top,
            "text_offset": offsets}
