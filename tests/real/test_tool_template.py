"""The embedded model's tool chat template, rendered by its real tokenizer (CPU, seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.embedded import TOOL_CHAT_TEMPLATE
from engines.tokenizer import ChatTemplateOptions, ChatTurn, HfTokenizer, TurnToolCall

MODEL_DIR = Path.home() / ".cache" / "specgate" / "SmolLM2-135M-Instruct"
pytestmark = pytest.mark.skipif(not (MODEL_DIR / "tokenizer.json").is_file(),
                                reason=f"the embedded model is not prepared in {MODEL_DIR} "
                                       "(specgate prepare)")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def tokenizers() -> tuple[HfTokenizer, HfTokenizer]:
    template = TOOL_CHAT_TEMPLATE.read_text()
    return HfTokenizer(str(MODEL_DIR)), HfTokenizer(str(MODEL_DIR), chat_template=template)


@pytest.mark.parametrize("turns", [
    [ChatTurn("user", "Hi")],
    [ChatTurn("system", "Be brief."), ChatTurn("user", "Hi"), ChatTurn("assistant", "Hello"),
     ChatTurn("user", "And?")]])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_without_tools_it_renders_as_the_models_own(
        tokenizers: tuple[HfTokenizer, HfTokenizer], turns: list[ChatTurn],
        generation_prompt: bool) -> None:
    own, tools = tokenizers
    options = ChatTemplateOptions(add_generation_prompt=generation_prompt)
    assert tools.render_chat(turns, options) == own.render_chat(turns, options)


def test_tools_calls_and_results_render_hermes_style() -> None:
    tokenizer = HfTokenizer(str(MODEL_DIR), tool_chat_template=TOOL_CHAT_TEMPLATE.read_text())
    turns = [ChatTurn("user", "Weather in Paris?"),
             ChatTurn("assistant", "", (TurnToolCall("call_1", "get_weather",
                                                     '{"city": "Paris"}'),)),
             ChatTurn("tool", "18C", tool_call_id="call_1")]
    text = tokenizer.hf_tokenizer.decode(
        tokenizer.render_chat(turns, ChatTemplateOptions(tools=TOOLS)))
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call><|im_end|>') in text
    assert "<|im_start|>tool\n<tool_response>\n18C\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    # No tools, no tool turns: the model's own template.
    plain = tokenizer.hf_tokenizer.decode(tokenizer.render_chat([ChatTurn("user", "Hi")]))
    assert "<tools>" not in plain
