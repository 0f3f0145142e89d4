"""Moving requests in flight: when auto switches a device group, its requests on the
old mode continue on the new one and their readers see one uninterrupted response."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engines.events import Finished, TextDelta
from engines.request import GenerationRequest, SamplingOptions
from policies.base import Decision, DecisionInput, DecisionKind, Policy
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from service.admission import Admission
from service.dispatch import Dispatcher
from service.moves import Mover
from service.pump import Interrupted
from service.stream import Move, OpenStream
from tests.conftest import FAKE_MODE_INFO, fake_engines
from tests.fakes.engine import WORDS, FakeEngine

PROMPT = (1, 2, 3)


class ScriptedPolicy(Policy):
    """Chooses, on cost, the mode it is told to."""

    name = "scripted"

    def __init__(self) -> None:
        self.mode = "standard"
        self.kind = DecisionKind.COST

    def decide(self, inputs: DecisionInput) -> Decision:
        return Decision(self.mode, self.kind, margin=0.2, leader=self.mode)


async def setup(per_mode: int = 0, min_remaining: int = 4
                ) -> tuple[Dispatcher, ScriptedPolicy, dict[str, FakeEngine], list[Move]]:
    engines = fake_engines(token_delay_s=0.01)
    for engine in engines.values():
        await engine.start()
    policy = ScriptedPolicy()
    moves: list[Move] = []
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"),
                            FAKE_MODE_INFO, admission=Admission(per_mode=per_mode),
                            mover=Mover(lambda m: FAKE_MODE_INFO[m].gpu_group,
                                        min_remaining_tokens=min_remaining),
                            move_observers=[moves.append])
    return dispatcher, policy, engines, moves


async def open_auto(dispatcher: Dispatcher, request_id: str, max_tokens: int = 20,
                    **sampling: object) -> OpenStream:
    request = GenerationRequest(request_id, PROMPT,
                                SamplingOptions(max_tokens=max_tokens, **sampling))  # type: ignore[arg-type]
    return await dispatcher.open(dispatcher.decide(None, len(PROMPT), max_tokens, "chat"),
                                 request)


async def read(stream: OpenStream, deltas: int | None = None) -> tuple[str, Finished | None]:
    text = ""
    async for event in stream.events():
        if isinstance(event, TextDelta):
            text += event.text
            if deltas is not None:
                deltas -= 1
                if deltas == 0:
                    return text, None
        elif isinstance(event, Finished):
            return text, event
    return text, None


def unmoved_text(tokens: int) -> str:
    return "".join(WORDS[i % len(WORDS)] for i in range(tokens))


async def test_a_moved_request_reads_as_one_response() -> None:
    dispatcher, policy, engines, moves = await setup()
    stream = await open_auto(dispatcher, "a")
    assert stream.mode == "standard"
    head, _ = await read_some(stream, 5)
    policy.mode = "eagle3"  # auto switches the group: the next decision moves "a" along
    other = await open_auto(dispatcher, "b", max_tokens=2)
    tail, finished = await read(stream)
    await read(other)
    assert head + tail == unmoved_text(20)
    assert finished is not None
    assert (finished.prompt_tokens, finished.completion_tokens) == (len(PROMPT), 20)
    assert stream.mode == "eagle3" and stream.moves == 1
    assert stream.routing.decision.kind is DecisionKind.MOVE
    assert "a" in engines["standard"].aborted
    continued = next(r for r in engines["eagle3"].served if r.request_id == "a-m1")
    done = len(continued.prompt_token_ids) - len(PROMPT)
    assert done >= 5 and continued.sampling.max_tokens == 20 - done
    assert moves == [Move("a", "standard", "eagle3", done, done, "chat")]
    assert dispatcher.in_flight() == {}


async def read_some(stream: OpenStream, deltas: int) -> tuple[str, None]:
    text = ""
    while deltas:
        event = await stream.next()
        assert isinstance(event, TextDelta)
        text += event.text
        deltas -= 1
    return text, None


@pytest.mark.parametrize("moved", [False, True])
async def test_a_drain_stops_a_stream_on_the_engine_it_runs_on_now(moved: bool) -> None:
    """Shutdown interrupts every admitted request through its slot: a moved stream's
    slot on its new engine stops the new engine's request, not the old one's."""
    dispatcher, policy, engines, _ = await setup()
    stream = await open_auto(dispatcher, "a", max_tokens=200)
    await read_some(stream, 5)
    if moved:
        policy.mode = "eagle3"
        await read(await open_auto(dispatcher, "b", max_tokens=2))
        await read_some(stream, 2)
        assert stream.mode == "eagle3"
    assert dispatcher.admission.interrupt_all("shutdown") == 1
    with pytest.raises(Interrupted):
        await read(stream)
    assert stream.mode == ("eagle3" if moved else "standard")
    assert not engines[stream.mode].running and dispatcher.in_flight() == {}


async def test_the_learned_acceptance_counts_only_what_the_new_mode_served() -> None:
    dispatcher, policy, _, _ = await setup()
    learned: list[tuple[str, int, int]] = []
    dispatcher.observers.append(lambda done: learned.append(
        (done.routing.decision.mode, done.finished.completion_tokens, done.moved_tokens)))
    stream = await open_auto(dispatcher, "a")
    await read_some(stream, 5)
    policy.mode = "eagle3"
    await open_auto(dispatcher, "b", max_tokens=2)
    await read(stream)
    mode, _total, moved = next(x for x in learned if x[1] == 20)
    assert mode == "eagle3" and 5 <= moved < 20


async def test_a_moved_request_teaches_its_class_the_whole_answers_length() -> None:
    """What the policy expects a class to write decides whether speculation pays: a
    moved request's answer is every token it was sent, not its last engine's part."""
    dispatcher, policy, _, _ = await setup()
    stream = await open_auto(dispatcher, "a")
    await read_some(stream, 5)
    policy.mode = "eagle3"
    await read(await open_auto(dispatcher, "b", max_tokens=2))
    await read(stream)
    assert stream.moves == 1
    state = dispatcher.state
    # "b" wrote 2 tokens and "a" 20: a mean of 11, not of 2 and what eagle3 served of "a".
    assert state.expected_output("chat", dispatcher.clock()) == pytest.approx(11.0, rel=0.01)


async def test_the_mode_a_request_moved_off_learns_what_it_served_of_it() -> None:
    """vLLM reports a request's draft counts only when it finishes; a moved request
    does not finish on the mode it left, whose acceptance must still grow from it (or
    a mode the group moved away from is judged on its prior from then on)."""
    dispatcher, policy, engines, moves = await setup()
    policy.mode = "eagle3"
    await read(await open_auto(dispatcher, "w", max_tokens=6))   # the engine's window
    before = dispatcher.state.acceptance_for("chat", dispatcher.clock())["eagle3"].drafts
    stream = await open_auto(dispatcher, "a")
    await read_some(stream, 8)
    policy.mode = "standard"
    await open_auto(dispatcher, "b", max_tokens=2)
    await read(stream)
    assert moves and moves[0].source == "eagle3" and moves[0].workload_class == "chat"
    assert moves[0].source_tokens >= 8
    learned = dispatcher.state.acceptance_for("chat", dispatcher.clock())["eagle3"]
    window = engines["eagle3"].stats().recent_mean_accepted_length
    assert window is not None
    # About source_tokens / window more draft steps than before the move.
    assert learned.drafts - before >= (moves[0].source_tokens - 1) / window - 1
    assert learned.mean_accepted_length == pytest.approx(window, rel=0.25)


async def test_forced_seeded_and_stopping_requests_finish_where_they_started() -> None:
    dispatcher, policy, _, moves = await setup()
    forced_request = GenerationRequest("f", PROMPT, SamplingOptions(max_tokens=20))
    forced = await dispatcher.open(dispatcher.decide("standard", 3, 20, "chat"), forced_request)
    seeded = await open_auto(dispatcher, "s", seed=7)
    stopping = await open_auto(dispatcher, "t", stop=("zebra",))
    for stream in (forced, seeded, stopping):
        await read_some(stream, 3)
    policy.mode = "eagle3"
    await open_auto(dispatcher, "b", max_tokens=2)
    for stream in (forced, seeded, stopping):
        _text, finished = await read(stream)
        assert finished is not None and finished.completion_tokens == 20
        assert stream.mode == "standard" and stream.moves == 0
    assert moves == []


async def test_no_move_without_room_or_when_little_is_left() -> None:
    dispatcher, policy, _, moves = await setup(per_mode=1, min_remaining=4)
    stream = await open_auto(dispatcher, "a")
    await read_some(stream, 3)
    policy.mode = "eagle3"
    newcomer = await open_auto(dispatcher, "b", max_tokens=20)  # takes eagle3's one slot
    _text, finished = await read(stream)
    assert finished is not None and stream.mode == "standard" and moves == []
    await read(newcomer)

    dispatcher, policy, _, moves = await setup(min_remaining=10)
    short = await open_auto(dispatcher, "c", max_tokens=12)
    await read_some(short, 4)                       # 8 left: under the bound
    policy.mode = "eagle3"
    await open_auto(dispatcher, "d", max_tokens=2)
    await read(short)
    assert short.moves == 0 and moves == []


async def test_a_move_asked_for_as_the_request_ends_gives_its_slot_back() -> None:
    dispatcher, _, _, _ = await setup()
    stream = await open_auto(dispatcher, "a", max_tokens=3)
    await read(stream)
    ticket = dispatcher.admission.reserve_move("eagle3", "chat")
    assert ticket is not None
    assert not stream.move("eagle3", ticket)
    assert dispatcher.in_flight() == {}


async def test_a_stream_closed_while_moving_leaves_no_slot_behind() -> None:
    dispatcher, _policy, _, _ = await setup()
    stream = await open_auto(dispatcher, "a")
    await read_some(stream, 2)
    ticket = dispatcher.admission.reserve_move("eagle3", "chat")
    assert ticket is not None and stream.move("eagle3", ticket)
    await stream.aclose()                           # the client left before the seam
    assert dispatcher.in_flight() == {}


def test_a_continuation_asks_for_what_is_left() -> None:
    from service.stream import can_move, continuation

    request = GenerationRequest("r", PROMPT, SamplingOptions(max_tokens=10, min_tokens=6))
    after = continuation(request, [1001, 1002, 1003, 1004], 1)
    assert after.prompt_token_ids == (*PROMPT, 1001, 1002, 1003, 1004)
    assert (after.sampling.max_tokens, after.sampling.min_tokens) == (6, 2)
    assert after.request_id == "r-m1"
    assert can_move(request)
    for change in ({"n": 2}, {"seed": 1}, {"stop": ("x",)}, {"presence_penalty": 0.5},
                   {"frequency_penalty": 0.5}):
        assert not can_move(replace(request, sampling=replace(request.sampling, **change)))  # type: ignore[arg-type]


async def test_an_exploration_is_measured_where_it_runs() -> None:
    dispatcher, policy, _, moves = await setup()
    policy.kind = DecisionKind.EXPLORE
    explored = await open_auto(dispatcher, "x")
    await read_some(explored, 3)
    policy.mode, policy.kind = "eagle3", DecisionKind.COST
    await open_auto(dispatcher, "b", max_tokens=2)
    await read(explored)
    assert explored.mode == "standard" and moves == []


async def test_an_exploration_in_a_group_whose_engines_take_turns_moves_with_it() -> None:
    """Left where it runs, it would run beside the group's new mode on the same
    cores; it moves, and its source learns what it served (``Learner.moved``)."""
    info = {m: replace(i, exclusive=True) for m, i in FAKE_MODE_INFO.items()}
    engines = fake_engines(token_delay_s=0.01)
    for engine in engines.values():
        await engine.start()
    policy = ScriptedPolicy()
    policy.kind = DecisionKind.EXPLORE
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"), info,
                            mover=Mover(lambda m: info[m].gpu_group, min_remaining_tokens=4))
    explored = await open_auto(dispatcher, "x")
    head, _ = await read_some(explored, 3)
    policy.mode, policy.kind = "eagle3", DecisionKind.COST
    await read(await open_auto(dispatcher, "b", max_tokens=2))
    tail, _ = await read(explored)
    assert head + tail == unmoved_text(20) and explored.mode == "eagle3"


async def test_no_move_off_a_mode_not_yet_measured_at_its_batch() -> None:
    """A cost decision before the old engine ran its batch rests on a prior; moving
    would keep that engine from ever measuring it (policies/move_costs.py)."""
    from policies.base import ModeLoad
    from policies.move_costs import cost_is_measured

    profile = ((1, 0.01, 5), (4, 0.012, 3))
    assert cost_is_measured(ModeLoad("m", True, 8, False, step_profile=profile))
    assert not cost_is_measured(ModeLoad("m", True, 9, False, step_profile=profile))
    assert not cost_is_measured(ModeLoad("m", True, 1, False))


async def test_a_request_waiting_for_its_first_event_follows_the_switch_once_it_has_it(
        ) -> None:
    """Its first event is read before the stream is handed out, and a move then would
    end the request: it is not interrupted, and moves once it has that event (a burst's
    first requests would otherwise run beside the engine their group switched to)."""
    import asyncio

    dispatcher, policy, engines, moves = await setup()
    await read(await open_auto(dispatcher, "warm", max_tokens=2))   # standard measured
    engines["standard"].token_delay_s = 0.2         # a slow first token
    first = asyncio.create_task(open_auto(dispatcher, "a"))
    await asyncio.sleep(0.05)
    policy.mode = "eagle3"
    await open_auto(dispatcher, "b", max_tokens=2)
    stream = await first                             # not interrupted
    engines["standard"].token_delay_s = 0.01
    text, finished = await read(stream)
    assert finished is not None and finished.completion_tokens == 20
    assert text == unmoved_text(20)
    assert stream.mode == "eagle3" and len(moves) == 1


async def test_a_request_decided_after_the_switch_does_not_follow_it() -> None:
    """Only a switch made after a stream's own decision moves it: a later decision
    (an exploration, a hold) stands."""
    dispatcher, policy, _, moves = await setup()
    await read(await open_auto(dispatcher, "warm", max_tokens=2))
    policy.mode = "eagle3"
    await read(await open_auto(dispatcher, "b", max_tokens=2))      # the switch
    policy.mode, policy.kind = "standard", DecisionKind.EXPLORE
    stream = await open_auto(dispatcher, "a")
    text, _ = await read(stream)
    assert text == unmoved_text(20) and stream.mode == "standard" and moves == []


@pytest.mark.parametrize("exclusive", [False, True])
async def test_an_exclusive_group_moves_its_requests_whatever_was_measured(
        monkeypatch: pytest.MonkeyPatch, exclusive: bool) -> None:
    """Left on an engine that has not measured its batch, requests in an exclusive
    CPU group would run beside the new engine on the same cores: there they move."""
    monkeypatch.setattr("service.moves.cost_is_measured", lambda load: False)
    info = {m: replace(i, exclusive=exclusive) for m, i in FAKE_MODE_INFO.items()}
    engines = fake_engines(token_delay_s=0.01)
    for engine in engines.values():
        await engine.start()
    policy = ScriptedPolicy()
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"), info,
                            mover=Mover(lambda m: info[m].gpu_group, min_remaining_tokens=4))
    assert dispatcher.moving_groups == (frozenset({"0"}) if exclusive else frozenset())
    stream = await open_auto(dispatcher, "a")
    head, _ = await read_some(stream, 3)
    policy.mode = "eagle3"
    await read(await open_auto(dispatcher, "b", max_tokens=2))
    tail, _ = await read(stream)
    assert head + tail == unmoved_text(20)
    assert stream.mode == ("eagle3" if exclusive else "standard")
