"""This replica's routing memory: last winners, latest wins, cost leaders."""

from __future__ import annotations

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
