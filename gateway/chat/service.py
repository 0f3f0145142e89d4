"""Chat completions: messages through the model's chat template, chat-shaped output."""

from __future__ import annotations

from typing import Any

from engines.events import Finished, TextDelta
from engines.tokenizer import ChatTemplateError, ChatTemplateOptions, ChatTurn
from gateway.chat.protocol import ChatCompletionRequest, chat_logprobs
from gateway.errors import bad_request
from gateway.protocol import usage
from gateway.serving import Call, ChoiceState, Serving

# Roles the model's template knows; OpenAI's "developer" is its "system".
_TEMPLATE_ROLE = {"developer": "system"}


class ChatService(Serving):
    id_prefix = "chatcmpl"

    def prompt_token_ids(self, wire: ChatCompletionRequest) -> list[int]:
        turns = [ChatTurn(_TEMPLATE_ROLE.get(m.role, m.role), m.text()) for m in wire.messages]
        options = ChatTemplateOptions(
            add_generation_prompt=wire.add_generation_prompt,
            continue_final_message=wire.continue_final_message,
            add_special_tokens=bool(wire.add_special_tokens),  # vLLM's chat default: false
            variables=wire.template_kwargs())
        try:
            return self.tokenizer.render_chat(turns, options)
        except ChatTemplateError as e:
            raise bad_request(str(e), param="messages") from e

    def sampling_extras(self, wire: ChatCompletionRequest) -> tuple[int | None, int | None]:
        return wire.requested_max_tokens(), wire.logprobs_k()

    def chunk_object(self) -> str:
        return "chat.completion.chunk"

    def json_body(self, call: Call, finished: Finished) -> dict[str, Any]:
        return {
            "id": call.id, "object": "chat.completion", "created": call.created,
            "model": call.model, "system_fingerprint": None,
            "choices": [{
                "index": c.index,
                "message": {"role": "assistant", "content": "".join(c.text), "refusal": None},
                "logprobs": chat_logprobs(c.logprobs) if call.generation.sampling.logprobs
                is not None else None,
                "finish_reason": c.finish_reason or "stop",
            } for c in call.choices],
            "usage": usage(finished.prompt_tokens, finished.completion_tokens),
        }

    def chunk_choices(self, call: Call, state: ChoiceState,
                      delta: TextDelta) -> list[dict[str, Any]]:
        chunks: list[dict[str, Any]] = []
        if not state.opened:
            # OpenAI opens every choice with a role-only delta.
            state.opened = True
            chunks.append({"index": state.index, "delta": {"role": "assistant", "content": ""},
                           "logprobs": None, "finish_reason": None})
        if delta.text or delta.logprobs:
            state.chars_sent += len(delta.text)
            chunks.append({
                "index": state.index, "delta": {"content": delta.text},
                "logprobs": chat_logprobs(list(delta.logprobs)) if delta.logprobs else None,
                "finish_reason": None})
        if delta.finish_reason is not None:
            chunks.append({"index": state.index, "delta": {}, "logprobs": None,
                           "finish_reason": state.finish_reason})
        return chunks
