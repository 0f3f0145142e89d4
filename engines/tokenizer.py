"""Prompt rendering shared by all engines of one model.

Every mode serves the same target model, so one tokenizer (with the model's
own chat template) turns requests into token ids once, in the gateway, before
a mode is chosen: the policy needs the prompt length, and the engines then
skip their own tokenization.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class ChatTemplateOptions:
    """How a conversation is rendered (vLLM's request fields of the same names)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    # Further template variables (documents, reasoning_effort, the caller's own).
    variables: Mapping[str, Any] = field(default_factory=dict)


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
    """A ``transformers`` tokenizer loaded from the model directory."""

    def __init__(self, model_dir: str) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(model_dir)
        if not self._tok.chat_template:
            raise ValueError(f"the tokenizer in {model_dir} has no chat template")

    @property
    def vocab_size(self) -> int:
        return len(self._tok)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def render_chat(self, turns: Sequence[ChatTurn],
                    options: ChatTemplateOptions | None = None) -> list[int]:
        options = options or ChatTemplateOptions()
        messages = [{"role": t.role, "content": t.content} for t in turns]
        try:
            text = self._tok.apply_chat_template(
                messages, add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message, tokenize=False,
                **options.variables)
        except Exception as e:  # jinja raises TemplateError for refused input
            raise ChatTemplateError(f"the model's chat template rejected the messages: {e}") from e
        return self.encode(text, options.add_special_tokens)

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(token_ids), skip_special_tokens=True))
