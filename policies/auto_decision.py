"""One auto decision, assembled the same way wherever it is made.

The gateway's dispatcher and the simulator's router both call ``decide_auto``:
it gathers what the shared state has learned for the request's class and for the
classes in flight (and, from that, what a class with little evidence borrows:
``class_prior.borrowed``) and what this replica's routing memory holds, asks the
policy, and records the outcome in that memory (the class's last winner, each device
group's cost leader, and since when the mode it holds has deferred a switch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from policies.base import (
    Decision,
    DecisionInput,
    DecisionKind,
    ModeLoad,
    Policy,
    group_busy,
)
from policies.class_prior import borrowed, family
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState


def decide_auto(policy: Policy, state: SharedPolicyState, memory: RoutingMemory,
                modes: Mapping[str, ModeLoad], *,
                prompt_tokens: int, max_tokens: int | None, workload_class: str, now: float,
                in_flight: Mapping[str, Mapping[str, int]],
                explore_draw: float, arriving: int = 0, narrowed: bool = False,
                card_tau: Mapping[str, Mapping[str, float]] | None = None,
                moving_groups: frozenset[str] = frozenset()
                ) -> tuple[DecisionInput, Decision]:
    """Ask ``policy`` for a mode; raises ``NoModeAvailable`` as the policy does.

    ``arriving``: ``DecisionInput.arriving``. ``card_tau``: each mode's drafter card,
    held-out acceptance by kind of prompt (``policies/class_prior.py``).
    ``moving_groups``: ``DecisionInput.moving_groups``.

    ``narrowed``: ``modes`` leaves out modes that cannot serve this request, so its
    winner is no winner for its class or device group and is not remembered as one."""
    modes = with_in_flight(modes, in_flight)
    memory_s = policy.batch_memory_s
    also = {workload_class, *(c for by_class in in_flight.values() for c in by_class)}
    classes = state.learned_classes(now, also)  # one snapshot of what is learned
    this = classes[workload_class]
    prior = borrowed(classes, workload_class, card_tau or {}, state.pooled_acceptance(now),
                     policy.card_discount)
    # Measured on the kind here, not carded: a card is its drafter's held-out figure on
    # other prompts and hardware, and a mode priced on it alone is measured once.
    kind = {mode: a.drafts for mode, a in prior.items()
            if not a.transferred and not a.carded} \
        if family(workload_class) is not None else {}
    inputs = DecisionInput(
        modes=modes, prompt_tokens=prompt_tokens, max_tokens=max_tokens, now=now,
        workload_class=workload_class, acceptance=this.acceptance,
        expected_output_tokens=this.expected_output_tokens,
        previous_mode=memory.previous_mode(workload_class), explore_draw=explore_draw,
        in_flight=in_flight, arriving=arriving, last_won=memory.last_won(),
        leading_since=memory.leading_since(),
        deferred_since=memory.deferred_since(),
        recent_batch=memory.recent_batch(now, memory_s),
        recent_arrivals=memory.recent_arrivals(now, policy.mix_memory_s),
        classes=classes,
        mode_acceptance=prior, kind_evidence=kind, moving_groups=moving_groups)
    decision = policy.decide(inputs)
    memory.note_arrival(workload_class, now, policy.mix_memory_s)
    batches = {load.gpu_group: 0 for load in modes.values()}
    batches[modes[decision.mode].gpu_group] += 1          # this request joins it
    for load in modes.values():
        batches[load.gpu_group] += load.batch_size
    for group, batch in batches.items():
        memory.note_batch(group, batch, now, memory_s)
    if narrowed:
        return inputs, decision
    if decision.kind is not DecisionKind.EXPLORE:  # an exploration is not a new incumbent
        memory.remember(workload_class, decision.mode)
    if decision.leader is not None and decision.leader in modes:
        memory.note_leader(modes[decision.leader].gpu_group, decision.leader, now)
    group = modes[decision.mode].gpu_group
    if decision.deferred:
        memory.note_deferred(group, decision.mode, now)
    elif decision.kind is DecisionKind.COST and group_busy(modes, group):
        # Served its leader while busy: no switch waits. A decision on an idle group
        # prices a batch of one, which says nothing of the busy group's switch (in
        # closed-loop waves each wave's first request would end the deferral).
        memory.clear_deferred(group)
    return inputs, decision


def note_departure(policy: Policy, memory: RoutingMemory, group: str, batch: int,
                   now: float) -> None:
    """A request left device group ``group``, which holds ``batch`` from ``now`` on.

    The group's recent batch is a time average of what it held; noted only at
    decisions, a group that drained after its last one would read that decision's
    batch until the next request came, and the first requests of a light phase after
    a burst would be priced at the burst's batch."""
    memory.note_batch(group, batch, now, policy.batch_memory_s)


def with_in_flight(modes: Mapping[str, ModeLoad],
                   in_flight: Mapping[str, Mapping[str, int]]) -> Mapping[str, ModeLoad]:
    """Each engine's batch, never below the requests the caller has open there.

    An engine's stat logger reports its batch once a step has run with it, so a burst
    of requests that arrive within a step all read the batch from before the burst:
    each was priced as if alone on an idle device (the first requests of a wave saw
    every engine at batch 0 and went to a speculative mode, the last saw the others
    and went to plain decoding). The requests in flight, counted where they are sent,
    are never behind."""
    if not in_flight:
        return modes
    out = dict(modes)
    for name, load in modes.items():
        open_here = sum(in_flight.get(name, {}).values())
        if open_here > load.batch_size:
            out[name] = replace(load, batch_size=open_here)
    return out
