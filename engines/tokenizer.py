"""Prompt rendering shared by all engines of one model.

Every mode serves the same target model, so one tokenizer (with the model's
own chat template) turns requests into token ids once, in the gateway, before
a mode is chosen: the policy needs the prompt length, and the engines then
skip their own tokenization.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class TurnToolCall:
    """A tool call an assistant turn made (OpenAI's ``tool_calls`` entry)."""

    id: str
    name: str
    arguments: str                      # JSON text, as the caller sent it


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: str
    content: str
    tool_calls: tuple[TurnToolCall, ...] = ()
    tool_call_id: str | None = None     # a tool turn: the call it answers

    def template_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                for c in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


def _arguments(text: str) -> Any:
    # As vLLM passes them: templates expect arguments as an object, and a malformed
    # string in the history becomes {} rather than failing every later turn.
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


@dataclass(frozen=True, slots=True)
class ChatTemplateOptions:
    """How a conversation is rendered (vLLM's request fields of the same names)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    # Further template variables (documents, reasoning_effort, the caller's own).
    variables: Mapping[str, Any] = field(default_factory=dict)
    # OpenAI tool objects offered to the model (the template's ``tools``).
    tools: Sequence[Mapping[str, Any]] | None = None

    def uses_tools(self, turns: Sequence[ChatTurn]) -> bool:
        return bool(self.tools) or any(t.tool_calls or t.role == "tool" for t in turns)


class Tokenizer(Protocol):
    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def render_chat(self, turns: Sequence[ChatTurn],
                    options: ChatTemplateOptions | None = None) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


class ChatTemplateError(ValueError):
    """The model's chat template refused the conversation (e.g. bad role order)."""


class HfTokenizer:
    """A ``transformers`` tokenizer loaded from the model directory.

    ``chat_template`` replaces the model's own template; ``tool_chat_template`` is
    used instead for conversations with tools or tool turns (the embedded model's own
    template has no tool support)."""

    def __init__(self, model_dir: str, chat_template: str | None = None,
                 tool_chat_template: str | None = None) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(model_dir)
        if chat_template is not None:
            self._tok.chat_template = chat_template
        if not self._tok.chat_template:
            raise ValueError(f"the tokenizer in {model_dir} has no chat template")
        self._tool_template = tool_chat_template

    @property
    def hf_tokenizer(self) -> Any:
        """The ``transformers`` tokenizer itself (vLLM's tool parsers take it)."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def render_chat(self, turns: Sequence[ChatTurn],
                    options: ChatTemplateOptions | None = None) -> list[int]:
        options = options or ChatTemplateOptions()
        messages = [t.template_message() for t in turns]
        template = self._tool_template if options.uses_tools(turns) else None
        try:
            text = self._tok.apply_chat_template(
                messages, add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message, tokenize=False,
                tools=list(options.tools) if options.tools else None,
                chat_template=template, **options.variables)
        except Exception as e:  # jinja raises TemplateError for refused input
            raise ChatTemplateError(f"the model's chat template rejected the messages: {e}") from e
        return self.encode(text, options.add_special_tokens)

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(token_ids), skip_special_tokens=True))
