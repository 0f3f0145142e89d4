"""Live engine statistics: the step-time profile the policy extrapolates from."""

from __future__ import annotations

import random

import pytest

from engines.stats import StepTimeProfile, batch_bucket


def test_buckets_are_fine_where_step_time_bends_and_coarse_beyond() -> None:
    assert [batch_bucket(b) for b in (1, 2, 3, 4, 5, 7, 8, 11, 12, 16, 24, 47, 48, 63, 64)] == \
        [1, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32, 48, 48, 64]


def test_a_bucket_reports_the_mean_batch_it_was_measured_at() -> None:
    """Bucket 48 holds 48..63: a time measured at 63 placed at 48 would double the
    slope the policy extrapolates from the last buckets."""
    profile = StepTimeProfile()
    for _ in range(10):
        profile.add(63, 0.030)
    profile.add(32, 0.016)
    (low, low_s, low_n), (high, high_s, high_n) = profile.snapshot()
    assert (low, low_n, high, high_n) == (32, 1, 63, 10)
    assert low_s == pytest.approx(0.016)
    assert high_s == pytest.approx(0.030)


def test_a_bucket_follows_the_machine_as_a_moving_average() -> None:
    profile = StepTimeProfile(alpha=0.5)
    profile.add(4, 0.010)
    profile.add(4, 0.010)
    profile.add(4, 0.030)          # weight max(1/3, 0.5)
    (batch, seconds, samples), = profile.snapshot()
    assert (batch, samples) == (4, 3) and seconds == pytest.approx(0.020)
    profile.add(0, 1.0)            # nothing decoded: ignored
    profile.add(4, -1.0)
    assert profile.snapshot()[0][2] == 3


def test_every_reader_sees_one_load_shape() -> None:
    """/ready (report), /metrics and the replica load (load) show the same fields and
    values; /ready adds the speculative counters of a speculative engine."""
    from engines.stats import LOAD_FIELDS, EngineStats, SpecDecodeCounters

    s = EngineStats("eagle3", up=True, in_flight=3, running=2, waiting=1,
                    kv_cache_usage=0.123456, spec=SpecDecodeCounters(4, 12, 7),
                    recent_acceptance_rate=0.58)
    report, load = s.report(), s.load()
    assert set(load) == set(LOAD_FIELDS) and set(report) == {*LOAD_FIELDS, "spec_decode"}
    assert {k: float(report[k]) for k in LOAD_FIELDS} == pytest.approx(load, abs=1e-4)
    assert report["up"] is True and report["in_flight"] == 3
    assert report["spec_decode"] == {"drafts": 4, "draft_tokens": 12, "accepted_tokens": 7,
                                     "recent_acceptance_rate": 0.58}
    assert "spec_decode" not in EngineStats("standard", up=False).report()


def test_a_profile_measures_what_a_draft_token_costs_among_steps_of_one_batch() -> None:
    """N-gram drafts only where the text repeats: at batch 8 its steps took 10 ms plus
    0.5 ms per draft token verified. The slope is read within one batch size, so the
    batch's own growth (batch 2 is cheaper and drafts less) does not read as drafts'."""
    profile = StepTimeProfile()
    for i in range(40):
        drafts = (i * 7) % 25
        profile.add(8, 0.010 + 0.0005 * drafts, draft_tokens=drafts)
        profile.add(2, 0.004 + 0.0005 * (i % 5), draft_tokens=i % 5)
    assert profile.draft_token_s == pytest.approx(0.0005, rel=0.05)
    # Each bucket is reported at the engine's mean draft tokens per sequence.
    per_seq = profile.drafted
    (b2, s2, _), (b8, s8, _) = profile.snapshot()
    assert (b2, b8) == (2, 8)
    assert s8 == pytest.approx(0.010 + 0.0005 * 8 * per_seq, rel=0.05)
    assert s2 == pytest.approx(0.004 + 0.0005 * 2 * per_seq, rel=0.05)


def test_the_cost_of_a_draft_token_outlasts_free_text_that_drafts_little() -> None:
    """The slope is the hardware's. Fitted over recent steps only, n-gram's would read
    its copy-heavy slope, then 0 after a little free text, where it drafts on few steps
    and the step's noise swamps the little spread there is.
    Free text must add what little it knows and forget nothing; the copy-heavy slope
    stands."""
    rng = random.Random(0)
    profile = StepTimeProfile()
    for _ in range(320):                               # copy-heavy: drafts on most steps
        drafts = rng.choice((0, 4, 6, 8))
        profile.add(2, 0.030 + 0.0004 * drafts + rng.gauss(0, 0.0005), draft_tokens=drafts)
    assert profile.draft_token_s == pytest.approx(0.0004, rel=0.1)
    for _ in range(1280):                              # free text: a draft on 1 step in 20
        drafts = 4 if rng.random() < 0.05 else 0
        profile.add(2, 0.028 + 0.0004 * drafts + rng.gauss(0, 0.003), draft_tokens=drafts)
    assert profile.draft_token_s == pytest.approx(0.0004, rel=0.25)
    for _ in range(1280):                              # free text that never drafts
        profile.add(2, 0.028 + rng.gauss(0, 0.003), draft_tokens=0)
    assert profile.draft_token_s == pytest.approx(0.0004, rel=0.25)


def test_the_cost_of_a_draft_token_follows_a_change_that_is_measured() -> None:
    """Its memory is long, not forever: steps that clearly measure a new cost per
    draft token (another machine's load, a new engine build) take over."""
    profile = StepTimeProfile()
    for i in range(64):
        profile.add(4, 0.020 + 0.0004 * (i % 9), draft_tokens=i % 9)
    assert profile.draft_token_s == pytest.approx(0.0004, rel=0.05)
    for i in range(32 * 60):
        profile.add(4, 0.020 + 0.0010 * (i % 9), draft_tokens=i % 9)
    assert profile.draft_token_s == pytest.approx(0.0010, rel=0.05)


def test_a_drafter_that_always_drafts_k_keeps_its_profile_as_timed() -> None:
    """EAGLE-3 verifies K tokens per sequence every step: no spread, no slope."""
    profile = StepTimeProfile()
    for i in range(20):
        profile.add(4, 0.020 + 0.001 * (i % 3), draft_tokens=12)
    assert profile.draft_token_s == 0.0
    (_, seconds, _), = profile.snapshot()
    assert seconds == pytest.approx(profile.seconds_at(4))
