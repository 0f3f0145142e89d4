"""Prompt rendering shared by all engines of one model.

Every mode serves the same target model, so one tokenizer (with the model's
own chat template) turns requests into token ids once, in the gateway, before
a mode is chosen: the policy needs the prompt length, and the engines then
skip their own tokenization.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ChatTurn:
    role: str
    content: str


class Tokenizer(Protocol):
    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def render_chat(self, turns: Sequence[ChatTurn]) -> list[int]: ...

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

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def render_chat(self, turns: Sequence[ChatTurn]) -> list[int]:
        messages = [{"role": t.role, "content": t.content} for t in turns]
        try:
            text = self._tok.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False)
        except Exception as e:  # jinja raises TemplateError for refused input
            raise ChatTemplateError(f"the model's chat template rejected the messages: {e}") from e
        return self.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(token_ids), skip_special_tokens=True))
