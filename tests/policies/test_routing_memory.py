"""This replica's routing memory: last winners, latest wins, cost leaders."""

from __future__ import annotations

import pytest

from policies.routing_memory import RoutingMemory


def test_last_won_orders_the_modes_by_their_latest_auto_win() -> None:
    memory = RoutingMemory()
    assert memory.last_won() == {}
    memory.remember("math", "dflash")
    memory.remember("chat", "standard")
    memory.remember("math", "dflash")
    won = memory.last_won()
    assert max(won, key=won.__getitem__) == "dflash"
    assert won["standard"] < won["dflash"]
    assert memory.previous_mode("chat") == "standard"
    assert memory.describe() == {"previous_winner": {"math": "dflash", "chat": "standard"}}


def test_a_group_leader_keeps_the_time_it_took_the_lead() -> None:
    memory = RoutingMemory()
    assert memory.leading_since() == {}
    memory.note_leader("gpu0", "dflash", 10.0)
    memory.note_leader("gpu0", "dflash", 15.0)
    memory.note_leader("gpu1", "ngram", 12.0)
    assert memory.leading_since() == {"dflash": 10.0, "ngram": 12.0}
    memory.note_leader("gpu0", "standard", 20.0)         # a new leader starts over
    memory.note_leader("gpu0", "dflash", 21.0)
    assert memory.leading_since() == {"dflash": 21.0, "ngram": 12.0}


def test_a_deferred_switch_keeps_its_start_until_the_group_serves_its_leader() -> None:
    """Two leaders trading the lead do not restart the held mode's deferral."""
    memory = RoutingMemory()
    memory.note_deferred("gpu0", "eagle3", now=10.0)     # behind plain decoding
    memory.note_deferred("gpu0", "eagle3", now=12.0)     # behind n-gram now
    memory.note_deferred("gpu1", "dflash", now=11.0)
    assert memory.deferred_since() == {"eagle3": 10.0, "dflash": 11.0}
    memory.clear_deferred("gpu0")                         # the leader served
    assert memory.deferred_since() == {"dflash": 11.0}
    memory.note_deferred("gpu0", "standard", now=16.0)   # held behind in turn
    assert memory.deferred_since() == {"standard": 16.0, "dflash": 11.0}


def test_a_groups_recent_batch_is_a_load_average_of_what_it_held() -> None:
    memory = RoutingMemory()
    assert memory.recent_batch(0.0, 2.0) == {}
    for t in range(20):                             # eight requests for 10 s
        memory.note_batch("gpu0", 8, t * 0.5, 2.0)
    assert memory.recent_batch(10.0, 2.0)["gpu0"] == pytest.approx(8.0, abs=0.1)
    memory.note_batch("gpu0", 0, 10.0, 2.0)         # the wave ended: empty from now on
    assert memory.recent_batch(10.05, 2.0)["gpu0"] > 7.5       # the next wave's first
    assert memory.recent_batch(20.0, 2.0)["gpu0"] < 0.1        # long idle: forgotten
    # memory 0: the batch now, whatever was noted last.
    assert memory.recent_batch(10.05, 0.0)["gpu0"] == 0.0
    memory.note_batch("gpu0", 8, 11.0, 0.0)
    assert memory.recent_batch(11.05, 0.0)["gpu0"] == 0.0


def test_the_recent_mix_is_what_arrived_over_the_last_seconds() -> None:
    """A phase of copy prompts after a long one of chat: within a few memory spans the
    recent mix is copy, whatever minutes of chat came before."""
    memory = RoutingMemory()
    for t in range(60):
        memory.note_arrival("chat", float(t), memory_s=10.0)
    assert memory.recent_arrivals(60.0, 10.0)["chat"] == pytest.approx(10.0, rel=0.1)
    for t in range(60, 80):
        memory.note_arrival("copy", float(t), memory_s=10.0)
    mix = memory.recent_arrivals(80.0, 10.0)
    assert mix["copy"] > 6 * mix["chat"]
    assert memory.recent_arrivals(80.0, 0.0) == {"chat": 0.0, "copy": 0.0}


def test_a_departure_is_noted_at_the_policys_batch_memory() -> None:
    from policies.adaptive import AdaptivePolicy
    from policies.adaptive_settings import AdaptiveSettings
    from policies.auto_decision import note_departure
    memory = RoutingMemory()
    policy = AdaptivePolicy(AdaptiveSettings(batch_memory_s=2.0))
    for t in range(20):
        memory.note_batch("gpu0", 16, t * 0.5, 2.0)
    note_departure(policy, memory, "gpu0", 0, 10.0)      # the burst drained
    assert memory.recent_batch(10.05, 2.0)["gpu0"] > 15.0  # a wave's next request
    assert memory.recent_batch(40.0, 2.0)["gpu0"] < 0.1    # the next phase's first
