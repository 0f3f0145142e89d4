"""How one engine is to be built: model, decoding method, memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

DType = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]


@dataclass(frozen=True)
class EngineSpec:
    mode: str
    model: str
    # vLLM ``speculative_config``; None is plain (standard) decoding.
    speculative_config: dict[str, Any] | None = None
    kv_cache_bytes: int = 256 * 1024**2
    max_model_len: int = 2048
    dtype: DType = "bfloat16"
    enforce_eager: bool = True
    seed: int = 0
    # CPU build only: the cores this engine's worker binds to ("0", "0-3",
    # "nobind"). vLLM reads it from the environment when the engine is made.
    cpu_threads_bind: str | None = None
    # Anything else vLLM's AsyncEngineArgs accepts (gpu_memory_utilization...).
    extra_engine_args: dict[str, Any] = field(default_factory=dict)

    @property
    def is_speculative(self) -> bool:
        return self.speculative_config is not None
