"""Turn pieces of vLLM's ``CompletionOutput`` into SpecGate's typed events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engines.events import SpecDecodeSummary, TokenLogprob, TopLogprob


def logprobs_from_vllm(token_ids: Sequence[int],
                       logprobs: Sequence[Mapping[int, Any]] | None,
                       top_k: int) -> tuple[TokenLogprob, ...] | None:
    """One entry per generated token: the chosen token plus the top-k by rank."""
    if logprobs is None:
        return None
    result = []
    for token_id, candidates in zip(token_ids, logprobs, strict=False):
        chosen = candidates.get(token_id)
        # vLLM sends the top k plus the chosen token, whatever its rank.
        ranked = sorted((lp for lp in candidates.values()
                         if lp.rank is not None and lp.rank <= top_k),
                        key=lambda lp: lp.rank)
        top = tuple(_top(lp) for lp in ranked)
        if chosen is None:  # cannot happen with vLLM, which always includes it
            continue
        text = chosen.decoded_token or ""
        result.append(TokenLogprob(token=text, logprob=_finite(chosen.logprob),
                                   token_bytes=tuple(text.encode()), top=top))
    return tuple(result)


def _top(lp: Any) -> TopLogprob:
    text = lp.decoded_token or ""
    return TopLogprob(token=text, logprob=_finite(lp.logprob), token_bytes=tuple(text.encode()))


def _finite(value: float) -> float:
    # JSON has no -inf; OpenAI reports very unlikely tokens as -9999.0.
    return max(float(value), -9999.0)


def spec_summary_from_vllm(metrics: Any) -> SpecDecodeSummary:
    """From vLLM's ``RequestSpecDecodeMetrics`` (a histogram of accepted counts)."""
    histogram: list[int] = list(metrics.histogram)
    return SpecDecodeSummary(
        num_drafts=sum(histogram),
        num_draft_tokens=int(metrics.num_draft_tokens),
        num_accepted_tokens=sum(j * count for j, count in enumerate(histogram)),
    )
