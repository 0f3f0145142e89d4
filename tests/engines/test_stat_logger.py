"""The per-engine stat logger's step timing."""

from __future__ import annotations

import pytest

from engines.stat_logger import LiveCounters


def test_a_decode_step_is_timed_from_the_previous_busy_step() -> None:
    c = LiveCounters()
    c.observe_step(0, prefills=1, decodes=0, at=10.0)     # prefill: not a decode sample
    c.observe_step(1, prefills=0, decodes=1, at=10.050)   # 50 ms after a busy step
    c.observe_step(2, prefills=0, decodes=1, at=10.100)
    (batch, seconds, samples), = c.steps.snapshot()
    assert (batch, samples) == (1, 2) and seconds == pytest.approx(0.050)


def test_gaps_and_prefills_are_not_counted_as_steps() -> None:
    c = LiveCounters()
    c.observe_step(5, prefills=0, decodes=2, at=1.0)      # first seen: no interval yet
    c.observe_step(7, prefills=0, decodes=2, at=1.2)      # a step went unreported
    c.observe_step(8, prefills=1, decodes=2, at=1.3)      # a prefill rides along
    assert c.steps.snapshot() == ()
    c.observe_step(9, prefills=0, decodes=2, at=1.34)
    assert [(b, n) for b, _, n in c.steps.snapshot()] == [(2, 1)]


def test_bunched_arrivals_keep_the_mean_step() -> None:
    """Outputs stamped as they arrive: two steps read at once give one long and one
    near-zero interval; the mean is still the engine's step."""
    c = LiveCounters()
    c.observe_step(0, prefills=0, decodes=4, at=0.0)
    for i, at in enumerate((0.02, 0.08, 0.0801, 0.10, 0.12), start=1):
        c.observe_step(i, prefills=0, decodes=4, at=at)
    (_, seconds, samples), = c.steps.snapshot()
    assert samples == 5 and seconds == pytest.approx(0.024)


def test_the_live_window_counts_steps_that_drafted_nothing() -> None:
    c = LiveCounters(speculative=True)
    c.observe_spec_step(2, 8, 8, [2, 2, 2, 2], sequences=8)   # 2 of 8 sequences drafted
    c.observe_spec_step(0, 0, 0, [], sequences=8)             # none did
    import time
    rate, length = c.window.snapshot(time.monotonic())
    assert rate == pytest.approx(1.0)
    assert length == pytest.approx(1 + 8 / 16)
    assert (c.num_drafts, c.num_accepted_tokens) == (2, 8)    # vLLM's own counters kept


def test_a_prefill_is_timed_beyond_the_decode_step_it_rides_along() -> None:
    """A step that prefills costs the decode step at its batch plus the prefills: what
    it takes beyond that, per request prefilled, is the engine's prefill cost."""
    c = LiveCounters()
    at, index = 0.0, 0
    c.observe_step(index, prefills=0, decodes=2, at=at)
    for prefills in (1, 2, 1):
        for _ in range(3):                       # decode steps at batch 2: 50 ms
            index, at = index + 1, at + 0.050
            c.observe_step(index, prefills=0, decodes=2, at=at)
        index, at = index + 1, at + 0.050 + 0.030 * prefills
        c.observe_step(index, prefills=prefills, decodes=2, at=at)
    assert c.prefill.seconds == pytest.approx(0.030)


def test_a_prefill_is_not_timed_without_a_decode_step_to_compare() -> None:
    c = LiveCounters()
    c.observe_step(0, prefills=0, decodes=3, at=0.0)
    c.observe_step(1, prefills=1, decodes=3, at=0.2)   # batch 3 unmeasured
    c.observe_step(3, prefills=1, decodes=3, at=0.5)   # a step unreported
    # No request ran on from the last step: the engine may have been idle meanwhile.
    c.observe_step(4, prefills=1, decodes=0, at=9.6)
    c.observe_step(5, prefills=1, decodes=0, at=9.7)
    assert c.prefill.seconds is None


def test_a_step_taken_while_a_peer_of_the_device_holds_requests_is_not_timed() -> None:
    """Engines of one device group take turns: an interval with a peer busy at either
    end holds the peer's steps too, and the cost model adds those itself."""
    peer = {"busy": False}
    c = LiveCounters(peers_busy=lambda: peer["busy"])
    c.observe_step(0, prefills=0, decodes=2, at=0.0)
    c.observe_step(1, prefills=0, decodes=2, at=0.05)       # alone: timed
    peer["busy"] = True
    c.observe_step(2, prefills=0, decodes=2, at=0.15)       # the peer stepped between
    c.observe_step(3, prefills=0, decodes=2, at=0.25)
    peer["busy"] = False
    c.observe_step(4, prefills=0, decodes=2, at=0.35)       # busy at the interval's start
    (batch, seconds, samples), = c.steps.snapshot()
    assert (batch, samples) == (2, 1) and seconds == pytest.approx(0.05)
    c.observe_step(5, prefills=0, decodes=2, at=0.40)       # alone again at both ends
    (_, seconds, samples), = c.steps.snapshot()
    assert samples == 2 and seconds == pytest.approx(0.05)


def test_engines_sharing_a_device_see_each_others_requests() -> None:
    from engines.engine_spec import EngineSpec
    from engines.vllm_engine import VllmEngine, share_device

    a, b, alone = (VllmEngine(EngineSpec(mode=m, model="unused")) for m in ("a", "b", "c"))
    share_device([a, b])
    share_device([alone])
    assert a.peers_busy is not None and b.peers_busy is not None
    assert alone.peers_busy is None                # a device of its own: always timed
    assert not a.peers_busy() and not b.peers_busy()
    b._in_flight = 1                               # what generate() counts
    assert a.peers_busy() and not b.peers_busy()


def test_a_speculative_steps_draft_tokens_reach_the_profile() -> None:
    """Each decode step's draft tokens go with its time: n-gram at batch 4 stepping
    20 ms plus 1 ms per draft token reads 1 ms a draft token (once a window of 32 steps is
    fitted)."""
    c = LiveCounters(speculative=True)
    at = 0.0
    c.observe_step(0, prefills=0, decodes=4, at=at, draft_tokens=0)
    for i in range(1, 40):
        drafts = (i * 3) % 13
        at += 0.020 + 0.001 * drafts
        c.observe_step(i, prefills=0, decodes=4, at=at, draft_tokens=drafts)
    assert c.steps.draft_token_s == pytest.approx(0.001, rel=0.02)
