"""Tool calls in generated text, found by vLLM's own pieces.

``auto`` (and ``none``) text goes through the tool-call parser registered in vLLM
under the configured name (``ToolParserManager``): its ``extract_tool_calls`` for a
whole reply, its ``extract_tool_calls_streaming`` for a stream. ``required`` and a
named function are constrained to the JSON schema vLLM builds for them
(``get_json_schema_from_tools``) and read back as vLLM's serving code reads them: a
JSON array of ``{"name", "parameters"}`` objects, or the named function's arguments,
streamed with vLLM's ``extract_required_tool_call_streaming`` /
``extract_named_tool_call_streaming``.

vLLM's serving layer drives its parsers with its own request objects and per-request
stream state, woven into its chat handler; the gateway has neither, so it keeps the
little state a stream needs (``engines/tool_call_stream.py``: the text so far, the
ids sent) and builds the vLLM request a parser expects once per request. vLLM is
imported by the first request with tools (or at start-up, ``ToolCallParser.load``):
a gateway that never sees tools never loads it here.

This vLLM's hermes parser asks for structural tags for ``required`` / named
(``VLLM_ENFORCE_STRICT_TOOL_CALLING``); the engines' constraint here is a JSON
schema, so the generic JSON route vLLM takes with that variable off is used.
"""

from __future__ import annotations

import json
import uuid
import warnings
from dataclasses import dataclass, replace
from typing import Any, Literal

from engines.request import SamplingOptions, StructuredOutput

ToolChoiceMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True, slots=True)
class ToolsRequest:
    """What a request asks of tools: OpenAI tool objects, validated at the edge."""

    tools: tuple[dict[str, Any], ...]
    choice: ToolChoiceMode
    function: str | None = None          # the named function, for ``named``
    parallel_tool_calls: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str                       # JSON text, as OpenAI returns it


@dataclass(frozen=True, slots=True)
class Extracted:
    content: str | None
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One stream fragment of call ``index``: its first carries id and name."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class StreamDelta:
    content: str | None
    calls: tuple[ToolCallDelta, ...]


def call_id() -> str:
    # OpenAI's shape ("call_" and 24 characters); vLLM's own is "chatcmpl-tool-...".
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallParser:
    """vLLM's tool-call parser class of one name, with the model's tokenizer.

    vLLM (seconds to import) is loaded by ``load``, which the gateway's start-up
    calls so that a wrong name fails there, or else by the first request with tools.
    """

    def __init__(self, name: str, tokenizer: Any) -> None:
        self.name = name
        self._tokenizer = tokenizer
        self._cls: Any = None

    def load(self) -> None:
        if self._cls is not None:
            return
        # Everything this module uses of vLLM is imported here, once; its own
        # import-time warnings are not ours.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import vllm.tool_parsers.streaming
            import vllm.tool_parsers.utils  # noqa: F401
            from vllm.tool_parsers import ToolParserManager

            try:
                self._cls = ToolParserManager.get_tool_parser(self.name)
            except KeyError:
                known = ", ".join(ToolParserManager.list_registered())
                raise ValueError(f"tool_call_parser {self.name!r} is not one of vLLM's: "
                                 f"{known}") from None

    def session(self, request: ToolsRequest) -> ToolCallSession:
        """Raises ``ValueError`` for tools vLLM cannot build a schema from."""
        self.load()
        return ToolCallSession(self._cls, self._tokenizer, request)


class ToolCallSession:
    """One request's tools: its constraint, and its output read back as tool calls."""

    def __init__(self, parser_cls: Any, tokenizer: Any, request: ToolsRequest) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers.utils import get_json_schema_from_tools

        self.request = request
        self._cls, self.tokenizer = parser_cls, tokenizer
        choice: Any = request.choice
        if request.choice == "named":
            choice = {"type": "function", "function": {"name": request.function}}
        try:
            self.vllm_request = ChatCompletionRequest(
                model="-", messages=[], tools=[dict(t) for t in request.tools],
                tool_choice=choice, parallel_tool_calls=request.parallel_tool_calls)
            vllm_request: Any = self.vllm_request
            schema = get_json_schema_from_tools(vllm_request.tool_choice, vllm_request.tools,
                                                request.parallel_tool_calls)
        except Exception as e:  # vLLM's validation errors: the tools as given are unusable
            raise ValueError(str(e)) from e
        self.constraint = None if schema is None else StructuredOutput(
            "json", json.dumps(schema))
        # The parser's own request tweaks (hermes keeps special tokens, in which some
        # models write <tool_call>); only skip_special_tokens is taken from them.
        adjusted = self.parser().adjust_request(self.vllm_request.model_copy(deep=True))
        self._skip_special_tokens: bool = adjusted.skip_special_tokens

    def parser(self) -> Any:
        """A fresh vLLM parser: it keeps per-stream state."""
        return self._cls(self.tokenizer, self.vllm_request.tools)

    def adjust(self, sampling: SamplingOptions) -> SamplingOptions:
        """As vLLM: required / named override any other output constraint."""
        return replace(sampling, structured=self.constraint or sampling.structured,
                       skip_special_tokens=sampling.skip_special_tokens
                       and self._skip_special_tokens)

    def extract(self, text: str) -> Extracted:
        choice = self.request.choice
        if choice == "none":
            return Extracted(text, ())
        if choice == "named":
            if not text.strip():
                return Extracted(None, ())
            assert self.request.function is not None
            return Extracted(None, (ToolCall(call_id(), self.request.function, text),))
        if choice == "required":
            return Extracted(None, _required_calls(text))
        info = self.parser().extract_tool_calls(text, request=self.vllm_request)
        if not info.tools_called:
            return Extracted(text, ())
        content = info.content if info.content and info.content.strip() else None
        return Extracted(content, tuple(ToolCall(call_id(), c.function.name,
                                                 c.function.arguments)
                                        for c in info.tool_calls))

    def finish_reason(self, engine_reason: str, called: bool) -> str:
        """OpenAI's (and vLLM's): ``tool_calls`` when auto called a tool or required
        ended by itself; a named call ends ``stop``, as the engine said."""
        choice = self.request.choice
        if (choice == "auto" and called) or (choice == "required" and engine_reason == "stop"):
            return "tool_calls"
        return engine_reason


def _required_calls(text: str) -> tuple[ToolCall, ...]:
    from pydantic import TypeAdapter, ValidationError
    from vllm.entrypoints.generate.base.protocol import FunctionDefinition

    try:
        parsed = TypeAdapter(list[FunctionDefinition]).validate_json(text)
    except ValidationError:  # cut off by max_tokens: no complete array
        return ()
    return tuple(ToolCall(call_id(), c.name, json.dumps(c.parameters, ensure_ascii=False))
                 for c in parsed)
