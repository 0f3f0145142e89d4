"""The engine supervisor: a dead in-process engine comes back; a remote one is left alone."""

from __future__ import annotations

import asyncio

from engines.supervisor import EngineSupervisor
from tests.fakes.engine import FakeEngine


async def started(*engines: FakeEngine) -> dict[str, FakeEngine]:
    for e in engines:
        await e.start()
    return {e.mode: e for e in engines}


async def test_a_dead_engine_is_restarted_and_the_others_untouched() -> None:
    engines = await started(FakeEngine("standard", restartable=True),
                            FakeEngine("eagle3", restartable=True))
    restarts: list[tuple[str, bool]] = []
    supervisor = EngineSupervisor(engines, observers=[lambda m, ok: restarts.append((m, ok))])
    engines["standard"].die()
    await supervisor.check_once(now=100.0)
    assert engines["standard"].is_up and engines["standard"].starts == 2
    assert engines["eagle3"].starts == 1
    assert restarts == [("standard", True)]


async def test_an_engine_that_keeps_failing_is_retried_with_growing_backoff() -> None:
    engine = FakeEngine("dflash", restartable=True)
    engines = await started(engine)
    supervisor = EngineSupervisor(engines, first_backoff_s=5.0)
    engine.die()
    engine.failing_starts = 2
    await supervisor.check_once(now=0.0)
    assert not engine.is_up and engine.starts == 2
    # Within the backoff nothing is tried; the clock is the supervisor's own.
    await supervisor.check_once(now=0.0)
    assert engine.starts == 2
    health = supervisor._health["dflash"]
    first_wait = health.next_try
    await supervisor.check_once(now=first_wait + 0.01)      # second failure
    assert engine.starts == 3 and not engine.is_up
    assert supervisor._health["dflash"].next_try - first_wait >= 9.0   # 10 s: doubled
    await supervisor.check_once(now=supervisor._health["dflash"].next_try + 0.01)
    assert engine.is_up and engine.starts == 4
    await supervisor.check_once(now=1e9)
    assert "dflash" not in supervisor._health                  # healthy again: forgotten


async def test_engines_that_cannot_restart_are_left_alone() -> None:
    remote = FakeEngine("standard", restartable=False)
    engines = await started(remote)
    remote.die()
    await EngineSupervisor(engines).check_once(now=0.0)
    assert remote.starts == 1 and not remote.is_up


class HangingStart(FakeEngine):
    """Its next start never finishes (a worker stuck loading)."""

    hang = False

    async def start(self) -> None:
        if self.hang:
            self.starts += 1
            await asyncio.Event().wait()
        await super().start()


async def test_a_restart_that_hangs_is_given_up_and_retried_later() -> None:
    engine = HangingStart("eagle3", restartable=True)
    engines = await started(engine)
    restarts: list[tuple[str, bool]] = []
    supervisor = EngineSupervisor(engines, start_timeout_s=0.05,
                                  observers=[lambda m, ok: restarts.append((m, ok))])
    engine.die()
    engine.hang = True
    await asyncio.wait_for(supervisor.check_once(now=0.0), timeout=5)   # bounded
    assert restarts == [("eagle3", False)] and not engine.is_up
    engine.hang = False
    await supervisor.check_once(now=supervisor._health["eagle3"].next_try + 0.01)
    assert engine.is_up and restarts[-1] == ("eagle3", True)
