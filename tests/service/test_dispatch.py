"""The dispatcher: routing hints checked once, one routing call, the policy's view of the
requests in flight, forced modes that skip the policy, and the decision audit."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from engines.prompt_lookup import LookupParams
from engines.request import GenerationRequest, SamplingOptions
from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import Decision, DecisionInput, DecisionKind
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from service.arrivals import Arrivals
from service.dispatch import Dispatcher
from service.errors import InvalidRequest
from service.mode_info import ModeInfo
from service.route_hints import RouteHints
from service.stream import OpenStream
from tests.conftest import FAKE_MODE_INFO, fake_engines


async def started_dispatcher(policy: AdaptivePolicy | None = None,
                             token_delay_s: float = 0.0) -> Dispatcher:
    engines = fake_engines(token_delay_s=token_delay_s)
    for engine in engines.values():
        await engine.start()
    return Dispatcher(engines, policy or RecordingPolicy(), SharedPolicyState(MemoryStore(), "r"),
                      FAKE_MODE_INFO)


async def test_hints_are_checked_once_with_an_actionable_message() -> None:
    dispatcher = await started_dispatcher()
    assert dispatcher.hints(" DFlash ", None, None) == RouteHints("dflash", None)
    assert dispatcher.hints("auto", None, "chat") == RouteHints(None, "chat")
    assert dispatcher.hints("", "code", "chat") == RouteHints(None, "code")  # header wins
    with pytest.raises(InvalidRequest) as e:
        dispatcher.hints("medusa", None, None)
    assert e.value.param == "x-spec-mode" and e.value.code == "invalid_spec_mode"
    assert "valid values: auto, dflash, eagle3, ngram, standard" in e.value.message
    with pytest.raises(InvalidRequest) as e:
        dispatcher.hints(None, None, "no spaces")
    assert e.value.param == "metadata.workload_class"


async def test_route_decides_admits_and_opens_in_one_call() -> None:
    policy = RecordingPolicy()
    dispatcher = await started_dispatcher(policy, token_delay_s=0.02)  # stays open a while
    request = GenerationRequest("r-1", (1, 2, 3), SamplingOptions(max_tokens=5))
    stream = await dispatcher.route(RouteHints(None, "code"), request, requested_max_tokens=5)
    assert len(policy.seen) == 1 and policy.seen[0].prompt_tokens == 3
    assert stream.first is not None                 # the first event came before returning
    assert dispatcher.in_flight() == {stream.routing.decision.mode: {"code": 1}}
    await stream.aclose()
    assert dispatcher.in_flight() == {}


class RecordingPolicy(AdaptivePolicy):
    def __init__(self) -> None:
        super().__init__(AdaptiveSettings(exploration_share=0.0))
        self.seen: list[DecisionInput] = []

    def decide(self, inputs: DecisionInput) -> Decision:
        self.seen.append(inputs)
        return super().decide(inputs)


async def test_the_policy_sees_the_requests_in_flight_by_mode_and_class() -> None:
    """The policy prices each mode on the mix its device serves: the dispatcher counts
    its open engine requests per (mode, class), forced ones too, until each one ends."""
    engines = fake_engines(token_delay_s=0.02)      # streams stay open a while
    for engine in engines.values():
        await engine.start()
    policy = RecordingPolicy()
    state = SharedPolicyState(MemoryStore(), "r")
    dispatcher = Dispatcher(engines, policy, state, FAKE_MODE_INFO)
    request = GenerationRequest("a", (1, 2, 3), SamplingOptions(max_tokens=5))
    code = await dispatcher.open(dispatcher.decide("dflash", 3, 5, "code"), request)
    assert dispatcher.in_flight() == {"dflash": {"code": 1}}
    chat = await dispatcher.open(dispatcher.decide(None, 3, 5, "chat"),
                                 replace(request, request_id="b"))
    seen = policy.seen[-1]
    assert seen.in_flight == {"dflash": {"code": 1}}
    assert {"code", "chat"} <= set(seen.classes)
    assert seen.last_won == {}                       # no auto decision before this one
    assert dispatcher.memory.last_won().keys() == {chat.routing.decision.mode}
    async for _ in code.events():                    # finished: no longer in flight
        pass
    assert dispatcher.in_flight() == {chat.routing.decision.mode: {"chat": 1}}
    await chat.aclose()                              # left early: aborted, not in flight
    assert dispatcher.in_flight() == {}


async def test_a_group_that_drained_is_priced_at_what_it_holds_not_at_its_last_burst() -> None:
    """Eight requests open at once, then all end: a request arriving long after sees
    the group's recent batch near zero, not the eight of its last decision."""
    now = [1000.0]
    engines = fake_engines(token_delay_s=0.02)      # streams stay open a while
    for engine in engines.values():
        await engine.start()
    policy = RecordingPolicy()
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"),
                            FAKE_MODE_INFO, clock=lambda: now[0])
    streams = []
    for i in range(8):
        request = GenerationRequest(f"r{i}", (1, 2, 3), SamplingOptions(max_tokens=50))
        streams.append(await dispatcher.open(dispatcher.decide("standard", 3, 3, "chat"),
                                             request))
    dispatcher.decide(None, 3, 3, "chat")           # an auto decision sees the burst
    assert policy.seen[-1].modes["standard"].batch_size == 8
    now[0] += 0.5
    for stream in streams:
        await stream.aclose()
    now[0] += 30.0
    dispatcher.decide(None, 3, 3, "chat")
    group = FAKE_MODE_INFO["standard"].gpu_group
    assert policy.seen[-1].recent_batch[group] < 0.5


async def test_every_request_of_a_burst_is_priced_with_the_rest_of_the_burst() -> None:
    """Four clients send at once: each request waits for the burst to settle and is
    priced with the requests still waiting for their decision, so the first is not
    priced as if alone (and then moved when a later one switches the group). A request
    that comes alone afterwards waits one window and sees nobody arriving."""
    policy = RecordingPolicy()
    dispatcher = await started_dispatcher(policy, token_delay_s=0.02)
    dispatcher.arrivals = Arrivals(window_s=0.01)

    async def send(i: int) -> OpenStream:
        arrival = dispatcher.arrivals.enter()
        try:
            await asyncio.sleep(0)             # the others enter while this one tokenises
            request = GenerationRequest(f"r{i}", (1, 2, 3), SamplingOptions(max_tokens=5))
            return await dispatcher.route(RouteHints(None, "chat"), request,
                                          requested_max_tokens=5, arrival=arrival)
        finally:
            arrival.leave()

    streams = await asyncio.gather(*(send(i) for i in range(4)))
    assert [seen.arriving for seen in policy.seen] == [3, 2, 1, 0]
    alone = await send(4)
    assert policy.seen[-1].arriving == 0 and dispatcher.arrivals.waiting == 0
    for stream in [*streams, alone]:
        await stream.aclose()


async def test_a_forced_request_does_not_wait_for_a_burst_but_counts_in_one() -> None:
    policy = RecordingPolicy()
    dispatcher = await started_dispatcher(policy)
    dispatcher.arrivals = Arrivals(window_s=5.0)      # an auto request would wait 5 s
    behind = dispatcher.arrivals.enter()
    arrival = dispatcher.arrivals.enter()
    request = GenerationRequest("f", (1, 2, 3), SamplingOptions(max_tokens=5))
    started = time.monotonic()
    stream = await asyncio.wait_for(dispatcher.route(
        RouteHints("standard", None), request, requested_max_tokens=5, arrival=arrival), 2.0)
    assert time.monotonic() - started < 1.0
    assert dispatcher.arrivals.waiting == 1           # decided: only ``behind`` waits
    behind.leave()
    behind.leave()                                    # a second leave changes nothing
    assert dispatcher.arrivals.waiting == 0
    await stream.aclose()


async def test_a_forced_mode_never_consults_the_policy_and_is_audited_as_forced() -> None:
    """``x-spec-mode`` is the caller's decision: no policy runs, no routing memory moves."""
    engines = fake_engines()
    for engine in engines.values():
        await engine.start()
    policy = RecordingPolicy()
    store = MemoryStore()
    state = SharedPolicyState(store, "r")
    dispatcher = Dispatcher(engines, policy, state, FAKE_MODE_INFO)
    routing = dispatcher.decide("ngram", 3, 5, "code", request_id="req-1")
    assert policy.seen == []
    assert (routing.decision.mode, routing.decision.kind, routing.forced) == \
        ("ngram", DecisionKind.OVERRIDE, True)
    assert routing.decision.reason == "override" and routing.decision.leader is None
    memory = dispatcher.memory
    assert memory.previous_mode("code") is None and memory.last_won() == {}
    auto = dispatcher.decide(None, 3, 100, "code", request_id="req-2")
    assert len(policy.seen) == 1 and auto.decision.kind in (DecisionKind.COST,
                                                            DecisionKind.HOLD)
    assert memory.previous_mode("code") == auto.decision.mode
    await state.sync_once()
    audit = await store.recent_decisions(10)
    assert [(e["request_id"], e["kind"], e["forced"]) for e in audit] == \
        [("req-1", "override", "1"), ("req-2", auto.decision.kind.value, "0")]


async def test_the_policy_sees_each_engines_k_table() -> None:
    """A mode configured with vLLM's per-batch K table is priced at the K its table
    gives: the dispatcher hands the table to the policy with the engine's load."""
    engines = fake_engines()
    for engine in engines.values():
        await engine.start()
    policy = RecordingPolicy()
    table = ((1, 4, 3), (5, 256, 0))
    info = {**FAKE_MODE_INFO, "eagle3": ModeInfo("eagle3", 3, k_schedule=table)}
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"), info)
    dispatcher.decide(None, 3, 5, None)
    seen = policy.seen[-1].modes
    assert seen["eagle3"].k_schedule == table
    assert seen["eagle3"].draft_length(8) == 0
    assert seen["dflash"].k_schedule == () and seen["dflash"].draft_length(8) == 4


async def test_a_forced_mode_that_cannot_serve_a_field_is_a_400_naming_it_and_who_can() -> None:
    dispatcher = await started_dispatcher()
    request = GenerationRequest("r-1", (1, 2, 3),
                                SamplingOptions(max_tokens=5, temperature=0.5, min_p=0.1))
    with pytest.raises(InvalidRequest) as e:
        await dispatcher.route(RouteHints("eagle3", None), request, requested_max_tokens=5)
    assert e.value.param == "min_p" and e.value.code == "unsupported_parameter"
    assert "x-spec-mode 'eagle3' cannot serve 'min_p'" in e.value.message
    assert "modes that can: auto, standard" in e.value.message
    stream = await dispatcher.route(RouteHints("standard", None), request,
                                    requested_max_tokens=5)
    assert stream.mode == "standard"
    await stream.aclose()


async def test_auto_only_weighs_modes_that_can_serve_and_says_so() -> None:
    dispatcher = await started_dispatcher()
    for i in range(20):
        request = GenerationRequest(f"r-{i}", (1, 2, 3), SamplingOptions(
            max_tokens=5, temperature=0.5, logit_bias=((7, 1.0),)))
        stream = await dispatcher.route(RouteHints(None, None), request, requested_max_tokens=5)
        assert stream.mode == "standard"
        assert stream.routing.decision.reason.endswith(" needs:logit_bias")
        await stream.aclose()
    plain = GenerationRequest("p", (1, 2, 3), SamplingOptions(max_tokens=5, temperature=0.0))
    stream = await dispatcher.route(RouteHints(None, None), plain, requested_max_tokens=5)
    assert "needs:" not in stream.routing.decision.reason
    await stream.aclose()


async def test_a_request_that_killed_an_engine_is_kept_off_it_while_others_still_go() -> None:
    engines = fake_engines()
    for engine in engines.values():
        await engine.start()
    engines["dflash"].killed_by = frozenset({"top_k"})
    dispatcher = Dispatcher(engines, RecordingPolicy(), SharedPolicyState(MemoryStore(), "r"),
                            FAKE_MODE_INFO)
    killer = GenerationRequest("k", (1, 2, 3),
                               SamplingOptions(max_tokens=5, temperature=0.8, top_k=5))
    stream = await dispatcher.route(RouteHints("dflash", None), killer, requested_max_tokens=5)
    # It failed over to plain decoding, which serves every field (service/failover.py).
    assert stream.mode == "standard" and stream.failovers == 1 and not engines["dflash"].is_up
    await stream.aclose()
    await engines["dflash"].start()                   # the supervisor brought it back
    with pytest.raises(InvalidRequest) as e:          # forced there again: refused
        await dispatcher.route(RouteHints("dflash", None), replace(killer, request_id="k2"),
                               requested_max_tokens=5)
    assert e.value.param == "top_k" and "stopped this engine" in e.value.message
    for i in range(10):                               # auto never sends it there
        stream = await dispatcher.route(RouteHints(None, None),
                                        replace(killer, request_id=f"a{i}"),
                                        requested_max_tokens=5)
        assert stream.mode != "dflash"
        await stream.aclose()
    plain = GenerationRequest("p", (1, 2, 3), SamplingOptions(max_tokens=5, temperature=0.0))
    stream = await dispatcher.route(RouteHints("dflash", None), plain, requested_max_tokens=5)
    assert stream.mode == "dflash" and engines["dflash"].is_up
    await stream.aclose()


class FixedPolicy(AdaptivePolicy):
    """Always answers with the decision it was given."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(AdaptiveSettings(exploration_share=0.0))
        self.decision = decision

    def decide(self, inputs: DecisionInput) -> Decision:
        return self.decision


async def test_an_exclusive_group_runs_one_engine_until_a_cost_decision_switches_it() -> None:
    engines = fake_engines(token_delay_s=0.05)
    for engine in engines.values():
        await engine.start()
    info = {name: replace(i, gpu_group="cpu", exclusive=True)
            for name, i in FAKE_MODE_INFO.items()}
    policy = FixedPolicy(Decision("eagle3", DecisionKind.EXPLORE))
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"), info)
    long = GenerationRequest("busy", (1, 2, 3), SamplingOptions(max_tokens=50))
    busy = await dispatcher.route(RouteHints("standard", None), long, requested_max_tokens=50)
    request = GenerationRequest("r", (1, 2, 3), SamplingOptions(max_tokens=5))
    # An exploration (or a hold) elsewhere joins the engine the group runs now.
    stream = await dispatcher.route(RouteHints(None, None), request, requested_max_tokens=5)
    assert stream.mode == "standard" and stream.routing.decision.kind is DecisionKind.HOLD
    await stream.aclose()
    # A cost decision is a switch: it goes where the policy says.
    policy.decision = Decision("eagle3", DecisionKind.COST, margin=0.2)
    stream = await dispatcher.route(RouteHints(None, None), replace(request, request_id="c"),
                                    requested_max_tokens=5)
    assert stream.mode == "eagle3"
    await stream.aclose()
    await busy.aclose()
    # Once the group is idle, any decision stands.
    policy.decision = Decision("dflash", DecisionKind.EXPLORE)
    stream = await dispatcher.route(RouteHints(None, None), replace(request, request_id="e"),
                                    requested_max_tokens=5)
    assert stream.mode == "dflash"
    await stream.aclose()


async def test_prompt_lookup_learns_from_answers_other_modes_wrote() -> None:
    """An answer that copies its prompt teaches the prompt-lookup mode that it drafts
    well there, whichever mode served it (its acceptance is a function of the text);
    a request it served itself is learned once, from its engine's own counts."""
    engines = fake_engines()
    for engine in engines.values():
        await engine.start()
    state = SharedPolicyState(MemoryStore(), "r")
    info = {**FAKE_MODE_INFO, "ngram": ModeInfo("ngram", 4, lookup=LookupParams(1, 2, 4))}
    dispatcher = Dispatcher(engines, RecordingPolicy(), state, info)
    # The fake engine answers 1000, 1001, ...: a copy of this prompt's passage.
    passage = tuple(range(1000, 1040))
    request = GenerationRequest("copy", (*passage, 5), SamplingOptions(max_tokens=32))
    stream = await dispatcher.open(dispatcher.decide("standard", 41, 32, "copy"), request)
    assert [e async for e in stream.events()]
    learned = state.acceptance_for("copy", time.time())
    assert set(learned) == {"ngram"}            # plain decoding drafts nothing to learn
    assert learned["ngram"].mean_accepted_length > 4.0
    assert learned["ngram"].drafts == pytest.approx(7, abs=0.01)   # 31 tokens, 5 a step

    other = GenerationRequest("chat", (1, 2, 3), SamplingOptions(max_tokens=32))
    stream = await dispatcher.open(dispatcher.decide("eagle3", 3, 32, "chat"), other)
    assert [e async for e in stream.events()]
    chat = state.acceptance_for("chat", time.time())
    assert chat["ngram"].mean_accepted_length == 1.0
    assert chat["eagle3"].requests == pytest.approx(1, abs=0.01)

    served = GenerationRequest("own", (*passage, 5), SamplingOptions(max_tokens=32))
    before = learned["ngram"].requests
    stream = await dispatcher.open(dispatcher.decide("ngram", 41, 32, "copy"), served)
    assert [e async for e in stream.events()]
    assert state.acceptance_for("copy", time.time())["ngram"].requests == \
        pytest.approx(before + 1, abs=0.01)
