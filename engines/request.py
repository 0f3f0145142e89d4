"""What the gateway asks an engine to generate, already validated and tokenized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ConstraintKind = Literal["json", "json_object", "regex", "choice", "grammar"]


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """An output constraint (vLLM's structured outputs): the engine masks every token
    that would leave it, drafts included."""

    kind: ConstraintKind
    # json: the JSON schema as JSON text; choice: the choices as a JSON list; regex and
    # grammar: the text itself; json_object: empty.
    spec: str = ""
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # None: no logprobs. 0: the chosen token's logprob only. k: plus the top k.
    logprobs: int | None = None
    # vLLM's sampling extras, with its neutral defaults.
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    ignore_eos: bool = False
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words: tuple[str, ...] = ()
    structured: StructuredOutput | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingOptions
    cache_salt: str | None = None       # salts the engine's prefix cache
