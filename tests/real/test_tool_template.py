"""The embedded model's tool chat template, rendered by its real tokenizer (CPU, seconds,
once the embedded model is prepared: the first use prepares it, as ``specgate prepare``)."""

from __future__ import annotations

import pytest

from engines.embedded import TOOL_CHAT_TEMPLATE, prepare_embedded
from engines.tokenizer import ChatTemplateOptions, ChatTurn, HfTokenizer, TurnToolCall
from service.settings import Settings

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(prepare_embedded(Settings().cache_dir, lambda _: None).target_dir)


@pytest.fixture(scope="module")
def tokenizers(model_dir: str) -> tuple[HfTokenizer, HfTokenizer]:
    template = TOOL_CHAT_TEMPLATE.read_text()
    return HfTokenizer(model_dir), HfTokenizer(model_dir, chat_template=template)


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


def test_tools_calls_and_results_render_hermes_style(model_dir: str) -> None:
    tokenizer = HfTokenizer(model_dir, tool_chat_template=TOOL_CHAT_TEMPLATE.read_text())
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
