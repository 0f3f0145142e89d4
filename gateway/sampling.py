"""From a validated wire request to what the engine is asked for.

The wire models check types and ranges; what needs the model (token ids
against its vocabulary, lengths against its context) is checked here, once,
before a mode is chosen, so that every mode gets the same request and a bad
one is a 400 that never reaches an engine.
"""

from __future__ import annotations

from collections.abc import Iterable

from engines.request import SamplingOptions
from gateway.protocol import SamplingFields
from service.errors import InvalidRequest


def check_token_ids(ids: Iterable[int], vocab_size: int, param: str) -> None:
    if any(t >= vocab_size for t in ids):
        raise InvalidRequest(f"{param} must hold token ids in [0, {vocab_size})", param=param)


def truncate_prompt(wire: SamplingFields, prompt: list[int], max_model_len: int) -> list[int]:
    """vLLM's ``truncate_prompt_tokens``: -1 keeps the context length less one token."""
    keep = wire.truncate_prompt_tokens
    if keep is None:
        return prompt
    if keep > max_model_len:
        raise InvalidRequest(f"truncate_prompt_tokens={keep} cannot be greater than the "
                          f"context length ({max_model_len})", param="truncate_prompt_tokens")
    if keep < 0:
        keep = max(0, max_model_len - 1)
    if keep >= len(prompt):
        return prompt
    # vLLM's tokenizers truncate on the left (keep the last tokens) unless told otherwise.
    return prompt[:keep] if wire.truncation_side == "right" else prompt[len(prompt) - keep:]


def sampling_options(wire: SamplingFields, *, max_tokens: int, n: int,
                     logprobs: int | None, vocab_size: int) -> SamplingOptions:
    bias = tuple((int(k), v) for k, v in (wire.logit_bias or {}).items())
    check_token_ids((t for t, _ in bias), vocab_size, "logit_bias")
    check_token_ids(wire.stop_token_ids or (), vocab_size, "stop_token_ids")
    check_token_ids(wire.allowed_token_ids or (), vocab_size, "allowed_token_ids")
    if n > 1 and wire.temperature == 0:
        raise InvalidRequest(f"n must be 1 when temperature is 0 (greedy decoding gives one "
                             f"answer), got {n}", param="n")
    if wire.min_tokens > max_tokens:
        raise InvalidRequest(f"min_tokens ({wire.min_tokens}) must be at most max_tokens "
                          f"({max_tokens})", param="min_tokens")
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=1.0 if wire.temperature is None else wire.temperature,
        top_p=1.0 if wire.top_p is None else wire.top_p, seed=wire.seed,
        stop=wire.stop_tuple(), n=n, presence_penalty=wire.presence_penalty or 0.0,
        frequency_penalty=wire.frequency_penalty or 0.0, logprobs=logprobs,
        top_k=wire.top_k or 0, min_p=wire.min_p or 0.0,
        repetition_penalty=1.0 if wire.repetition_penalty is None else wire.repetition_penalty,
        min_tokens=wire.min_tokens, ignore_eos=wire.ignore_eos, logit_bias=bias,
        stop_token_ids=tuple(wire.stop_token_ids or ()),
        include_stop_str_in_output=wire.include_stop_str_in_output,
        skip_special_tokens=wire.skip_special_tokens,
        spaces_between_special_tokens=wire.spaces_between_special_tokens,
        allowed_token_ids=tuple(wire.allowed_token_ids) if wire.allowed_token_ids else None,
        bad_words=tuple(wire.bad_words or ()), structured=wire.constraint())
