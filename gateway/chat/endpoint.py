"""Chat completions: messages through the model's chat template, chat-shaped output."""

from __future__ import annotations

from collections.abc import Sequence

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as ChatChoice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkLogprobs

from engines.events import Finished, TextDelta
from engines.tokenizer import (
    ChatTemplateError,
    ChatTemplateOptions,
    ChatTurn,
    Tokenizer,
    TurnToolCall,
)
from engines.tool_call_stream import ToolCallStream
from engines.tool_calls import StreamDelta, ToolCallParser, ToolCallSession
from gateway.chat.protocol import ChatCompletionRequest, ChatMessage, chat_logprobs
from gateway.chat.tool_output import choice_delta, message_tool_calls
from gateway.chat.tools import tool_session
from gateway.endpoint import OpenAIEndpoint
from gateway.protocol import usage
from gateway.sampling import truncate_prompt
from service.errors import InvalidRequest
from service.request_class import Asked
from service.serving import Call, ChoiceState

# Roles the model's template knows; OpenAI's "developer" is its "system".
_TEMPLATE_ROLE = {"developer": "system"}


def render_messages(messages: Sequence[ChatMessage], tokenizer: Tokenizer,
                    options: ChatTemplateOptions, *, param: str) -> list[int]:
    """A conversation through the model's chat template: the one rendering of chat
    messages, whichever endpoint they came from (``param`` names them in errors)."""
    turns = [_turn(m) for m in messages]
    try:
        return tokenizer.render_chat(turns, options)
    except ChatTemplateError as e:
        raise InvalidRequest(str(e), param=param) from e


def _turn(m: ChatMessage) -> ChatTurn:
    calls = tuple(TurnToolCall(c.id, c.function.name, c.function.arguments)
                  for c in m.tool_calls or ())
    return ChatTurn(_TEMPLATE_ROLE.get(m.role, m.role), m.text(), calls, m.tool_call_id)


def asked_of(before: Sequence[ChatMessage], last: ChatMessage) -> Asked:
    return Asked(last.text(), "\n".join(m.text() for m in before),
                 sum(m.role == "assistant" for m in before))


class ChatEndpoint(OpenAIEndpoint[ChatCompletionRequest]):
    id_prefix = "chatcmpl"

    def tool_calls(self, wire: ChatCompletionRequest,
                   parser: ToolCallParser | None) -> ToolCallSession | None:
        return tool_session(wire.tools_request(), parser)

    def prompt_token_ids(self, wire: ChatCompletionRequest,
                         tokenizer: Tokenizer, max_model_len: int) -> list[int]:
        options = ChatTemplateOptions(
            add_generation_prompt=wire.add_generation_prompt,
            continue_final_message=wire.continue_final_message,
            add_special_tokens=bool(wire.add_special_tokens),  # vLLM's chat default: false
            variables=wire.template_kwargs(),
            # Offered even with tool_choice "none", as vLLM does by default.
            tools=[t.model_dump(exclude_none=True) for t in wire.tools] if wire.tools else None)
        prompt = render_messages(wire.messages, tokenizer, options, param="messages")
        return truncate_prompt(wire, prompt, max_model_len)

    def asked(self, wire: ChatCompletionRequest) -> Asked:
        *before, last = wire.messages      # at least one: validated
        if wire.continue_final_message and before:
            before, last = before[:-1], before[-1]
        return asked_of(before, last)

    def sampling_extras(self, wire: ChatCompletionRequest) -> tuple[int | None, int | None]:
        return wire.requested_max_tokens(), wire.logprobs_k()

    def json_body(self, call: Call, finished: Finished) -> ChatCompletion:
        logprobs = call.generation.sampling.logprobs is not None
        return ChatCompletion(
            id=call.id, object="chat.completion", created=call.created, model=call.model,
            system_fingerprint=None,
            choices=[self._choice(call.tools, c, logprobs) for c in call.choices],
            usage=usage(finished.prompt_tokens, finished.completion_tokens))

    @staticmethod
    def _choice(tools: ToolCallSession | None, c: ChoiceState, logprobs: bool) -> ChatChoice:
        text, finish = "".join(c.text), c.finish_reason or "stop"
        message = ChatCompletionMessage(role="assistant", content=text, refusal=None)
        if tools is not None:
            found = tools.extract(text)
            finish = tools.finish_reason(finish, bool(found.calls))
            message = ChatCompletionMessage(
                role="assistant", content=found.content, refusal=None,
                **({"tool_calls": message_tool_calls(found.calls)} if found.calls else {}))
        return ChatChoice(index=c.index, message=message,
                          logprobs=chat_logprobs(c.logprobs) if logprobs else None,
                          finish_reason=finish)

    def chunk(self, call: Call, choices: list[ChunkChoice],
              usage: CompletionUsage | None, with_usage: bool) -> ChatCompletionChunk:
        chunk = ChatCompletionChunk(id=call.id, object="chat.completion.chunk",
                                    created=call.created, model=call.model, choices=choices)
        if with_usage:
            chunk.usage = usage
        return chunk

    def chunk_choices(self, call: Call, state: ChoiceState,
                      delta: TextDelta) -> list[ChunkChoice]:
        chunks: list[ChunkChoice] = []
        if not state.opened:
            # OpenAI opens every choice with a role-only delta.
            state.opened = True
            chunks.append(ChunkChoice(index=state.index,
                                      delta=ChoiceDelta(role="assistant", content=""),
                                      logprobs=None, finish_reason=None))
        logprobs = ChunkLogprobs.model_validate(chat_logprobs(list(delta.logprobs))) \
            if delta.logprobs else None
        state.chars_sent += len(delta.text)
        finish = state.finish_reason
        if call.tools is None:
            if delta.text or delta.logprobs:
                chunks.append(ChunkChoice(index=state.index, delta=ChoiceDelta(content=delta.text),
                                          logprobs=logprobs, finish_reason=None))
        else:
            stream = state.tool_stream = state.tool_stream or ToolCallStream(call.tools)
            found = stream.feed(delta.text, delta.token_ids)
            if found is not None or logprobs is not None:
                chunks.append(ChunkChoice(
                    index=state.index, delta=choice_delta(found or StreamDelta(None, ())),
                    logprobs=logprobs, finish_reason=None))
            rest = stream.finish() if delta.finish_reason is not None else None
            if rest is not None:
                chunks.append(ChunkChoice(index=state.index, delta=choice_delta(rest),
                                          logprobs=None, finish_reason=None))
            if finish is not None:
                finish = call.tools.finish_reason(finish, stream.called)
        if delta.finish_reason is not None:
            chunks.append(ChunkChoice(index=state.index, delta=ChoiceDelta(), logprobs=None,
                                      finish_reason=finish))
        return chunks
