"""Shared policy state: flushing, outages, resynchronisation and live settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from policies.adaptive_settings import AdaptiveSettings
from policies.shared_state import SharedPolicyState
from policies.store.base import (
    AcceptanceSums,
    OutputLengthSums,
    PolicyStore,
    ReplicaLoad,
    StoreState,
    StoreUnavailable,
)
from policies.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FlakyStore(PolicyStore):
    """A real MemoryStore behind a switch that makes every call fail like an outage."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.down = False
        self.slow = False
        self.fail_after_calls: int | None = None

    def _check(self) -> None:
        if self.fail_after_calls is not None:
            if self.fail_after_calls == 0:
                raise StoreUnavailable("connection reset")
            self.fail_after_calls -= 1
        if self.down:
            raise StoreUnavailable("connection refused")
        if self.slow:
            raise StoreUnavailable("timed out", slow=True)

    async def add_acceptance(self, mode: str, workload_class: str, sums: AcceptanceSums,
                             now: float, half_life_s: float) -> None:
        self._check()
        await self.inner.add_acceptance(mode, workload_class, sums, now, half_life_s)

    async def add_output_length(self, workload_class: str, sums: OutputLengthSums,
                                now: float, half_life_s: float) -> None:
        self._check()
        await self.inner.add_output_length(workload_class, sums, now, half_life_s)

    async def put_replica_load(self, load: ReplicaLoad, ttl_s: float) -> None:
        self._check()
        await self.inner.put_replica_load(load, ttl_s)

    async def put_settings(self, settings: Mapping[str, Any]) -> int:
        self._check()
        return await self.inner.put_settings(settings)

    async def settings_version(self) -> int:
        self._check()
        return await self.inner.settings_version()

    async def log_decisions(self, entries: Sequence[Mapping[str, str]]) -> None:
        self._check()
        await self.inner.log_decisions(entries)

    async def recent_decisions(self, count: int) -> list[dict[str, str]]:
        self._check()
        return await self.inner.recent_decisions(count)

    async def read_state(self) -> StoreState:
        self._check()
        return await self.inner.read_state()

    async def claim(self, name: str, ttl_s: float) -> bool:
        self._check()
        return await self.inner.claim(name, ttl_s)

    async def ping(self) -> None:
        self._check()

    async def close(self) -> None:
        pass


def observe(state: SharedPolicyState, mode: str, cls: str, accepted: int, clock: Clock) -> None:
    """Ten decode steps that each drafted four tokens: 1 + 10 + accepted tokens."""
    state.observe(mode, cls, drafts=10, draft_tokens=40, accepted=accepted,
                  completion_tokens=11 + accepted, now=clock())


async def test_local_observations_count_before_and_after_flush() -> None:
    clock = Clock()
    state = SharedPolicyState(MemoryStore(clock=clock), "r1", clock=clock)
    observe(state, "dflash", "math", 30, clock)
    learned = state.acceptance_for("math", clock())["dflash"]
    assert learned.mean_accepted_length == pytest.approx(4.0)
    assert learned.acceptance_rate == pytest.approx(0.75)
    assert await state.sync_once()
    assert state.acceptance_for("math", clock())["dflash"].requests == pytest.approx(1.0)
    assert state.expected_output("math", clock()) == pytest.approx(41)
    assert state.acceptance_for("chat", clock()) == {}


async def test_two_replicas_share_acceptance_and_decay_follows_drift() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    a = SharedPolicyState(store, "a", clock=clock)
    b = SharedPolicyState(store, "b", clock=clock)
    observe(a, "eagle3", "chat", 40, clock)          # accepts everything
    await a.sync_once()
    await b.sync_once()
    assert b.acceptance_for("chat", clock())["eagle3"].acceptance_rate == pytest.approx(1.0)
    clock.now += 3000                                  # ten half-lives later...
    observe(b, "eagle3", "chat", 0, clock)            # ...it accepts nothing
    await b.sync_once()
    await a.sync_once()
    rate = a.acceptance_for("chat", clock())["eagle3"].acceptance_rate
    assert rate is not None and rate < 0.01


async def test_outage_keeps_learning_locally_then_resyncs_without_double_counting() -> None:
    clock = Clock()
    flaky = FlakyStore(MemoryStore(clock=clock))
    state = SharedPolicyState(flaky, "r1", clock=clock)
    observe(state, "ngram", "copy", 20, clock)
    await state.sync_once()
    flaky.down = True
    observe(state, "ngram", "copy", 20, clock)
    assert not await state.sync_once()
    assert state.store_up is False and state.outages == 1
    assert state.acceptance_for("copy", clock())["ngram"].requests == pytest.approx(2.0)
    observe(state, "ngram", "copy", 20, clock)
    assert not await state.sync_once()
    assert state.outages == 1                          # one outage, not one per retry
    flaky.down = False
    assert await state.sync_once()
    assert state.store_up is True
    stored = (await flaky.inner.read_state()).acceptance[("ngram", "copy")]
    assert stored.requests == pytest.approx(3.0)
    assert state.acceptance_for("copy", clock())["ngram"].requests == pytest.approx(3.0)


async def test_failure_midway_through_a_flush_sends_nothing_twice() -> None:
    clock = Clock()
    flaky = FlakyStore(MemoryStore(clock=clock))
    state = SharedPolicyState(flaky, "r1", clock=clock)
    for mode in ("ngram", "eagle3", "dflash"):
        observe(state, mode, "c", 20, clock)
    flaky.fail_after_calls = 2                         # two adds land, then the link drops
    assert not await state.sync_once()
    flaky.fail_after_calls = None
    assert await state.sync_once()
    stored = (await flaky.inner.read_state()).acceptance
    assert {mode: s.requests for (mode, _), s in stored.items()} == \
        {"ngram": 1.0, "eagle3": 1.0, "dflash": 1.0}


async def test_settings_propagate_between_replicas() -> None:
    store = MemoryStore()
    a = SharedPolicyState(store, "a")
    b = SharedPolicyState(store, "b")
    seen: list[AdaptiveSettings] = []
    b.on_settings_change(seen.append)
    version = await a.update_settings(AdaptiveSettings(hysteresis=0.5))
    await b.sync_once()
    assert b.settings.hysteresis == 0.5 and b.settings_version == version
    assert [s.hysteresis for s in seen] == [0.5]


class Entry:
    rendered = 0

    def as_strings(self) -> dict[str, str]:
        Entry.rendered += 1
        return {"mode": "standard", "reason": "cost:standard +5%"}


async def test_decisions_are_logged_to_the_store_rendered_off_the_request_path() -> None:
    store = MemoryStore()
    state = SharedPolicyState(store, "r")
    state.log_decision(Entry())
    assert Entry.rendered == 0           # nothing formatted while the request waits
    await state.sync_once()
    assert await store.recent_decisions(5) == [{"mode": "standard",
                                                "reason": "cost:standard +5%"}]


async def test_a_store_that_lost_its_data_is_reseeded_once() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    a = SharedPolicyState(store, "a", clock=clock)
    b = SharedPolicyState(store, "b", clock=clock)
    await a.update_settings(AdaptiveSettings(hysteresis=0.3))
    observe(a, "ngram", "copy", 30, clock)
    await a.sync_once()
    await b.sync_once()
    fresh = MemoryStore(clock=clock)                   # Redis restarted, empty
    a.store = b.store = fresh
    await a.sync_once()
    await b.sync_once()
    state = await fresh.read_state()
    assert state.acceptance[("ngram", "copy")].requests == pytest.approx(1.0)  # not 2.0
    assert state.settings is not None and state.settings["hysteresis"] == 0.3
    assert b.settings.hysteresis == 0.3
    assert b.acceptance_for("copy", clock())["ngram"].requests == pytest.approx(1.0)


async def test_learned_classes_match_the_per_class_reads_in_one_pass() -> None:
    """``DecisionInput.classes``: every class with finished requests (the recent mix),
    plus the ones asked for, with what ``acceptance_for``/``expected_output`` say."""
    clock = Clock()
    state = SharedPolicyState(MemoryStore(clock=clock), "r1", clock=clock)
    observe(state, "dflash", "math", 30, clock)
    assert await state.sync_once()                  # one in the store, one still local
    observe(state, "eagle3", "math", 20, clock)
    observe(state, "standard", "chat", 0, clock)
    observe(state, "standard", "chat", 0, clock)
    classes = state.learned_classes(clock(), {"new"})
    assert set(classes) == {"math", "chat", "new"}
    for cls in ("math", "chat"):
        assert classes[cls].acceptance == state.acceptance_for(cls, clock())
        assert classes[cls].expected_output_tokens == state.expected_output(cls, clock())
    assert set(classes["math"].acceptance) == {"dflash", "eagle3"}
    assert classes["math"].requests == pytest.approx(2.0)
    assert classes["chat"].requests == pytest.approx(2.0)
    assert classes["new"].expected_output_tokens is None and classes["new"].requests == 0.0


async def test_one_slow_reply_is_not_an_outage_but_two_in_a_row_are() -> None:
    """On a loaded machine a reply can come late once; /ready and the outage count
    must not flap on that. A store that stays slow is down, and comes back."""
    clock = Clock()
    flaky = FlakyStore(MemoryStore(clock=clock))
    state = SharedPolicyState(flaky, "r1", clock=clock)
    assert await state.sync_once()
    flaky.slow = True
    assert not await state.sync_once()
    assert state.store_up is True and state.outages == 0
    assert "timed out" in (state.last_error or "")
    flaky.slow = False
    assert await state.sync_once()                     # the count starts again
    flaky.slow = True
    assert not await state.sync_once()
    assert state.store_up is True
    assert not await state.sync_once()
    assert state.store_up is False and state.outages == 1
    flaky.slow = False
    assert await state.sync_once() and state.store_up is True


async def test_one_snapshot_of_learned_state_agrees_with_the_per_class_reads() -> None:
    """A decision reads what is learned once (``learned_classes``); for the request's
    own class that must equal ``acceptance_for`` and ``expected_output``, with data
    in the store, in flight and pending alike."""
    clock = Clock()
    store = MemoryStore(clock=clock)
    state = SharedPolicyState(store, "r1", clock=clock)
    observe(state, "ngram", "copy", 20, clock)
    await state.sync_once()                            # in the store
    clock.now += 60
    observe(state, "ngram", "copy", 5, clock)          # pending
    observe(state, "eagle3", "copy", 9, clock)
    clock.now += 30
    snapshot = state.learned_classes(clock(), {"copy", "never-seen"})["copy"]
    assert dict(snapshot.acceptance) == state.acceptance_for("copy", clock())
    assert snapshot.expected_output_tokens == pytest.approx(state.expected_output("copy",
                                                                                  clock()))
