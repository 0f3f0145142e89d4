"""Typed events an engine streams back for one request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopLogprob:
    token: str
    logprob: float
    token_bytes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    token_bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """New output of one choice. ``finish_reason`` is set on its last delta."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class SpecDecodeSummary:
    """Acceptance of one finished request (absent for plain decoding)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens produced per verification step, the bonus token included."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0


@dataclass(frozen=True, slots=True)
class Finished:
    prompt_tokens: int
    completion_tokens: int
    spec_decode: SpecDecodeSummary | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The engine gave up on the request; ``message`` is safe to show a client.
    ``engine_died``: the engine itself failed while serving it (and is restarted)."""

    message: str
    retryable: bool = False
    engine_died: bool = False


GenerationEvent = TextDelta | Finished | Failed
