"""Live engine statistics: the step-time profile the policy extrapolates from."""

from __future__ import annotations

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
