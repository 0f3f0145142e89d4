"""The Responses API: ``input`` through the chat template, output as a ``Response``.

The prompt is rendered exactly as chat messages are (``render_messages``), with
``instructions`` as a system message first, as vLLM and OpenAI do, and function tools
offered as chat offers them. Without tools a response has one output item, an
assistant message with one ``output_text`` part; with tools, the calls read from the
reply are ``function_call`` items after the message (left out when the reply is only
calls), as OpenAI orders them. A reply cut by the length limit is ``incomplete``
(reason ``max_output_tokens``), as OpenAI's, and so is its last item.
"""

from __future__ import annotations

import time
from typing import Literal

from openai.types.responses import (
    FunctionTool,
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextConfig,
    ResponseUsage,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from openai.types.shared import Reasoning

from engines.events import Finished
from engines.request import SamplingOptions
from engines.tokenizer import ChatTemplateOptions, Tokenizer
from engines.tool_calls import ToolCallParser, ToolCallSession
from gateway.chat.endpoint import asked_of, render_messages
from gateway.chat.protocol import ChatMessage
from gateway.chat.tools import tool_session
from gateway.responses.items import chat_messages
from gateway.responses.protocol import ResponsesRequest
from gateway.responses.tools import echoed_tool_choice, function_call, template_tools
from service.request_class import Asked
from service.serving import Call, Endpoint

Status = Literal["in_progress", "completed", "incomplete"]
OutputItem = ResponseOutputMessage | ResponseFunctionToolCall


class ResponsesEndpoint(Endpoint[ResponsesRequest]):
    id_prefix = "resp"
    id_separator = "_"
    max_tokens_param = "max_output_tokens"

    def prompt_token_ids(self, wire: ResponsesRequest, tokenizer: Tokenizer,
                         max_model_len: int) -> list[int]:
        messages: list[ChatMessage] = []
        if wire.instructions is not None:
            messages.append(ChatMessage(role="system", content=wire.instructions))
        if isinstance(wire.input, str):
            messages.append(ChatMessage(role="user", content=wire.input))
        else:
            messages.extend(chat_messages(wire.input))
        # Offered even with tool_choice "none", as chat (and vLLM) do.
        options = ChatTemplateOptions(add_generation_prompt=True,
                                      variables=wire.template_variables(),
                                      tools=template_tools(wire.tools))
        return render_messages(messages, tokenizer, options, param="input")

    def tool_calls(self, wire: ResponsesRequest,
                   parser: ToolCallParser | None) -> ToolCallSession | None:
        return tool_session(wire.tools_request(), parser)

    def asked(self, wire: ResponsesRequest) -> Asked:
        if isinstance(wire.input, str):
            return Asked(wire.input)
        *before, last = chat_messages(wire.input)   # at least one item: validated
        return asked_of(before, last)

    def sampling_extras(self, wire: ResponsesRequest) -> tuple[int | None, int | None]:
        return wire.max_output_tokens, None

    def sampling(self, wire: ResponsesRequest, *, max_tokens: int, n: int,
                 logprobs: int | None, vocab_size: int) -> SamplingOptions:
        return SamplingOptions(
            max_tokens=max_tokens, n=n,
            temperature=1.0 if wire.temperature is None else wire.temperature,
            top_p=1.0 if wire.top_p is None else wire.top_p, seed=wire.seed,
            stop=wire.stop_tuple(), presence_penalty=wire.presence_penalty or 0.0,
            frequency_penalty=wire.frequency_penalty or 0.0, top_k=wire.top_k or 0,
            min_p=wire.min_p or 0.0,
            repetition_penalty=1.0 if wire.repetition_penalty is None
            else wire.repetition_penalty,
            structured=wire.constraint())

    def json_body(self, call: Call, finished: Finished) -> Response:
        status = final_status(call)
        return self.response(call, status, self.output(call, status), usage(finished))

    def output(self, call: Call, status: Status) -> list[OutputItem]:
        text = full_text(call)
        if call.tools is None:
            return [self.message(call, status, text)]
        found = call.tools.extract(text)
        items: list[OutputItem] = [function_call(c, "completed") for c in found.calls]
        if found.content is not None or not items:
            items.insert(0, self.message(call, "completed", found.content or ""))
        items[-1].status = status
        return items

    def message(self, call: Call, status: Status, text: str | None) -> ResponseOutputMessage:
        """The one output item; ``text`` None: opened, no content part yet."""
        return ResponseOutputMessage(
            id=message_id(call), type="message", role="assistant", status=status,
            content=[] if text is None else [output_text(text)])

    def response(self, call: Call, status: Status, output: list[OutputItem],
                 usage: ResponseUsage | None = None) -> Response:
        wire = call.wire
        assert isinstance(wire, ResponsesRequest)
        sampling = call.generation.sampling
        response = Response(
            id=call.id, object="response", created_at=call.created, model=call.model,
            status=status, output=list(output), error=None,
            incomplete_details=IncompleteDetails(reason="max_output_tokens")
            if status == "incomplete" else None,
            instructions=wire.instructions, metadata=dict(wire.metadata or {}),
            temperature=sampling.temperature, top_p=sampling.top_p,
            max_output_tokens=wire.max_output_tokens,
            parallel_tool_calls=wire.parallel_tool_calls is not False,
            tool_choice=echoed_tool_choice(wire.tool_choice),
            tools=[FunctionTool.model_validate(t.model_dump(exclude_none=True))
                   for t in wire.tools or []],
            text=text_config(wire), truncation="disabled", background=False,
            previous_response_id=None, user=wire.user, usage=usage)
        if wire.reasoning is not None:
            response.reasoning = Reasoning(effort=wire.reasoning.effort)
        if status == "completed":
            response.completed_at = time.time()
        return response


def final_status(call: Call) -> Status:
    return "incomplete" if call.choices[0].finish_reason == "length" else "completed"


def full_text(call: Call) -> str:
    return "".join(call.choices[0].text)


def message_id(call: Call) -> str:
    return "msg_" + call.id.removeprefix("resp_")


def output_text(text: str) -> ResponseOutputText:
    return ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])


def usage(finished: Finished) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=finished.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
        output_tokens=finished.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=finished.prompt_tokens + finished.completion_tokens)


def text_config(wire: ResponsesRequest) -> ResponseTextConfig:
    """The request's ``text`` as OpenAI echoes it (plain text when not given)."""
    given = wire.text.model_dump(by_alias=True, exclude_none=True) if wire.text else {}
    given.setdefault("format", {"type": "text"})
    return ResponseTextConfig.model_validate(given)
