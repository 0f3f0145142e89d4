"""Auto routing with the adaptive policy, through the gateway with fake engines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from engines.request import GenerationRequest, SamplingOptions
from gateway.dispatch import Dispatcher
from gateway.settings import Settings
from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import Decision, DecisionInput, DecisionKind
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from tests.conftest import FAKE_MODE_INFO, MODEL, FakeGateway, fake_engines, serve


@pytest.fixture
async def adaptive(request: pytest.FixtureRequest) -> AsyncIterator[FakeGateway]:
    settings = Settings(policy={"adaptive": {"exploration_share": 0.0}})  # type: ignore[arg-type]
    async for g in serve(fake_engines(), settings=settings):
        yield g


def chat(max_tokens: int = 100) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}


async def test_decision_header_gives_reason_and_margin(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200
    reason = r.headers["x-spec-decision"]
    assert reason.split(":")[0] in {"cost", "hold"}
    assert reason.endswith("%")


async def test_forced_traffic_teaches_auto(adaptive: FakeGateway) -> None:
    """The fakes accept 80% (dflash) vs 30% (eagle3) and 60% (ngram) of drafts."""
    for mode in ("eagle3", "ngram", "dflash"):
        for _ in range(6):
            r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                           headers={"x-spec-mode": mode,
                                                    "x-workload-class": "code"})
            assert r.headers["x-spec-decision"] == "override"
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "code"})
    assert r.headers["x-spec-mode"] == "dflash"


async def test_short_outputs_go_plain(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(max_tokens=1))
    assert r.headers["x-spec-mode"] == "standard"


async def test_bad_workload_class_is_400(adaptive: FakeGateway) -> None:
    r = await adaptive.client.post("/v1/chat/completions", json=chat(),
                                   headers={"x-workload-class": "no spaces allowed"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-workload-class"
    body = {**chat(), "metadata": {"workload_class": "x" * 100}}
    r = await adaptive.client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "metadata.workload_class"


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
