"""An engine dies under requests in flight: each continues on another engine
(``service/failover.py``) and its reader sees one whole response."""

from __future__ import annotations

from engines.events import Failed, Finished, TextDelta
from engines.request import GenerationRequest, SamplingOptions, StructuredOutput
from policies.base import DecisionKind
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from service.admission import Admission
from service.dispatch import Dispatcher
from service.route_hints import RouteHints
from service.stream import Move, OpenStream
from tests.conftest import FAKE_MODE_INFO, fake_engines
from tests.fakes.engine import FakeEngine
from tests.service.test_moves import ScriptedPolicy, unmoved_text

PROMPT = (1, 2, 3)


async def setup(max_failovers: int = 2, per_mode: int = 0
                ) -> tuple[Dispatcher, ScriptedPolicy, dict[str, FakeEngine], list[Move]]:
    engines = fake_engines(token_delay_s=0.01)
    for engine in engines.values():
        await engine.start()
    policy = ScriptedPolicy()
    failovers: list[Move] = []
    dispatcher = Dispatcher(engines, policy, SharedPolicyState(MemoryStore(), "r"),
                            FAKE_MODE_INFO, admission=Admission(per_mode=per_mode),
                            max_failovers=max_failovers, failover_observers=[failovers.append])
    return dispatcher, policy, engines, failovers


async def read(stream: OpenStream, deltas: int | None = None) -> tuple[str, Finished | None]:
    """The text of the next ``deltas`` deltas (None: to the end), and the end if reached;
    the stream stays open."""
    text = ""
    while deltas is None or deltas > 0:
        event = await stream.next()
        if isinstance(event, TextDelta):
            text += event.text
            deltas = None if deltas is None else deltas - 1
        elif isinstance(event, Finished):
            await stream.aclose()
            return text, event
        else:
            raise AssertionError(f"unexpected {event!r}")
    return text, None


async def end(stream: OpenStream) -> Failed | Finished:
    """Read to the terminal event."""
    event = await stream.next()
    while isinstance(event, TextDelta):
        event = await stream.next()
    await stream.aclose()
    assert isinstance(event, Failed | Finished)
    return event


async def start(dispatcher: Dispatcher, mode: str | None, max_tokens: int = 20,
                request_id: str = "r", **sampling: object) -> OpenStream:
    request = GenerationRequest(request_id, PROMPT,
                                SamplingOptions(max_tokens=max_tokens, **sampling))  # type: ignore[arg-type]
    return await dispatcher.route(RouteHints(mode, None), request,
                                  requested_max_tokens=max_tokens)


async def test_a_stream_whose_engine_dies_finishes_on_plain_decoding_as_one_answer() -> None:
    dispatcher, policy, engines, failovers = await setup()
    policy.mode = "ngram"
    stream = await start(dispatcher, None)
    before, _ = await read(stream, deltas=5)
    engines["ngram"].die()
    after, finished = await read(stream)
    assert before + after == unmoved_text(20)     # greedy text unchanged across the seam
    assert finished is not None and finished.completion_tokens == 20   # usage once
    assert finished.prompt_tokens == len(PROMPT)
    assert stream.mode == "standard" and stream.failovers == 1 and stream.moves == 1
    assert stream.routing.decision.kind is DecisionKind.FAILOVER
    assert stream.routing.decision.reason == "failover:standard"
    [move] = failovers
    assert (move.source, move.target) == ("ngram", "standard") and move.tokens_so_far >= 5
    # The continuation is the prompt and the answer so far.
    served = engines["standard"].served[-1]
    assert served.prompt_token_ids[:3] == PROMPT and len(served.prompt_token_ids) > 3
    assert dispatcher.admission.in_flight("standard") == 0


async def test_a_forced_request_fails_over_too_and_says_so() -> None:
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "eagle3")
    before, _ = await read(stream, deltas=3)
    engines["eagle3"].die()
    after, finished = await read(stream)
    assert before + after == unmoved_text(20) and finished is not None
    assert stream.mode == "standard" and stream.routing.forced
    assert [(m.source, m.target) for m in failovers] == [("eagle3", "standard")]


async def test_without_plain_decoding_a_plain_request_takes_the_least_busy_other_mode() -> None:
    dispatcher, _, engines, _ = await setup()
    engines["standard"].die()
    busy = await start(dispatcher, "ngram", request_id="busy")
    stream = await start(dispatcher, "eagle3")
    await read(stream, deltas=2)
    engines["eagle3"].die()
    _, finished = await read(stream)
    assert finished is not None and stream.mode == "dflash"
    await busy.aclose()


async def test_a_request_with_needs_continues_only_on_plain_decoding() -> None:
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "dflash", temperature=0.8, top_k=5)
    await read(stream, deltas=2)
    engines["dflash"].die()
    _, finished = await read(stream)
    assert finished is not None and stream.mode == "standard"
    # With plain decoding down too, it ends with the error it got before failover.
    await engines["dflash"].start()
    engines["standard"].die()
    stream = await start(dispatcher, "ngram", request_id="r2", temperature=0.8, top_k=5)
    await read(stream, deltas=2)
    engines["ngram"].die()
    event = await end(stream)
    assert isinstance(event, Failed) and event.engine_died and stream.mode == "ngram"
    assert len(failovers) == 1


async def test_a_constrained_request_takes_a_speculative_mode_when_plain_is_down() -> None:
    """JSON schema and tools are served on every mode: without plain decoding, a
    non-streaming constrained request starts again on a speculative engine."""
    dispatcher, _, engines, failovers = await setup()
    engines["standard"].die()
    stream = await start(dispatcher, "ngram", structured=StructuredOutput("json_object"))
    stream.buffered = True
    await read(stream, deltas=2)
    engines["ngram"].die()
    text, finished = await read(stream)
    assert finished is not None and text == unmoved_text(20) and stream.restarts == 1
    assert stream.mode in ("eagle3", "dflash")
    assert [m.source for m in failovers] == ["ngram"]


async def test_a_pending_move_gives_way_to_the_failover_rules() -> None:
    """An engine dying under a request already bound for another engine: the move's
    slot is given back and the failover rules choose (plain decoding first)."""
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "ngram")
    await read(stream, deltas=2)
    ticket = dispatcher.admission.reserve_move("dflash", stream.routing.workload_class)
    assert ticket is not None
    stream._target = ("dflash", ticket)          # reserved, not yet taken
    engines["ngram"].die()
    _, finished = await read(stream)
    assert finished is not None and stream.mode == "standard"
    assert [(m.source, m.target) for m in failovers] == [("ngram", "standard")]
    assert dispatcher.admission.in_flight("dflash") == 0


async def test_the_kind_of_request_that_killed_an_engine_is_still_kept_off_it() -> None:
    dispatcher, _, engines, _ = await setup()
    engines["dflash"].killed_by = frozenset({"top_k"})
    # Killed before its first event: it starts again on plain decoding.
    stream = await start(dispatcher, "dflash", temperature=0.8, top_k=5)
    assert stream.mode == "standard" and isinstance(stream.first, TextDelta)
    _, finished = await read(stream)
    assert finished is not None and finished.completion_tokens == 20
    await engines["dflash"].start()
    assert dispatcher.refusal("dflash", frozenset({"top_k", "temperature"})) is not None


async def test_a_stream_that_cannot_resume_fails_once_its_client_has_output() -> None:
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "ngram", stop=("zzz",))   # stop strings: no resuming
    await read(stream, deltas=3)
    engines["ngram"].die()
    assert isinstance(await end(stream), Failed) and not failovers


async def test_a_buffered_request_that_cannot_resume_starts_again_elsewhere() -> None:
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "ngram", stop=("zzz",))
    stream.buffered = True
    await read(stream, deltas=3)
    engines["ngram"].die()
    text, finished = await read(stream)
    assert stream.restarts == 1 and stream.mode == "standard"
    assert text == unmoved_text(20)             # the whole answer, from its start
    assert finished is not None and finished.completion_tokens == 20
    assert engines["standard"].served[-1].prompt_token_ids == PROMPT
    assert len(failovers) == 1


async def test_failovers_are_bounded_and_can_be_turned_off() -> None:
    dispatcher, _, engines, failovers = await setup(max_failovers=1)
    stream = await start(dispatcher, "ngram")
    await read(stream, deltas=2)
    engines["ngram"].die()
    await read(stream, deltas=2)
    assert stream.mode == "standard"
    engines["standard"].die()                     # its second engine dies too
    assert isinstance(await end(stream), Failed) and len(failovers) == 1

    dispatcher, _, engines, failovers = await setup(max_failovers=0)
    stream = await start(dispatcher, "ngram")
    await read(stream, deltas=2)
    engines["ngram"].die()
    assert isinstance(await end(stream), Failed) and not failovers


async def test_no_room_anywhere_means_the_error_of_old() -> None:
    dispatcher, _, engines, _ = await setup(per_mode=1)
    others = [await start(dispatcher, m, request_id=m, max_tokens=200)
              for m in ("standard", "eagle3", "dflash")]
    stream = await start(dispatcher, "ngram")
    await read(stream, deltas=2)
    engines["ngram"].die()
    assert isinstance(await end(stream), Failed)
    for other in others:
        await other.aclose()


async def test_a_finished_request_is_not_disturbed() -> None:
    dispatcher, _, engines, failovers = await setup()
    stream = await start(dispatcher, "ngram", max_tokens=3)
    _, finished = await read(stream)
    engines["ngram"].die()
    assert isinstance(finished, Finished) and not failovers
