"""The model SpecGate serves when no external one is configured.

SmolLM2-135M-Instruct, fetched from PyPI as GGUF, converted to safetensors,
plus the trained EAGLE-3 and DFlash drafters shipped in ``trained/``.
"""

from engines.embedded.prepare import EmbeddedModel, prepare_embedded

__all__ = ["EmbeddedModel", "prepare_embedded"]
