"""Legacy text completions: the prompt as given, text-shaped output."""

from __future__ import annotations

from openai.types import Completion, CompletionChoice, CompletionUsage
from openai.types.completion_choice import Logprobs

from engines.events import Finished, TextDelta
from engines.tokenizer import Tokenizer
from gateway.completions.protocol import CompletionRequest, completion_logprobs
from gateway.endpoint import OpenAIEndpoint
from gateway.protocol import usage
from gateway.sampling import truncate_prompt
from service.errors import InvalidRequest
from service.serving import Call, ChoiceState


class CompletionEndpoint(OpenAIEndpoint[CompletionRequest]):
    id_prefix = "cmpl"

    def prompt_token_ids(self, wire: CompletionRequest,
                         tokenizer: Tokenizer, max_model_len: int) -> list[int]:
        ids = wire.prompt_ids()
        if ids is None:
            # vLLM's completions default: the tokenizer's special tokens (BOS) are added.
            add_special = True if wire.add_special_tokens is None else wire.add_special_tokens
            ids = tokenizer.encode(wire.prompt_text() or "", add_special)
        else:
            vocab = tokenizer.vocab_size
            if any(t < 0 or t >= vocab for t in ids):
                raise InvalidRequest(f"prompt token ids must be in [0, {vocab})",
                                     param="prompt")
        return truncate_prompt(wire, ids, max_model_len)

    def sampling_extras(self, wire: CompletionRequest) -> tuple[int | None, int | None]:
        return wire.max_tokens, wire.logprobs

    def json_body(self, call: Call, finished: Finished) -> Completion:
        logprobs = call.generation.sampling.logprobs is not None
        return Completion(
            id=call.id, object="text_completion", created=call.created, model=call.model,
            system_fingerprint=None,
            choices=[CompletionChoice(
                index=c.index, text="".join(c.text),
                logprobs=Logprobs.model_validate(completion_logprobs(c.logprobs, 0))
                if logprobs else None,
                finish_reason=c.finish_reason or "stop") for c in call.choices],
            usage=usage(finished.prompt_tokens, finished.completion_tokens))

    def chunk(self, call: Call, choices: list[CompletionChoice],
              usage: CompletionUsage | None, with_usage: bool) -> Completion:
        chunk = Completion(id=call.id, object="text_completion", created=call.created,
                           model=call.model, choices=choices)
        if with_usage:
            chunk.usage = usage
        return chunk

    def chunk_choices(self, call: Call, state: ChoiceState,
                      delta: TextDelta) -> list[CompletionChoice]:
        logprobs = None
        if delta.logprobs:
            logprobs = Logprobs.model_validate(
                completion_logprobs(list(delta.logprobs), state.chars_sent))
        state.chars_sent += len(delta.text)
        if not delta.text and not logprobs and delta.finish_reason is None:
            return []
        # Not validated: a chunk's finish_reason is null until the last, which the
        # SDK's type (shared with the non-streaming choice) does not allow.
        return [CompletionChoice.model_construct(
            index=state.index, text=delta.text, logprobs=logprobs,
            finish_reason=state.finish_reason if delta.finish_reason else None)]  # type: ignore[arg-type]
