"""What prompt lookup (vLLM's ``ngram`` method) would have accepted on a finished answer.

Prompt lookup drafts from the text alone: at each step it finds the longest n-gram
(``min_n`` to ``max_n`` tokens) that ends the context and occurred earlier in it (the
earliest such occurrence), and proposes the ``k`` tokens that followed it. So what
it accepts on a request is a function of the prompt and the answer, whatever engine
wrote the answer: an answer equals the one prompt lookup's engine would have
verified (greedy decoding is identical across modes; under sampling, a draft token
is kept with the probability the target gives it, the chance that the sampled answer
holds it). Replaying the proposer over every finished answer measures the method on
every request without serving any of them on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engines.events import SpecDecodeSummary


@dataclass(frozen=True, slots=True)
class LookupParams:
    min_n: int
    max_n: int
    k: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LookupParams | None:
        """From a mode's ``speculative_config``, with vLLM's defaults (5 and 5, either
        bound standing for a missing other); None for another method."""
        if config.get("method") != "ngram":
            return None
        low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        low = low if low is not None else high if high is not None else 5
        high = high if high is not None else low
        return cls(int(low), int(high), int(config.get("num_speculative_tokens") or 1))

    def card(self) -> dict[str, float]:
        """Prompt lookup's prior acceptance by kind of prompt, in a drafter card's terms
        (``engines.drafter_card.heldout_tau``): an answer that repeats a passage of its
        prompt is drafted in full once its first n-gram matches, up to ``1 + k`` tokens
        a step (the policy discounts a card's gain until the kind is measured: half of it
        by default). Without it, the first requests of a copy-heavy kind would be priced
        on the level measured on other text, where prompt lookup drafts little, and go
        elsewhere until one had finished."""
        return {"copy": 1.0 + self.k}


def replay(prompt: Sequence[int], output: Sequence[int],
           params: LookupParams) -> SpecDecodeSummary:
    """The drafts, draft tokens and accepted tokens prompt lookup would have had
    generating ``output`` after ``prompt`` (its first token comes from the prefill)."""
    context = list(prompt)
    # For each n: n-gram -> where its earliest occurrence ends (exclusive).
    first_end: list[dict[tuple[int, ...], int]] = [{} for _ in range(params.max_n + 1)]
    indexed = 0

    def index_to(end: int) -> None:
        nonlocal indexed
        for stop in range(max(indexed, 1), end + 1):
            for n in range(params.min_n, min(params.max_n, stop) + 1):
                first_end[n].setdefault(tuple(context[stop - n:stop]), stop)
        indexed = max(indexed, end)

    drafts = draft_tokens = accepted = 0
    if not output:
        return SpecDecodeSummary(0, 0, 0)
    context.append(output[0])
    pos = 1
    while pos < len(output):
        total = len(context)
        index_to(total - 1)            # every n-gram ending before the last token
        draft: list[int] = []
        for n in range(min(params.max_n, total - 1), params.min_n - 1, -1):
            start = first_end[n].get(tuple(context[total - n:]))
            if start is not None:
                draft = context[start:min(start + params.k, total)]
                break
        hit = 0
        for token, actual in zip(draft, output[pos:], strict=False):
            if token != actual:
                break
            hit += 1
        if draft:
            drafts += 1
            draft_tokens += len(draft)
            accepted += hit
        step = output[pos:pos + hit + 1]
        context.extend(step)
        pos += len(step)
    return SpecDecodeSummary(drafts, draft_tokens, accepted)
