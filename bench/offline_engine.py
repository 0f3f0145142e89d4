"""One in-process vLLM engine of the embedded model for the offline benchmarks, with
each request's draft counts reported when it speculates."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def offline_llm(model_dir: Path, method: str | None, drafter: Path | None, k: int,
                dtype: str, eager: bool = True, max_model_len: int = 1024,
                kv_cache_bytes: int = 1 << 30) -> Any:
    """A ``vllm.LLM``: plain decoding when ``drafter`` is None, else ``method`` with
    ``drafter`` drafting ``k`` tokens."""
    from vllm import LLM

    spec = None if drafter is None else {"method": method, "model": str(drafter),
                                         "num_speculative_tokens": k}
    return LLM(model=str(model_dir), speculative_config=spec, enforce_eager=eager,
               dtype=dtype, max_model_len=max_model_len, kv_cache_memory_bytes=kv_cache_bytes,
               seed=0, per_request_spec_decode_metrics="summary" if spec else "none")


def histogram(completion: Any) -> list[int] | None:
    """Per-request acceptance histogram of one completion (steps that accepted j
    drafts, by j), or None from an engine that did not speculate."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    return None if metrics is None else list(metrics.histogram)


def draft_counts(hist: list[int]) -> tuple[int, int]:
    """(verification steps, accepted draft tokens) of a histogram."""
    return sum(hist), sum(j * c for j, c in enumerate(hist))
