"""Prompt lookup replayed on a finished answer: what vLLM's n-gram proposer would have
drafted and had accepted, step for step."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engines.prompt_lookup import LookupParams, replay


def vllm_replay(prompt: list[int], output: list[int],
                params: LookupParams) -> tuple[int, int, int]:
    """The same walk with vLLM's own proposer choosing each draft."""
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as propose,
    )
    context, pos = [*prompt, output[0]], 1
    drafts = draft_tokens = accepted = 0
    while pos < len(output):
        draft = [int(t) for t in propose(np.array(context, dtype=np.int32), params.min_n,
                                         params.max_n, 1 << 20, params.k)]
        hit = 0
        for token, actual in zip(draft, output[pos:], strict=False):
            if token != actual:
                break
            hit += 1
        if draft:
            drafts, draft_tokens, accepted = drafts + 1, draft_tokens + len(draft), \
                accepted + hit
        step = output[pos:pos + hit + 1]
        context += step
        pos += len(step)
    return drafts, draft_tokens, accepted


def test_the_replay_drafts_what_vllms_proposer_drafts() -> None:
    rng = random.Random(7)
    for _ in range(200):
        vocab = rng.choice([3, 6, 40])          # small vocabularies repeat n-grams often
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(1, 50))]
        output = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
        low = rng.choice([1, 2, 3])
        params = LookupParams(low, low + rng.choice([0, 1, 2]), rng.choice([1, 3, 4]))
        got = replay(prompt, output, params)
        assert (got.num_drafts, got.num_draft_tokens, got.num_accepted_tokens) == \
            vllm_replay(prompt, output, params), (prompt, output, params)


def test_an_answer_that_repeats_its_prompt_is_drafted_whole_and_free_text_is_not() -> None:
    params = LookupParams(2, 4, 4)
    passage = list(range(100, 160))
    copied = replay([1, 2, *passage, 3], passage, params)
    assert copied.mean_accepted_length > 4.0          # nearly k + 1 tokens a step
    fresh = replay([1, 2, *passage, 3], list(range(500, 560)), params)
    assert fresh.num_accepted_tokens == 0


@pytest.mark.parametrize(("config", "expected"), [
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
      "prompt_lookup_min": 2}, LookupParams(2, 4, 4)),
    ({"method": "ngram", "num_speculative_tokens": 3}, LookupParams(5, 5, 3)),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
     LookupParams(3, 3, 3)),
    ({"method": "eagle3", "num_speculative_tokens": 3}, None),
])
def test_the_bounds_are_read_as_vllm_reads_them(config: dict[str, object],
                                                expected: LookupParams | None) -> None:
    assert LookupParams.from_config(config) == expected
