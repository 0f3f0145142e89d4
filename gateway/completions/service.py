"""Legacy text completions: the prompt as given, text-shaped output."""

from __future__ import annotations

from typing import Any

from engines.events import Finished, TextDelta
from gateway.completions.protocol import CompletionRequest, completion_logprobs
from gateway.errors import bad_request
from gateway.protocol import usage
from gateway.serving import Call, ChoiceState, Serving


class CompletionService(Serving):
    id_prefix = "cmpl"

    def prompt_token_ids(self, wire: CompletionRequest) -> list[int]:
        ids = wire.prompt_ids()
        if ids is None:
            # vLLM's completions default: the tokenizer's special tokens (BOS) are added.
            add_special = True if wire.add_special_tokens is None else wire.add_special_tokens
            return self.tokenizer.encode(wire.prompt_text() or "", add_special)
        vocab = self.tokenizer.vocab_size
        if any(t < 0 or t >= vocab for t in ids):
            raise bad_request(f"prompt token ids must be in [0, {vocab})",
                              param="prompt")
        return ids

    def sampling_extras(self, wire: CompletionRequest) -> tuple[int | None, int | None]:
        return wire.max_tokens, wire.logprobs

    def chunk_object(self) -> str:
        return "text_completion"

    def json_body(self, call: Call, finished: Finished) -> dict[str, Any]:
        return {
            "id": call.id, "object": "text_completion", "created": call.created,
            "model": call.model, "system_fingerprint": None,
            "choices": [{
                "index": c.index, "text": "".join(c.text),
                "logprobs": completion_logprobs(c.logprobs, 0)
                if call.generation.sampling.logprobs is not None else None,
                "finish_reason": c.finish_reason or "stop",
            } for c in call.choices],
            "usage": usage(finished.prompt_tokens, finished.completion_tokens),
        }

    def chunk_choices(self, call: Call, state: ChoiceState,
                      delta: TextDelta) -> list[dict[str, Any]]:
        logprobs = None
        if delta.logprobs:
            logprobs = completion_logprobs(list(delta.logprobs), state.chars_sent)
        state.chars_sent += len(delta.text)
        if not delta.text and not logprobs and delta.finish_reason is None:
            return []
        return [{"index": state.index, "text": delta.text, "logprobs": logprobs,
                 "finish_reason": state.finish_reason if delta.finish_reason else None}]
