"""What the policy has learned, as requests read it: classes, decode steps, snapshot."""

from __future__ import annotations

import pytest

from policies.learned import Buffers, LearnedStats
from policies.store.base import AcceptanceSums, OutputLengthSums, StoreState


def stats(max_classes: int = 64) -> LearnedStats:
    return LearnedStats(lambda: 300.0, max_classes)


def test_workload_classes_are_bounded() -> None:
    learned = stats(max_classes=3)
    assert [learned.workload_class(c) for c in ("a", "b", "c", "a", None)] == \
        ["a", "b", "default", "a", "default"]


def test_steps_that_drafted_nothing_count_as_plain_steps() -> None:
    """n-gram proposes only where the text matches: 2 drafts, both fully accepted,
    in a 32-token answer is 1.06 tokens a step, not the 5 a step a per-draft count
    says. A speculative request that drafted nothing at all still counts (τ = 1);
    plain decoding learns nothing."""
    learned, now = stats(), 1000.0
    learned.observe("ngram", "free", drafts=2, draft_tokens=8, accepted=8,
                    completion_tokens=32, now=now, speculative=True)
    got = learned.acceptance_for("free", now)["ngram"]
    assert got.mean_accepted_length == pytest.approx(1 + 8 / 23)
    assert got.acceptance_rate == pytest.approx(1.0)
    learned.observe("ngram", "prose", drafts=0, draft_tokens=0, accepted=0,
                    completion_tokens=20, now=now, speculative=True)
    assert learned.acceptance_for("prose", now)["ngram"].mean_accepted_length == 1.0
    learned.observe("standard", "prose", drafts=0, draft_tokens=0, accepted=0,
                    completion_tokens=20, now=now, speculative=False)
    assert "standard" not in learned.acceptance_for("prose", now)


def test_the_snapshot_shows_a_finished_request_at_once() -> None:
    """The snapshot a decision reads is cached, but a request that just finished
    counts in the very next decision (its class is recomputed), not a second later."""
    learned, now = stats(), 1000.0
    learned.observe("eagle3", "chat", drafts=10, draft_tokens=30, accepted=10,
                    completion_tokens=21, now=now)
    first = learned.learned_classes(now)["chat"].acceptance["eagle3"].mean_accepted_length
    learned.observe("eagle3", "chat", drafts=10, draft_tokens=30, accepted=30,
                    completion_tokens=41, now=now + 0.1)
    second = learned.learned_classes(now + 0.1)["chat"]
    assert second.acceptance["eagle3"].mean_accepted_length > first
    assert second.acceptance == learned.acceptance_for("chat", now + 0.1)
    assert second.expected_output_tokens == pytest.approx(31.0, rel=1e-3)


def test_sent_data_counts_once_until_the_store_is_read_again() -> None:
    """What the store acknowledged is counted from the local copy of its state, not
    from the buffers as well; what was observed while sending stays pending."""
    learned, now = stats(), 1000.0
    learned.observe("ngram", "copy", drafts=5, draft_tokens=20, accepted=15,
                    completion_tokens=21, now=now)
    unsent = learned.start_sending()
    learned.observe("ngram", "copy", drafts=5, draft_tokens=20, accepted=5,
                    completion_tokens=11, now=now)
    learned.acknowledged(Buffers(dict(unsent.acceptance), dict(unsent.output_length)), now)
    assert not learned.inflight
    assert learned.learned_classes(now)["copy"].requests == pytest.approx(2.0)
    learned.read(StoreState({("ngram", "copy"): AcceptanceSums(5, 20, 15, 1.0, now)},
                            {"copy": OutputLengthSums(21, 1.0, now)}, {}, None, 1))
    assert learned.learned_classes(now)["copy"].requests == pytest.approx(2.0)


def test_each_modes_level_follows_the_snapshot() -> None:
    """``pooled_acceptance`` is kept with the snapshot: what every class of it gives,
    again after a request finishes and after the store is read."""
    from policies.base import pooled_acceptance

    learned, now = stats(), 1000.0
    learned.observe("eagle3", "chat", drafts=10, draft_tokens=30, accepted=10,
                    completion_tokens=21, now=now)
    learned.observe("eagle3", "code", drafts=30, draft_tokens=90, accepted=60,
                    completion_tokens=91, now=now)
    first = learned.pooled_acceptance(now)
    assert first == pooled_acceptance(learned.learned_classes(now, also=["new"]))
    learned.observe("eagle3", "chat", drafts=10, draft_tokens=30, accepted=30,
                    completion_tokens=41, now=now + 0.1)
    second = learned.pooled_acceptance(now + 0.1)
    assert second == pooled_acceptance(learned.learned_classes(now + 0.1))
    assert second["eagle3"].mean_accepted_length > first["eagle3"].mean_accepted_length
    learned.read(StoreState({}, {}, {}, None, 1))
    assert learned.pooled_acceptance(now + 0.2) == \
        pooled_acceptance(learned.learned_classes(now + 0.2))
