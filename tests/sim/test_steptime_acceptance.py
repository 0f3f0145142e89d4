"""Step-time shape and accepted-length sampling."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from sim.acceptance import AcceptanceSampler, alpha_for, engine_tau, mean_accepted_length
from sim.params import (
    DFLASH_10,
    DFLASH_CHAIN,
    EAGLE3_10,
    EAGLE3_60,
    EAGLE3_CHAIN,
    EAGLE3_K3,
    PLAIN,
    KTableCosts,
    SimParams,
)
from sim.steptime import StepShape, StepTimeModel

MODEL = StepTimeModel(SimParams())


def test_wide_verification_turns_compute_bound_at_high_batch() -> None:
    def ratio(mode_batch: int) -> float:
        return MODEL.step(EAGLE3_60, StepShape(mode_batch)) / \
            MODEL.step(PLAIN, StepShape(mode_batch))
    assert ratio(1) < 3.0 < ratio(32)
    assert ratio(128) > ratio(32)


def test_eagle_drafts_sequentially_dflash_in_one_pass() -> None:
    eagle = MODEL.step(EAGLE3_10, StepShape(1)) - MODEL.step(EAGLE3_10, StepShape(1, 0, 0))
    dflash_passes = MODEL.shape_of(DFLASH_10, DFLASH_10.depth)[1]
    eagle_passes = MODEL.shape_of(EAGLE3_10, EAGLE3_10.depth)[1]
    assert (eagle_passes, dflash_passes) == (7, 1)
    assert eagle > 0


@pytest.mark.parametrize(("tau", "depth"), [(3.49, 7), (4.55, 7), (4.32, 9), (1.95, 9)])
def test_sampler_reproduces_the_mean_accepted_length(tau: float, depth: int) -> None:
    alpha = alpha_for(tau, depth)
    assert mean_accepted_length(alpha, depth) == pytest.approx(tau, rel=1e-6)
    sampler = AcceptanceSampler(alpha, depth)
    rng = random.Random(0)
    draws = [sampler.sample(rng) for _ in range(40_000)]
    assert max(draws) <= depth and min(draws) == 0
    assert statistics.mean(draws) + 1 == pytest.approx(tau, rel=0.02)


def test_shorter_draft_accepts_less() -> None:
    alpha = alpha_for(4.32, 9)
    assert mean_accepted_length(alpha, 3) < mean_accepted_length(alpha, 9)
    assert AcceptanceSampler(alpha, 0).sample(random.Random(1)) == 0


def test_a_k_table_at_k0_costs_more_than_no_speculation() -> None:
    """vLLM issue 49548: a K table at K = 0 runs about +7% TPOT at concurrency 2 and
    +22% at 189 against an engine with no speculation; it is not a free plain engine."""
    def overhead(batch: int) -> float:
        return MODEL.step(EAGLE3_CHAIN, StepShape(batch, 0, 0)) / \
            MODEL.step(PLAIN, StepShape(batch)) - 1
    assert overhead(2) == pytest.approx(0.07)
    assert overhead(189) == pytest.approx(0.22)
    assert 0.07 < overhead(32) < 0.22
    assert overhead(512) == pytest.approx(0.22)


def test_a_k_table_pays_piecewise_graphs_on_speculative_steps() -> None:
    plain_1 = MODEL.step(PLAIN, StepShape(1))
    chain = MODEL.step(EAGLE3_CHAIN, StepShape(1, 0, 3))
    generous = StepTimeModel(replace(SimParams(), k_table=KTableCosts(piecewise_graphs=0.0)))
    assert chain - generous.step(EAGLE3_CHAIN, StepShape(1, 0, 3)) == \
        pytest.approx(0.14 * plain_1)
    # Static engines (full graphs) pay nothing of it.
    assert generous.step(EAGLE3_10, StepShape(1)) == MODEL.step(EAGLE3_10, StepShape(1))


def test_a_chain_drafter_accepts_less_than_the_tree_the_published_tau_came_from() -> None:
    params = SimParams()
    tree = 3.49
    assert engine_tau(EAGLE3_CHAIN, tree, params) == pytest.approx(1 + 0.8 * 2.49)
    assert engine_tau(EAGLE3_10, tree, params) == tree         # the tree itself
    assert engine_tau(DFLASH_CHAIN, tree, params) == tree      # DFlash drafts a block, no tree


def test_vllms_static_chain_is_the_k_table_chain_at_k3_without_the_tables_costs() -> None:
    """``eagle3_chain3`` (vLLM's usual EAGLE-3: a chain of 3, no table, full graphs)
    drafts three one-token passes and verifies 4 tokens a sequence, like the chain K
    table at K = 3, but pays neither the piecewise graphs nor anything else of a table;
    its acceptance is the chain's, solved at the tree's depth and cut at K = 3."""
    free = StepTimeModel(replace(SimParams(), k_table=KTableCosts(piecewise_graphs=0.0)))
    assert MODEL.shape_of(EAGLE3_K3, MODEL.draft_length(EAGLE3_K3, None)) == (4, 3, 1)
    for batch in (1, 32, 128):
        assert MODEL.step(EAGLE3_K3, StepShape(batch)) == \
            pytest.approx(free.step(EAGLE3_CHAIN, StepShape(batch, 0, 3)))
        assert MODEL.step(EAGLE3_K3, StepShape(batch)) < \
            MODEL.step(EAGLE3_CHAIN, StepShape(batch, 0, 3))
    tau_chain = engine_tau(EAGLE3_K3, 3.49, SimParams())
    at_k3 = mean_accepted_length(alpha_for(tau_chain, EAGLE3_K3.depth), 3)
    assert 1.0 < at_k3 < tau_chain < 3.49
