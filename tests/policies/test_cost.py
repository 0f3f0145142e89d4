"""Pricing an engine that runs vLLM's per-batch K table
(``num_speculative_tokens_per_batch_size``)."""

from __future__ import annotations

import pytest

from policies.adaptive_settings import AdaptiveSettings
from policies.base import ClassLearned, LearnedAcceptance, ModeLoad, pooled_acceptance
from policies.cost import estimate, step_time, tokens_per_step

SETTINGS = AdaptiveSettings()
# K = 3 alone, 2 from batch 4, none from batch 16 on (a gap 8-15 keeps K = 2).
TABLE = ((1, 3, 3), (4, 7, 2), (16, 256, 0))
LEARNED = LearnedAcceptance(mean_accepted_length=3.2, acceptance_rate=0.7, requests=100,
                            drafts=5000)


def eagle3(batch: int = 0, table: tuple[tuple[int, int, int], ...] = TABLE) -> ModeLoad:
    return ModeLoad(mode="eagle3", up=True, batch_size=batch, speculative=True,
                    method="eagle3", num_speculative_tokens=3, k_schedule=table)


def test_the_table_is_read_as_vllm_reads_it() -> None:
    load = eagle3()
    assert [load.draft_length(b) for b in (1, 3, 4, 7, 8, 15, 16, 300)] == \
        [3, 3, 2, 2, 2, 2, 0, 0]
    # Never above the engine's num_speculative_tokens; no table: the fixed K.
    assert eagle3(table=((1, 256, 9),)).draft_length(5) == 3
    assert eagle3(table=()).draft_length(100) == 3
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False)
    assert plain.draft_length(1) == 0


def test_at_k0_an_engine_with_a_table_yields_one_token_a_step() -> None:
    load = eagle3()
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=1) > 3.0
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=5) <= 3.0      # at most 1 + K
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=16) == 1.0
    # What was learned at a longer K is capped by the K the table gives.
    assert tokens_per_step(eagle3(table=((1, 256, 1),)), LEARNED, SETTINGS, batch=1) == 2.0


def test_the_prior_step_verifies_the_tables_k() -> None:
    """Past the knee a step's cost grows with the tokens it verifies: at K = 0 the
    table's engine is priced like plain decoding's step, at K = 3 like a K = 3 step."""
    fixed = eagle3(table=())
    table = eagle3()
    assert step_time(table, 200, SETTINGS, 1.0) < step_time(fixed, 200, SETTINGS, 1.0)
    assert step_time(table, 2, SETTINGS, 1.0) == step_time(fixed, 2, SETTINGS, 1.0)


def test_a_request_is_priced_at_the_k_of_the_batch_it_joins() -> None:
    modes = {"eagle3": eagle3(batch=15)}
    joined = estimate(modes["eagle3"], modes, 100, 200, LEARNED, SETTINGS, 1.0)
    assert joined.tokens_per_step == 1.0          # it makes the batch 16: K = 0
    small = {"eagle3": eagle3(batch=0)}
    alone = estimate(small["eagle3"], small, 100, 200, LEARNED, SETTINGS, 1.0)
    assert alone.tokens_per_step > 3.0


def test_a_class_seldom_served_reads_near_the_modes_level_on_every_class() -> None:
    """Thin (or faded) evidence on a class blends with the prior. Once the mode has
    been measured on other classes, the discounted published prior gives way to that
    measured level: up for a drafter that accepts more, down for a weak one. Exploring
    keeps the full published prior (it is how a guess gets measured at all)."""
    load = eagle3(table=())
    thin = LearnedAcceptance(3.4, 0.6, requests=1, drafts=20)
    strong = LearnedAcceptance(3.6, 0.65, requests=200, drafts=8000)
    weak = LearnedAcceptance(1.5, 0.15, requests=200, drafts=8000)
    alone = tokens_per_step(load, thin, SETTINGS, batch=1)
    assert tokens_per_step(load, thin, SETTINGS, batch=1, pooled=strong) > alone + 0.3
    assert tokens_per_step(load, None, SETTINGS, batch=1, pooled=weak) < \
        tokens_per_step(load, None, SETTINGS, batch=1) - 0.2
    assert tokens_per_step(load, None, SETTINGS, optimistic=True, batch=1, pooled=weak) == \
        tokens_per_step(load, None, SETTINGS, optimistic=True, batch=1)


def test_a_modes_level_weights_each_class_by_its_evidence() -> None:
    classes = {
        "math": ClassLearned({"eagle3": LearnedAcceptance(4.0, 0.75, 10, 300)}),
        "chat": ClassLearned({"eagle3": LearnedAcceptance(2.0, 0.25, 10, 100),
                              "dflash": LearnedAcceptance(2.5, 0.4, 1, 40)}),
        "code": ClassLearned(),
    }
    pooled = pooled_acceptance(classes)
    assert pooled["eagle3"].mean_accepted_length == pytest.approx(3.5)
    assert pooled["eagle3"].acceptance_rate == pytest.approx(0.625)
    assert (pooled["eagle3"].drafts, pooled["eagle3"].requests) == (400, 20)
    assert pooled["dflash"].mean_accepted_length == 2.5
    assert set(pooled) == {"eagle3", "dflash"}
