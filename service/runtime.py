"""What the app holds at run time, and its start-up sequence.

Start-up runs in the background so that ``/health`` answers (and ``/ready``
says 503 with details) while the model is prepared and engines load, which
takes minutes; requests that arrive before their engine is up get a clear 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from engines.base import Engine
from engines.supervisor import EngineSupervisor, start_within
from engines.tokenizer import Tokenizer
from engines.tool_calls import ToolCallParser
from policies.base import Policy
from policies.bounded import bounded, stop_tasks
from policies.shared_state import SharedPolicyState
from policies.store.base import PolicyStore, ReplicaLoad, StoreUnavailable
from service.admission import Admission, shutting_down
from service.arrivals import Arrivals
from service.containment import Containment
from service.dispatch import Dispatcher
from service.drain import Drain
from service.errors import Unavailable
from service.mode_info import ModeInfo
from service.moves import Mover
from service.serving import Limits, Serving
from service.stream import CompletionObserver, Move, Routing

log = logging.getLogger(__name__)

# How long the cancelled engine supervisor may take to end at shutdown.
STOP_SUPERVISOR_S = 5.0
# How long a cancelled background task (engine boot, store sync) may take to end.
STOP_TASKS_S = 5.0


@dataclass(frozen=True)
class Components:
    """Everything a model needs to be served; engines may not be started yet."""

    model_name: str
    tokenizer: Tokenizer
    engines: Mapping[str, Engine]
    max_model_len: int
    mode_info: Mapping[str, ModeInfo] = field(default_factory=dict)
    # Shared resources to release after the engines (e.g. the remote engines' client).
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Reads tool calls out of generated text; None: requests with tools are refused.
    tool_parser: ToolCallParser | None = None


ComponentsLoader = Callable[[], Awaitable[Components]]


class Runtime:
    """Everything a running gateway holds: engines, policy and its shared state, the
    store, admission, and (once started) what serves requests."""

    def __init__(self, model_name: str, policy: Policy, state: SharedPolicyState,
                 store: PolicyStore, max_n: int, load: ComponentsLoader, *,
                 admission: Admission | None = None, request_timeout_s: float = 0.0,
                 keepalive_s: float = 0.0, drain_timeout_s: float = 0.0,
                 final_sync_s: float = 2.0, engine_start_timeout_s: float = 0.0,
                 move_min_remaining_tokens: int | None = None,
                 fault_hold_s: float = 600.0, max_failovers: int = 2,
                 burst_window_s: float = 0.0) -> None:
        self.model_name = model_name
        self.state = state
        self.store = store
        self.final_sync_s = final_sync_s
        self.engine_start_timeout_s = engine_start_timeout_s
        # None: requests in flight stay where they started (service/moves.py).
        self.move_min_remaining_tokens = move_min_remaining_tokens
        self.containment = Containment(fault_hold_s)
        self.max_failovers = max_failovers
        self.burst_window_s = burst_window_s
        self._tasks: list[asyncio.Task[None]] = []
        self.created = int(time.time())
        self.policy = policy
        self.max_n = max_n
        self.admission = admission or Admission()
        self.drain = Drain(self.admission, drain_timeout_s)
        self.request_timeout_s = request_timeout_s
        self.keepalive_s = keepalive_s
        self._load = load
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.engines: Mapping[str, Engine] = {}
        self._serving: Serving | None = None
        self.phase = "starting"
        self.error: str | None = None
        self.completion_observers: list[CompletionObserver] = []
        self.decision_observers: list[Callable[[Routing], None]] = []
        self.move_observers: list[Callable[[Move], None]] = []
        self.failover_observers: list[Callable[[Move], None]] = []
        # Called with (mode, restarted) after each attempt to bring back a dead engine.
        self.restart_observers: list[Callable[[str, bool], None]] = []
        self._supervisor: asyncio.Task[None] | None = None

    def _mover(self, components: Components) -> Mover | None:
        if self.move_min_remaining_tokens is None:
            return None
        info = components.mode_info
        return Mover(lambda mode: info[mode].gpu_group if mode in info else "0",
                     min_remaining_tokens=self.move_min_remaining_tokens)

    def serving(self) -> Serving:
        """What serves requests, once every engine has started."""
        if self.admission.closed:
            raise shutting_down()
        if self._serving is None:
            if self.error is not None:
                raise Unavailable("the gateway failed to start; see its log",
                                  code="startup_failed")
            raise Unavailable("the gateway is starting; retry in a few seconds",
                              code="starting")
        return self._serving

    @property
    def ready(self) -> bool:
        return (self.phase == "ready" and not self.admission.closed
                and all(e.is_up for e in self.engines.values()))

    async def start(self) -> None:
        """Adopt the shared live settings (or publish ours), then load the model and
        start the engines and the store sync in the background."""
        await self._adopt_or_publish_settings()
        self._tasks = [asyncio.create_task(self.boot()), asyncio.create_task(self.state.run())]

    async def stop(self) -> None:
        """Every step is bounded: a shutdown must end even with the store gone,
        black-holed or flapping (a lost cancellation once hung it for good)."""
        # Drained already under ``gateway.shutdown.DrainingServer``; under any other
        # server whatever is still in flight is stopped cleanly here, not cut off.
        self.drain.stop_now()
        self.state.stop()
        await stop_tasks(self._tasks, STOP_TASKS_S, "background task")
        await self.shutdown()
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            # last observations and decisions
            await bounded(self.state.sync_once, self.final_sync_s)
        with contextlib.suppress(TimeoutError):
            await bounded(self.store.close, self.final_sync_s)

    async def _adopt_or_publish_settings(self) -> None:
        """Shared live settings win; the first replica to find none publishes its own."""
        state = self.state
        if not await state.sync_once():
            log.warning("policy store unreachable at start-up; using configured settings")
            return
        if state.remote_state().settings_version == 0:
            with contextlib.suppress(StoreUnavailable):
                await state.update_settings(state.settings)

    async def boot(self) -> None:
        try:
            components = await self._load()
            self.engines = components.engines
            self._closers = list(components.closers)
            limits = Limits(max_model_len=components.max_model_len, max_n=self.max_n,
                            request_timeout_s=self.request_timeout_s,
                            keepalive_s=self.keepalive_s)
            dispatcher = Dispatcher(components.engines, self.policy, self.state,
                                    components.mode_info, observers=self.completion_observers,
                                    decision_observers=self.decision_observers,
                                    admission=self.admission, mover=self._mover(components),
                                    move_observers=self.move_observers,
                                    containment=self.containment,
                                    max_failovers=self.max_failovers,
                                    failover_observers=self.failover_observers,
                                    arrivals=Arrivals(self.burst_window_s))
            self.state.load_provider = lambda: self.replica_load(dispatcher)
            self._serving = Serving(dispatcher, self.model_name, limits, components.tokenizer,
                                    components.tool_parser)
            # One at a time: each vLLM engine sizes itself against the memory
            # that is free when it starts.
            for name, engine in components.engines.items():
                self.phase = f"starting engine {name}"
                log.info("starting engine %r ...", name)
                began = time.monotonic()
                await start_within(engine, self.engine_start_timeout_s)
                log.info("engine %r up in %.1f s", name, time.monotonic() - began)
            self.phase = "ready"
            # Only once every engine started: before that, "not up" means "starting".
            supervisor = EngineSupervisor(components.engines,
                                          observers=self.restart_observers,
                                          start_timeout_s=self.engine_start_timeout_s)
            self._supervisor = asyncio.create_task(supervisor.run())
            log.info("all %d engines up; ready", len(components.engines))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.phase = "failed"
            self.error = f"{type(e).__name__}: {e}"
            log.exception("start-up failed")

    def replica_load(self, dispatcher: Dispatcher) -> ReplicaLoad:
        modes = {}
        profiles = {}
        for name, engine in self.engines.items():
            s = engine.stats()
            modes[name] = s.load()
            profiles[name] = {str(b): [sec, float(n)] for b, sec, n in s.step_profile}
        return ReplicaLoad(self.state.replica_id, time.time(), modes, profiles)

    @property
    def dispatcher(self) -> Dispatcher | None:
        return self._serving.dispatcher if self._serving is not None else None

    async def shutdown(self) -> None:
        if self._supervisor is not None:
            await stop_tasks([self._supervisor], STOP_SUPERVISOR_S, "engine supervisor")
        for name, engine in self.engines.items():
            try:
                await engine.shutdown()
            except Exception:
                log.exception("engine %r did not shut down cleanly", name)
        for close in self._closers:
            await close()
