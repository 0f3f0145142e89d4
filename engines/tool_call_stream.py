"""One choice's generated text read as tool calls while it streams.

vLLM's streaming extraction needs the text before and after each delta, its token
ids, and which calls were already announced; vLLM's chat handler keeps those in its
own per-request state, so this class keeps them for the gateway and delegates the
extraction itself to vLLM (``engines/tool_calls.py`` says which function for which
``tool_choice``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engines.tool_calls import (
    StreamDelta,
    ToolCallDelta,
    ToolCallSession,
    ToolChoiceMode,
    call_id,
)


class ToolCallStream:
    """One choice's stream, fed the engine's deltas in order."""

    def __init__(self, session: ToolCallSession) -> None:
        self._session = session
        self._parser = session.parser() if session.request.choice == "auto" else None
        self._text = ""
        self._token_ids: list[int] = []
        self._ids: dict[int, str] = {}       # call index -> the id sent with it

    @property
    def called(self) -> bool:
        return bool(self._ids)

    def feed(self, text: str, token_ids: Sequence[int]) -> StreamDelta | None:
        previous, previous_ids = self._text, list(self._token_ids)
        self._text += text
        self._token_ids.extend(token_ids)
        choice = self._session.request.choice
        if choice == "none":
            return StreamDelta(text, ()) if text else None
        message = self._vllm_delta(choice, previous, text, previous_ids, token_ids)
        if message is None:
            return None
        calls = _merged([self._call(tc) for tc in message.tool_calls])
        if not message.content and not calls:
            return None
        return StreamDelta(message.content or None, calls)

    def _vllm_delta(self, choice: ToolChoiceMode, previous: str, text: str,
                    previous_ids: list[int], token_ids: Sequence[int]) -> Any:
        from vllm.tool_parsers.streaming import (
            extract_named_tool_call_streaming,
            extract_required_tool_call_streaming,
        )

        if choice == "named":
            if not text:
                return None
            message, _ = extract_named_tool_call_streaming(
                delta_text=text, function_name=self._session.request.function or "",
                function_name_returned=self.called, tool_call_idx=None,
                tool_call_id_type="random", tokenizer=self._session.tokenizer)
            return message
        if choice == "required":
            message, _ = extract_required_tool_call_streaming(
                previous_text=previous, current_text=self._text, tool_call_idx=None,
                tool_call_id_type="random")
            return message
        parser: Any = self._parser
        return parser.extract_tool_calls_streaming(
            previous, self._text, text, previous_ids, list(self._token_ids), list(token_ids),
            self._session.vllm_request)

    def _call(self, tc: Any) -> ToolCallDelta:
        function = tc.function
        first = tc.index not in self._ids
        if first:
            self._ids[tc.index] = call_id()
        return ToolCallDelta(tc.index, self._ids[tc.index] if first else None,
                             function.name if function is not None else None,
                             function.arguments if function is not None else None)

    def finish(self) -> StreamDelta | None:
        """Arguments the auto parser read but had not sent yet (vLLM sends them last)."""
        if self._parser is None or not self._ids:
            return None
        rest: str = self._parser.get_remaining_unstreamed_args()
        if not rest:
            return None
        return StreamDelta(None, (ToolCallDelta(max(self._ids), arguments=rest),))


def _merged(deltas: list[ToolCallDelta]) -> tuple[ToolCallDelta, ...]:
    # vLLM may send a call's name and its first arguments as two entries of one
    # index; OpenAI sends one entry per index per chunk.
    out: list[ToolCallDelta] = []
    for d in deltas:
        if out and out[-1].index == d.index and d.id is None and d.name is None:
            last = out[-1]
            out[-1] = replace(last, arguments=(last.arguments or "") + (d.arguments or ""))
        else:
            out.append(d)
    return tuple(out)
