"""An OpenAI endpoint: its request steps for serving, and its output in the SDK's types."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Generic, TypeVar

from openai.types import CompletionUsage
from pydantic import BaseModel

from engines.events import Finished, TextDelta
from engines.request import SamplingOptions
from gateway.protocol import SamplingFields
from gateway.sampling import sampling_options
from service.serving import Call, ChoiceState, Endpoint

W = TypeVar("W", bound=SamplingFields)


class OpenAIEndpoint(Endpoint[W], Generic[W]):
    def sampling(self, wire: W, *, max_tokens: int, n: int, logprobs: int | None,
                 vocab_size: int) -> SamplingOptions:
        return sampling_options(wire, max_tokens=max_tokens, n=n, logprobs=logprobs,
                                vocab_size=vocab_size)

    @abstractmethod
    def json_body(self, call: Call, finished: Finished) -> BaseModel:
        """The whole response, as the ``openai`` package's type for it."""

    @abstractmethod
    def chunk_choices(self, call: Call, state: ChoiceState, delta: TextDelta) -> list[Any]:
        """The stream choices one engine delta becomes (the SDK's chunk choice type)."""

    @abstractmethod
    def chunk(self, call: Call, choices: list[Any], usage: CompletionUsage | None,
              with_usage: bool) -> BaseModel:
        """One stream chunk; ``with_usage``: it carries ``usage`` (null until the end)."""


def dump(model: BaseModel) -> dict[str, Any]:
    # Only the fields set (the SDK's types carry many optional ones this server never
    # fills); ``warnings=False``: stream choices are built unvalidated (a chunk's
    # finish_reason is null until the last, which the SDK's type does not allow).
    # ``by_alias``: the wire names (a Responses json_schema format's ``schema_`` is "schema").
    return model.model_dump(mode="json", exclude_unset=True, warnings=False, by_alias=True)
