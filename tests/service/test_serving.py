"""Serving without HTTP: the checks before any engine work, one routing call, and the
typed stream (deltas, idle ticks, the end) that the gateway shapes and frames."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from engines.events import Finished
from engines.request import SamplingOptions
from engines.tokenizer import Tokenizer
from policies.rule import RulePolicy
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore
from service.dispatch import Dispatcher
from service.errors import InvalidRequest, ModelNotFound
from service.pump import Idle
from service.serving import Delta, Endpoint, Limits, RoutingHeaders, Serving
from tests.conftest import FAKE_MODE_INFO, MODEL, fake_engines
from tests.fakes.engine import FakeEngine, FakeTokenizer


@dataclass(frozen=True)
class Wire:
    """The least a wire request carries (the gateway's are pydantic models)."""

    text: str = "hello"
    model: str = MODEL
    n: int | None = None
    stream: bool | None = False
    cache_salt: str | None = None
    metadata: Mapping[str, str] | None = None
    max_tokens: int | None = 6


class TextEndpoint(Endpoint[Wire]):
    id_prefix = "t"

    def prompt_token_ids(self, wire: Wire, tokenizer: Tokenizer, max_model_len: int) -> list[int]:
        return tokenizer.encode(wire.text)

    def sampling_extras(self, wire: Wire) -> tuple[int | None, int | None]:
        return wire.max_tokens, None

    def sampling(self, wire: Wire, *, max_tokens: int, n: int, logprobs: int | None,
                 vocab_size: int) -> SamplingOptions:
        return SamplingOptions(max_tokens=max_tokens, n=n, temperature=0.0)


async def serving(token_delay_s: float = 0.0, keepalive_s: float = 0.0,
                  max_model_len: int = 64) -> tuple[Serving, dict[str, FakeEngine]]:
    engines = fake_engines(token_delay_s=token_delay_s)
    for engine in engines.values():
        await engine.start()
    dispatcher = Dispatcher(engines, RulePolicy(), SharedPolicyState(MemoryStore(), "r"),
                            FAKE_MODE_INFO)
    limits = Limits(max_model_len=max_model_len, max_n=2, keepalive_s=keepalive_s)
    return Serving(dispatcher, MODEL, limits, FakeTokenizer()), engines


@pytest.mark.parametrize(("wire", "error", "param"), [
    (Wire(model="gpt-4"), ModelNotFound, "model"),
    (Wire(text=""), InvalidRequest, "prompt"),
    (Wire(max_tokens=100), InvalidRequest, "max_tokens"),      # 5 + 100 > 64
    (Wire(n=3), InvalidRequest, "n"),
])
async def test_bad_requests_are_refused_before_any_engine_work(
        wire: Wire, error: type[Exception], param: str) -> None:
    s, engines = await serving()
    with pytest.raises(error) as e:
        await s.start(TextEndpoint(), wire, RoutingHeaders())
    assert e.value.param == param
    assert all(not engine.served for engine in engines.values())


async def test_collect_runs_the_call_to_its_end() -> None:
    s, engines = await serving()
    call = await s.start(TextEndpoint(), Wire(n=2), RoutingHeaders(spec_mode="ngram"))
    assert call.id.startswith("t-") and call.stream.routing.forced
    finished = await s.collect(call)
    assert finished.completion_tokens == 12
    assert [c.tokens for c in call.choices] == [6, 6]
    assert all(c.finish_reason == "length" for c in call.choices)
    assert [r.request_id for r in engines["ngram"].served] == [call.id]
    assert s.dispatcher.in_flight() == {}


async def test_events_tick_while_silent_and_end_with_the_finish() -> None:
    s, _ = await serving(token_delay_s=0.05, keepalive_s=0.01)
    call = await s.start(TextEndpoint(), Wire(max_tokens=2, stream=True), RoutingHeaders())
    items = [item async for item in s.events(call)]
    assert any(isinstance(i, Idle) for i in items)
    deltas = [i for i in items if isinstance(i, Delta)]
    assert sum(len(d.event.token_ids) for d in deltas) == 2
    assert isinstance(items[-1], Finished) and items[-1].completion_tokens == 2
    assert call.tokens_so_far() == (5, 2)
    assert s.dispatcher.in_flight() == {}
