"""Step-time shape and accepted-length sampling."""

from __future__ import annotations

import random
import statistics

import pytest

from sim.acceptance import AcceptanceSampler, alpha_for, mean_accepted_length
from sim.params import DFLASH_10, EAGLE3_10, EAGLE3_60, PLAIN, SimParams
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
